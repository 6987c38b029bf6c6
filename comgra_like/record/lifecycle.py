"""The recorder's lifecycle, published: its stage and the events of a training step.

A ``ComgraRecorder`` moves through three stages per training step: ``IDLE`` between
steps, ``BATCH`` inside ``start_batch() .. finish_batch()``, ``ITERATION`` inside
``start_iteration() .. finish_iteration()``. Drivers other than the training loop's own
calls (``watch()``'s hooks, the per-module metrics, the flight recorder, framework
callbacks) read the stage and the step through the recorder's read-only properties
(``stage``, ``is_recording``, ``finalized``, ``current_batch_size``, ``recorded_steps``,
``current_step``) and subscribe to its events instead of reading private fields.

Events, in the order of a step (Lightning's ``Callback`` is the model: a listener
overrides the methods it needs; the others do nothing):

- ``on_step_start(event)``: ``start_batch()`` has decided whether the step is recorded;
- ``on_step_end(event)``: ``finish_batch()`` has sent the step (or not recorded it);
- ``on_step_dropped(event)``: the open step ended without being recorded
  (``abort_batch()``, a refused decision, ``finalize()`` inside a step);
- ``on_finalize()``: ``finalize()`` is writing the last rows.

A listener's exception propagates to the caller of the recorder method that emitted the
event (the flight recorder's ``on_trigger="raise"`` relies on that); listeners that run
inside someone's training catch their own failures (``record/guard.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigurationError

if TYPE_CHECKING:
    import torch

    from .step import Step


class Stage(str, enum.Enum):
    """Where the recorder is in a training step (a ``str``: ``Stage.IDLE == "idle"``)."""

    IDLE = "idle"
    BATCH = "batch"
    ITERATION = "iteration"

    def __str__(self) -> str:  # "idle", as in the error messages before the enum
        return self.value

    def __repr__(self) -> str:  # 'idle'
        return repr(self.value)


@dataclass(frozen=True)
class StepEvent:
    """One training step as the recorder sees it."""

    training_step: int
    type_of_execution: str | None
    recording: bool  # whether the step is (still) being recorded


class StepListener:
    """Base class of a lifecycle listener: override what you need."""

    def on_step_start(self, event: StepEvent) -> None:
        """``start_batch()`` has decided whether the step is recorded."""

    def on_step_end(self, event: StepEvent) -> None:
        """``finish_batch()`` is done: the step was sent to the writer, or not recorded."""

    def on_step_dropped(self, event: StepEvent) -> None:
        """The open step ended without being recorded."""

    def on_finalize(self) -> None:
        """The recorder is finalizing: no step follows."""


class Lifecycle:
    """The listeners of one recorder, called in the order they subscribed."""

    def __init__(self) -> None:
        self._listeners: list[StepListener] = []

    def subscribe(self, listener: StepListener) -> Callable[[], None]:
        """Add ``listener``; returns a function that removes it again."""
        if not isinstance(listener, StepListener):
            raise ConfigurationError(
                "a lifecycle listener must subclass comgra_like.record.lifecycle."
                f"StepListener, got {type(listener).__name__}")
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def step_start(self, event: StepEvent) -> None:
        for listener in list(self._listeners):
            listener.on_step_start(event)

    def step_end(self, event: StepEvent) -> None:
        for listener in list(self._listeners):
            listener.on_step_end(event)

    def step_dropped(self, event: StepEvent) -> None:
        for listener in list(self._listeners):
            listener.on_step_dropped(event)

    def finalize(self) -> None:
        for listener in list(self._listeners):
            listener.on_finalize()


class LifecycleView:
    """The recorder's lifecycle, read-only, and its requests (a mixin of
    ``ComgraRecorder``: it reads the recorder's state)."""

    @property
    def stage(self) -> Stage:
        """``Stage.IDLE`` between steps, ``BATCH`` inside a step, ``ITERATION`` inside an
        iteration."""
        return self._stage

    @property
    def is_recording(self) -> bool:
        """Whether the open training step is being recorded (False between steps)."""
        return self._recording

    @property
    def finalized(self) -> bool:
        return self._finalized

    @property
    def current_batch_size(self) -> int:
        """The batch size given to ``start_batch()`` of the recorded step (0 otherwise)."""
        return self._batch_size if self._recording else 0

    @property
    def recorded_steps(self) -> int:
        """How many training steps were recorded and sent so far."""
        return self._recorded_steps

    @property
    def current_step(self) -> Step | None:
        """The open recorded step (``record.step.Step``), None when none is recorded."""
        return self._step

    def tracked_name(self, module: torch.nn.Module) -> str | None:
        """The full name ``module`` is tracked under, None when it is not tracked."""
        return self._modules.get(id(module))

    def subscribe(self, listener: StepListener):
        """Call ``listener``'s ``on_step_start``, ``on_step_end``, ``on_step_dropped`` and
        ``on_finalize`` (record/lifecycle.py); returns a function that unsubscribes it."""
        return self._lifecycle.subscribe(listener)

    def request_recording(self, steps: int) -> None:
        """Record the next ``steps`` training steps (of a known type of execution)
        whatever the decision maker says: the flight recorder after a trigger, a callback
        that wants the next steps in full. Requests add up."""
        if type(steps) is not int or steps < 0:
            raise ConfigurationError(
                f"request_recording(steps) needs a non-negative int, got {steps!r}")
        self._requested += steps

    def take_requested_recording(self) -> bool:
        """For a driver that decides steps itself (``watch()``): True, and one request
        fewer, when a step was requested by ``request_recording``."""
        if self._requested > 0:
            self._requested -= 1
            return True
        return False

    def _event(self) -> StepEvent:
        return StepEvent(self.training_step, self.type_of_execution, self._recording)
