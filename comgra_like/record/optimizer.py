"""``watch(model, optimizer=opt)``: what the optimizer's step used and did, from its own
step hooks (docs/OPTIMIZER.md).

On a recorded step, when ``optimizer.step()`` runs (``register_step_pre_hook``):

* the gradient it is about to use is recorded as the loss group ``optimizer`` (the
  recorder's ``record_current_gradients``): accumulated over every backward since the
  gradients were last reset, unscaled when a ``GradScaler`` calls the step (it unscales
  first, and never calls a step it skips), after any clipping;
* the L2 norm of each parameter's gradient, and their global norm;
* a copy of each parameter, for the update.

After the step (``register_step_post_hook``): the update (``after - before``: its norm,
abs max and update/weight ratio) and the optimizer's state (``optimizer_state.py``),
sent as rows of the metrics table: module = the parameter's full name, module class =
the optimizer's class, metric = ``optimizer/<quantity>``; the step's global numbers
under the module ``optimizer`` (``optimizer_<i>`` for the i-th of several).

The norm before clipping is the one ``gradients_before_clipping()`` read in the step
(call it after unscaling, before clipping), else the norm at the end of the last
backward pass of the step (divided by the ``scaler``'s scale when one is given).

Nothing here changes a value: training is bitwise the same with it, and nothing raises
into training (``guard.py``). On steps that are not recorded each hook returns after
one check.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import CallOrderError, ComgraError, ConfigurationError
from ..protocol import MetricData
from .flow import in_flow_pass
from .guard import Guard
from .hooks import queue_after_backward
from .lifecycle import StepEvent, StepListener
from .metric_collect import first_tensor
from .optimizer_state import (
    as_float,
    gradient_norms,
    state_statistics,
    to_floats,
    total_norm,
    update_statistics,
)

log = logging.getLogger("comgra_like")

PREFIX = "optimizer/"
GRADIENT_GROUP = "optimizer"
TRAINING = "training"


def check_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    """``optimizer=`` as a list of optimizers (ConfigurationError otherwise)."""
    items = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    if not items:
        raise ConfigurationError("optimizer= is an empty list: pass an optimizer or drop it")
    for opt in items:
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigurationError(
                "optimizer= must be a torch.optim.Optimizer or a list of them, got "
                f"{type(opt).__name__}")
    if len({id(o) for o in items}) != len(items):
        raise ConfigurationError("optimizer= names the same optimizer twice")
    return items


def check_scaler(scaler: Any) -> Any:
    if scaler is not None and not callable(getattr(scaler, "get_scale", None)):
        raise ConfigurationError(
            f"scaler= must be a torch.amp.GradScaler, got {type(scaler).__name__}")
    return scaler


def group_name(index: int) -> str:
    """The loss group (and the metrics module) of the index-th optimizer."""
    return GRADIENT_GROUP if index == 0 else f"{GRADIENT_GROUP}_{index}"


class _Pending:
    """What the pre-step hook of a recorded step kept for the post-step hook."""

    def __init__(self, rec, step: int, params: list[torch.Tensor], norms: list,
                 before: list[torch.Tensor | None], before_clip: list | None):
        self.rec = rec
        self.step = step
        self.params = params
        self.norms = norms
        self.before = before
        self.before_clip = before_clip


class OptimizerWatch(StepListener):
    """Step hooks on ``optimizers`` recording into ``recorder`` while ``recording()`` says
    a recorded training step is open.

    ``names``: a parameter's full name by ``id``; ``root``: the watched root module whose
    forward outputs tell when a backward pass ends; ``record_gradients``: record the
    loss group ``optimizer`` (False leaves the recording's gradients as they are).
    """

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer], root: torch.nn.Module,
                 names: dict[int, str], recorder: Any, recording: Callable[[], bool],
                 scaler: Any = None, record_gradients: bool = True):
        self.optimizers = list(optimizers)
        self.recorder = recorder
        self.recording = recording
        self.scaler = scaler
        self.record_gradients = record_gradients
        self.names = dict(names)
        for i, opt in enumerate(self.optimizers):
            for g, group in enumerate(opt.param_groups):
                for j, p in enumerate(group["params"]):
                    self.names.setdefault(id(p), f"{group_name(i)}.group{g}.param{j}")
        self.guard = Guard("comgra_like optimizer", self._drop)
        self.steps_taken = 0  # optimizer steps seen, recorded or not
        self._pending: dict[int, _Pending] = {}
        # an optimizer whose step() calls its parent class's step() runs the hooks once per
        # level: only the outermost call counts (reset at every training forward, in case a
        # step raised between its hooks)
        self._depth = [0] * len(self.optimizers)
        self._explicit: dict[int, float | None] | None = None  # gradients_before_clipping
        self._at_backward: dict[int, float | None] | None = None
        self._backward_scale = 1.0
        self._queued = False
        self._backward_in_step = False
        self._stepped_in_step = False
        self._scale_at_start: float | None = None
        self.skipped_steps = 0
        self.unchanged_groups = 0  # the gradients equalled the last backward's group
        self.closed = False
        self.handles: list = []
        for i, opt in enumerate(self.optimizers):
            self.handles.append(opt.register_step_pre_hook(self._pre_of(i)))
            self.handles.append(opt.register_step_post_hook(self._post_of(i)))
        self.handles.append(root.register_forward_hook(self._root_post))

    # ----- public ----------------------------------------------------------------------

    def gradients_before_clipping(self) -> None:
        """Read the parameters' gradient norms now as the norm before clipping of the
        coming optimizer step (call it after unscaling, before clipping). Returns at once
        on a step that is not recorded; never raises."""
        try:
            if self.closed or not self.recording():
                return
            params = self._all_params()
            self._explicit = dict(zip(map(id, params), gradient_norms(params)))
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("gradients_before_clipping()", e)

    unsubscribe: Callable[[], None] | None = None  # from the recorder's lifecycle

    def close(self) -> None:
        self.closed = True
        if self.unsubscribe is not None:
            self.unsubscribe()
            self.unsubscribe = None
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self._pending.clear()

    def report(self) -> dict:
        """The optimizer part of the watch report."""
        report = {"optimizers": [type(o).__name__ for o in self.optimizers],
                  "steps_seen": self.steps_taken,
                  "skipped_steps_recorded": self.skipped_steps,
                  "scaler": self.scaler is not None,
                  "gradient_group": GRADIENT_GROUP if self.record_gradients else None}
        failures = self.guard.summary()
        if failures is not None:
            report["internal_errors"] = failures
        return report

    # ----- the step's lifecycle (the recorder's events) --------------------------------

    def on_step_start(self, event: StepEvent) -> None:
        self._backward_in_step = False
        self._stepped_in_step = False
        self._explicit = None
        self._at_backward = None
        self._scale_at_start = None
        if event.recording and self.scaler is not None:
            try:
                self._scale_at_start = float(self.scaler.get_scale())
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                self.guard.failed("reading the loss scale", e)

    def on_step_end(self, event: StepEvent) -> None:
        """A recorded step that saw a backward but no optimizer step: skipped when its
        gradients were reset (``zero_grad()``) or the scaler lowered its scale."""
        if not event.recording or not self._backward_in_step or self._stepped_in_step:
            return
        try:
            if self._was_skipped():
                self.skipped_steps += 1
                self._send_skipped(event.training_step)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the end of a step", e)

    # ----- hooks -----------------------------------------------------------------------

    def _root_post(self, module, args, output):
        if self.closed or not module.training:
            return
        if any(self._depth):
            self._depth = [0] * len(self.optimizers)
        try:
            if not self.recording():
                return
            out = first_tensor(output)
            if out is not None and out.requires_grad:
                out.register_hook(self._grad_seen)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the root module's forward hook", e)

    def _grad_seen(self, grad):
        try:
            if not self._queued and not in_flow_pass():
                self._queued = True
                queue_after_backward(self._backward_done)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self._queued = False
            self.guard.failed("a gradient hook", e)

    def _backward_done(self) -> None:
        self._queued = False
        try:
            if not self.recording():
                return
            self._backward_in_step = True
            params = self._all_params()
            self._at_backward = dict(zip(map(id, params), gradient_norms(params)))
            self._backward_scale = self._scale()
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the end of a backward pass", e)

    def _pre_of(self, index: int):
        watch = self

        def pre(optimizer, args, kwargs):
            if watch.closed:
                return
            watch._depth[index] += 1
            if watch._depth[index] > 1:  # a parent class's step() inside the step
                return
            watch._stepped_in_step = True
            try:
                # args: (the optimizer, the step's own arguments...)
                closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
                if callable(closure):  # the gradients come from the closure, inside step()
                    return watch._with_closure(index, optimizer, closure, args, kwargs)
                if not watch.recording():
                    return None
                watch._before_step(index, optimizer, watch.recorder)
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                watch._pending.pop(index, None)
                watch.guard.failed("the optimizer's step pre-hook", e)
            return None
        return pre

    def _with_closure(self, index: int, optimizer, closure, args, kwargs):
        """``step(closure)`` (Lightning, LBFGS): the closure runs forward and backward
        inside ``step()``, after the pre-hooks (and the forward in it may open the step
        watch() records); the step's arguments get a closure that calls it and then reads
        the gradients when the step is recorded (its result is returned as it is)."""
        def closure_then_read():
            result = closure()
            try:
                if self.recording():
                    self._before_step(index, optimizer, self.recorder)
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                self._pending.pop(index, None)
                self.guard.failed("reading the gradients after the step's closure", e)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_read}
        return (args[0], closure_then_read, *args[2:]), kwargs

    def _post_of(self, index: int):
        watch = self

        def post(optimizer, args, kwargs):
            if watch.closed:
                return
            watch._depth[index] = max(watch._depth[index] - 1, 0)
            if watch._depth[index]:
                return
            watch.steps_taken += 1
            pending = watch._pending.pop(index, None)
            if pending is None:
                return
            try:
                watch._after_step(index, optimizer, pending)
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                watch.guard.failed("the optimizer's step post-hook", e)
        return post

    # ----- the work of a recorded step -------------------------------------------------

    def _before_step(self, index: int, optimizer, rec) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        norms = gradient_norms(params)
        with torch.no_grad():
            before = [p.detach().clone() if p.grad is not None else None for p in params]
        before_clip = None
        source = self._explicit if self._explicit is not None else self._at_backward
        if source is not None:
            scale = 1.0 if self._explicit is not None else self._backward_scale
            before_clip = [None if (v := source.get(id(p))) is None else v / scale
                           for p in params]
        again = index in self._pending  # a closure called once more (LBFGS)
        self._pending[index] = _Pending(rec, rec.training_step, params, norms, before,
                                        before_clip)
        if self.record_gradients and not again:
            try:
                rec.record_current_gradients(group_name(index))
            except CallOrderError:
                # no gradient changed since the last loss group (watch's per-backward
                # groups without clipping or unscaling): that group is the gradient used
                self.unchanged_groups += 1
            except ComgraError as e:
                log.warning("comgra_like.watch: the optimizer's gradients of step %s were "
                            "not recorded: %s", rec.training_step, e)

    def _after_step(self, index: int, optimizer, pending: _Pending) -> None:
        cls = type(optimizer).__name__
        wall = time.time()
        values: list[torch.Tensor] = []
        keys: list[tuple[str, str]] = []
        groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
        with torch.no_grad():
            for p, before in zip(pending.params, pending.before):
                if before is None:
                    continue  # no gradient: the optimizer left it alone
                name = self.names[id(p)]
                group = groups[id(p)]
                stats = state_statistics(group, optimizer.state.get(p, {}))
                stats.update(update_statistics(p, before))
                for q, v in stats.items():
                    keys.append((name, q))
                    values.append(v.detach())
        numbers = to_floats(values)
        rows = [[pending.step, name, cls, PREFIX + q, 0, _finite(v), wall]
                for (name, q), v in zip(keys, numbers)]
        for p, before, norm in zip(pending.params, pending.before, pending.norms):
            if before is None:
                continue
            name = self.names[id(p)]
            group = groups[id(p)]
            rows.append([pending.step, name, cls, PREFIX + "lr", 0,
                         _finite(as_float(group.get("lr", math.nan))), wall])
            rows.append([pending.step, name, cls, PREFIX + "grad_norm", 0, _finite(norm),
                         wall])
        if pending.before_clip is not None:
            for p, before, norm in zip(pending.params, pending.before, pending.before_clip):
                if before is not None and norm is not None:
                    rows.append([pending.step, self.names[id(p)], cls,
                                 PREFIX + "grad_norm_before_clipping", 0, _finite(norm), wall])
        module = group_name(index)
        used = total_norm(n for n, b in zip(pending.norms, pending.before) if b is not None)
        rows.append([pending.step, module, cls, PREFIX + "grad_norm", 0, _finite(used), wall])
        if pending.before_clip is not None:
            clip = total_norm(n for n, b in zip(pending.before_clip, pending.before)
                              if b is not None)
            rows.append([pending.step, module, cls, PREFIX + "grad_norm_before_clipping", 0,
                         _finite(clip), wall])
        rows.append([pending.step, module, cls, PREFIX + "skipped", 0, 0.0, wall])
        if self.scaler is not None:
            rows.append([pending.step, module, cls, PREFIX + "loss_scale", 0,
                         _finite(self._scale()), wall])
        self._explicit = None
        self._at_backward = None
        pending.rec.writer.submit(MetricData(int(pending.step), TRAINING, wall, [], rows))

    def _send_skipped(self, step: int) -> None:
        writer = self.recorder.writer
        wall = time.time()
        rows = []
        for i, opt in enumerate(self.optimizers):
            cls = type(opt).__name__
            rows.append([step, group_name(i), cls, PREFIX + "skipped", 0, 1.0, wall])
            if self.scaler is not None and self._scale_at_start is not None:
                rows.append([step, group_name(i), cls, PREFIX + "loss_scale", 0,
                             _finite(self._scale_at_start), wall])
        writer.submit(MetricData(int(step), TRAINING, wall, [], rows))

    def _was_skipped(self) -> bool:
        if self.scaler is not None and self._scale_at_start is not None and \
                float(self.scaler.get_scale()) < self._scale_at_start:
            return True
        trained = [p for p in self._all_params() if p.requires_grad]
        return bool(trained) and all(p.grad is None for p in trained)

    def continues_step(self, steps_at_open: int, backward_seen: bool) -> bool:
        """For watch()'s driver: whether a training forward belongs to the step that
        opened when ``steps_at_open`` optimizer steps had been taken (no optimizer step
        since, and the gradients were not reset after a backward: a step the scaler
        skipped, or one the loop gave up)."""
        if self.steps_taken != steps_at_open:
            return False
        return not (backward_seen and self.gradients_reset())

    def gradients_reset(self) -> bool:
        """Whether no parameter of the optimizers has a gradient now (``zero_grad()``);
        stops at the first gradient found."""
        for opt in self.optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        return False
        return True

    def _scale(self) -> float:
        if self.scaler is None:
            return 1.0
        return float(self.scaler.get_scale())

    def _all_params(self) -> list[torch.Tensor]:
        return [p for opt in self.optimizers for group in opt.param_groups
                for p in group["params"]]

    def _drop(self) -> None:
        self._pending.clear()
        self._explicit = None
        self._at_backward = None


def parameter_names(module: torch.nn.Module, root: str) -> dict[int, str]:
    """``id(parameter) -> full name`` as the recorder tracks parameters (the first
    holder of a tied parameter)."""
    return {id(p): f"{root}.{name}" for name, p in module.named_parameters()}


def _finite(value: float | None) -> float | None:
    """None stands for NaN in a message (as in the KPI rows)."""
    if value is None or math.isnan(value):
        return None
    return float(value)


def watch_optimizer(recorder, optimizer: Any, module: torch.nn.Module, *, scaler: Any = None,
                    record_gradients: bool = True) -> OptimizerWatch:
    """The optimizer's recording for a loop that drives a ``ComgraRecorder`` itself
    (comgra's API): ``module`` must be tracked by ``recorder`` (its parameters' names);
    call ``optimizer.step()`` inside the recorded step (before ``finish_batch()``).
    ``watch(model, recorder=rec, optimizer=opt)`` does the same. ``close()`` the result
    to remove its hooks."""
    optimizers = check_optimizers(optimizer)
    check_scaler(scaler)
    root = recorder.tracked_name(module)
    if root is None:
        raise ConfigurationError(
            "watch_optimizer(recorder, optimizer, module): track the module first "
            "(recorder.track_module(name, module))")
    from .lifecycle import Stage

    def recording() -> bool:
        return recorder.is_recording and recorder.stage != Stage.IDLE

    ow = OptimizerWatch(optimizers, module, parameter_names(module, root), recorder,
                        recording, scaler=scaler, record_gradients=record_gradients)
    ow.unsubscribe = recorder.subscribe(ow)
    return ow
