"""The flight recorder (issue 30): on every training step, recorded or not, summary
statistics of every registered tensor, its gradient and each parameter's update, kept in
memory for the last ``window`` steps, and the full values of the last ``full_steps``
steps. A trigger (a non-finite value, a loss / gradient-norm / update-ratio spike, a
user predicate) writes the window into the trial's ``flight/`` folder
(``format/flight.py``) and makes the recorder record the next ``after`` steps in full.

Statistics are reduced where a tensor lives (sum, sum of squares, min and max; the
mean, std and L2 norm follow). On the CPU they are read at once (free there); NaN and Inf
are counted only for a tensor whose statistics are not finite. On a GPU a step's
statistics are stacked into one small tensor, copied to pinned memory without blocking,
and judged at the end of a later step once the copy has landed (at most
``_MAX_PENDING`` steps later), so training never waits for the GPU.

Nothing here raises into training: an internal failure logs once and disarms the flight
recorder (training goes on). The one exception on purpose is
:class:`~comgra_like.errors.FlightTriggerError` with ``on_trigger="raise"``, raised after
the window is written. See docs/FLIGHT.md.

The class is put together from its responsibilities, each a mixin in a module of its
own with its state on the recorder: the catalog of tensors and the step records
(``flight_catalog.py``), the observation of a step (``flight_observe.py``), the judging
of triggers with the cooldown (``flight_triggers_judge.py``), and the window's ring, full
values and writing (``flight_window.py``). This module keeps the configuration and the
wiring to the recorder that owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigurationError, NotFoundError
from ..format import flight as ff
from .flight_catalog import FlightCatalog, StepRecord
from .flight_observe import MAX_PENDING, FlightObserver, guarded
from .flight_replay import ReplayResult, StateKeeper, replay
from .flight_triggers_judge import FlightStep, TriggerJudge
from .flight_window import FlightWindow

__all__ = ["MAX_PENDING", "FlightRecorder", "FlightStep", "ReplayResult", "StateKeeper",
           "StepRecord", "guarded"]

_MAX_PENDING = MAX_PENDING  # the bound on GPU steps judged late, under its former name


class FlightRecorder(FlightObserver, TriggerJudge, FlightWindow, FlightCatalog):
    """Armed: statistics of every step in memory; on a trigger, the window is written.

    ``window``: steps of statistics kept. ``full_steps``: steps whose full values are kept
    (within ``max_full_bytes`` in all). ``after``: steps recorded in full after a
    trigger. ``triggers``: any of ``non_finite``, ``loss_spike``, ``grad_norm_spike``,
    ``update_spike``. A spike: a value above median + ``spike_mads`` x max(1.4826 MAD,
    ``spike_floor`` x |median|) of the window's earlier values, judged after ``warmup``
    steps. ``predicate(FlightStep)``: a trigger of its own when it returns something
    true. ``on_trigger``: "record" (write and go on) or "raise" (write, then raise
    FlightTriggerError). ``cooldown``: steps after a written window in which no other is
    written (default: ``window``). ``keep_state``: keep the parameters from before each
    of the last two steps on the host, for :meth:`replay`; ``optimizer`` (with it): the
    optimizer's state too (watch(optimizer=...) gives it).
    """

    def __init__(self, window: int = 64, full_steps: int = 2, after: int = 8,
                 triggers: Iterable[str] = (ff.NON_FINITE, ff.LOSS_SPIKE, ff.GRAD_NORM_SPIKE,
                                            ff.UPDATE_SPIKE),
                 *, predicate: Callable[[FlightStep], Any] | None = None,
                 on_trigger: str = "record", cooldown: int | None = None, warmup: int = 16,
                 spike_mads: float = 10.0, spike_floor: float = 0.05,
                 max_full_bytes: int = 256 * 2**20, updates: bool = True,
                 keep_state: bool = False, optimizer=None):
        for name, v, low in (("window", window, 2), ("full_steps", full_steps, 0),
                             ("after", after, 0), ("warmup", warmup, 2)):
            if type(v) is not int or v < low:
                raise ConfigurationError(
                    f"FlightRecorder({name}={v!r}): must be an integer >= {low}")
        triggers = tuple(triggers)
        unknown = [t for t in triggers if t not in ff.TRIGGER_KINDS or t == ff.PREDICATE]
        if unknown:
            raise ConfigurationError(
                f"FlightRecorder(triggers=...): unknown trigger {unknown[0]!r}; choose from "
                f"{', '.join(t for t in ff.TRIGGER_KINDS if t != ff.PREDICATE)} (a predicate "
                "is passed as predicate=)")
        if on_trigger not in ("record", "raise"):
            raise ConfigurationError(
                f"FlightRecorder(on_trigger={on_trigger!r}): choose 'record' (write the "
                "window and go on) or 'raise' (write it, then stop training with "
                "FlightTriggerError)")
        if predicate is not None and not callable(predicate):
            raise ConfigurationError("FlightRecorder(predicate=...) must be callable")
        if cooldown is not None and (type(cooldown) is not int or cooldown < 0):
            raise ConfigurationError(f"FlightRecorder(cooldown={cooldown!r}): an integer >= 0")
        if not (isinstance(spike_mads, (int, float)) and spike_mads > 0
                and isinstance(spike_floor, (int, float)) and spike_floor >= 0):
            raise ConfigurationError("FlightRecorder: spike_mads must be > 0, spike_floor >= 0")
        if type(max_full_bytes) is not int or max_full_bytes < 0:
            raise ConfigurationError("FlightRecorder(max_full_bytes=...): an integer >= 0")
        self.window, self.full_steps, self.after = window, full_steps, after
        self.triggers, self.predicate, self.on_trigger = frozenset(triggers), predicate, on_trigger
        self.cooldown = window if cooldown is None else cooldown
        self.warmup, self.spike_mads, self.spike_floor = warmup, float(spike_mads), float(spike_floor)
        self.max_full_bytes, self.updates = max_full_bytes, bool(updates)
        #: keep_state=True: the parameters (and the optimizers' state) before each of the
        #: last two steps, on the host (record/flight_replay.py; ``replay``).
        self.state = StateKeeper() if keep_state else None
        if optimizer is not None:
            self.keep_optimizer(optimizer)
        self._trial_path: Path | None = None
        self._rank = 0
        self._notify: Callable[[dict], Any] | None = None
        self._init_observer()
        self._init_catalog()
        self._init_window(window, full_steps)
        self._init_judge(window)

    # ----- wiring ------------------------------------------------------------------------

    def check_free(self) -> None:
        """A ConfigurationError when another recorder uses this flight recorder."""
        if self._trial_path is not None:
            raise ConfigurationError(
                "this FlightRecorder is attached to a recorder already; make one per recorder")

    def attach(self, trial_path: str | Path, rank: int = 0,
               notify: Callable[[dict], Any] | None = None) -> None:
        """Called by the recorder that owns this flight recorder (one recorder each).
        ``notify``: called with each trigger once its window is written, to name it in
        trial.json (the writer client's ``flight_trigger``); its failure is logged, never
        raised."""
        self.check_free()
        self._trial_path, self._rank = Path(trial_path), int(rank)
        self._notify = notify

    @property
    def armed(self) -> bool:
        return self._trial_path is not None and not self._broken

    def keep_optimizer(self, optimizer) -> None:
        """``keep_state=True``: keep this optimizer's state (or these optimizers') from
        before each step too, for :meth:`replay` (watch(optimizer=...) calls it)."""
        if self.state is None:
            raise ConfigurationError(
                "FlightRecorder(optimizer=...): the optimizer's state is kept for the "
                "replay; pass keep_state=True with it")
        opts = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        if not opts or not all(isinstance(o, torch.optim.Optimizer) for o in opts):
            raise ConfigurationError(
                "FlightRecorder(optimizer=...): a torch.optim.Optimizer or a list of them, "
                f"got {type(optimizer).__name__}")
        self.state.optimizers = opts

    def take_forced_recording(self) -> bool:
        """Whether the next step must be recorded in full (``after`` steps after a
        trigger); counts the step when it says yes."""
        if self._after_left > 0 and not self._broken:
            self._after_left -= 1
            return True
        return False

    def replay(self, model: torch.nn.Module, run_step, step: int | None = None,
               optimizer=None) -> ReplayResult:
        """``keep_state=True``: replay ``step`` (default: the last trigger's) on a fresh
        ``model`` with ``run_step(model)`` (forward, loss, backward), then, given a fresh
        ``optimizer`` built like the trained one over ``model``, its step from the kept
        optimizer state (record/flight_replay.py)."""
        if self.state is None:
            raise ConfigurationError("replay() needs FlightRecorder(keep_state=True)")
        if step is None:
            if not self.fired:
                raise NotFoundError("replay(): no trigger has fired yet; pass step=")
            step = int(self.fired[-1]["step"])
        return replay(self.state, step, model, run_step, optimizer)

    def steps_kept(self) -> list[int]:
        """The training steps whose statistics are in memory now (the window), oldest
        first."""
        return [r.step for r in self._ring]

    def take_after_steps(self) -> int:
        """The steps to record in full after a trigger, handed over at once (for a driver
        that asks its recorder with ``request_recording``, as watch() does); 0 when none
        are due."""
        steps, self._after_left = (self._after_left, 0) if not self._broken else (0, 0)
        return steps

