"""The gradient part of ``watch()``'s driver (``record/hooks.py``): hooks on the root's
outputs that note a backward pass and queue a callback for its end, where the step's
gradients are recorded (each backward of a step under its own loss group) and a
reentrant checkpoint's replay (``recompute.py``) is settled. A mixin of ``Watcher``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ..errors import ComgraError
from .flow import in_flow_pass
from .module_io import outputs_of
from .watch_settings import TRAINING

log = logging.getLogger("comgra_like")


class GradientHooks:
    """The end of each backward pass of a recorded step (see the module docstring)."""

    # ----- gradients --------------------------------------------------------------------

    def _watch_backward(self, output, hook) -> None:
        for _role, t in outputs_of(output):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(hook)

    def _mark_backward(self, grad):
        if not in_flow_pass():
            self.backward_seen = True

    def _on_gradient(self, grad):
        try:
            if not self._callback_queued and not in_flow_pass():  # a FlowChain's pass: skip
                self._callback_queued = True
                queue_after_backward(self._backward_done)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self._callback_queued = False
            self.guard.failed("a gradient hook", e)

    def _backward_done(self) -> None:
        """The backward pass has ended: every gradient of it is accumulated now."""
        self._callback_queued = False
        try:
            self._backward_done_work()
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the end of a backward pass", e)

    def _backward_done_work(self) -> None:
        self.backward_seen = True
        if self.open != TRAINING:
            return
        if self.recompute is not None and "io_grad" in self.s.log:
            self.got_gradient |= self.recompute.apply()  # before the gradients are read
        if self.s.structure_only:
            self._finish_recompute()
            return
        self.backward_count += 1
        group = "backward" if self.backward_count == 1 else f"backward_{self.backward_count}"
        if self.optimizer is None or self.s.micro_batch_gradients:
            try:
                self.rec.record_current_gradients(group)
            except ComgraError as e:
                log.warning("comgra_like.watch: the gradients of step %s were not recorded: "
                            "%s", self.step_no, e)
        if "io_grad" in self.s.log:
            for name, _inv, t in self.step_outputs:
                (self.got_gradient if t.grad is not None else self.no_gradient).add(name)
        self._finish_recompute()

    def _finish_recompute(self) -> None:
        """Send the module graph that waited for a checkpoint's replay, with the edges
        the replay showed; the hooks come off."""
        rc, self.recompute = self.recompute, None
        pending, self._pending_graph = self._pending_graph, None
        if rc is None:
            return
        self._set_active(False)
        self.not_replayed |= set(rc.not_replayed())
        if pending is not None:
            self._send_module_graph(pending, rc.edges(pending))
        self.checkpointed |= set(rc.boundaries)


def queue_after_backward(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the current backward pass ends, after the end-of-backward
    callbacks queued during it: DistributedDataParallel's waits for the gradients'
    all-reduce and writes the averaged gradients into ``.grad``, and a callback queued
    from a gradient hook would otherwise run before it and see each rank's own gradients.
    Queued from inside a first callback, it lands behind every one queued in the pass
    (the engine runs callbacks queued while it runs them, in order)."""
    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(callback))
