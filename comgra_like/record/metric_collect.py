"""The training side of the per-module metrics: hooks that copy what each scheduled
metric needs and send it to the writer (``protocol.MetricData``), which computes the
built-in quantities; user metrics are computed here and sent as numbers.

A step opens with :meth:`Collector.begin` (from the root module's forward pre-hook, with
the step number of whoever counts steps: ``watch``'s counter, the recorder's
``training_step`` or the Monitor's ``track`` calls) and is sent by :meth:`finish`
(the next step's begin, ``track``, or :meth:`close`). On a step no schedule names, every
hook returns after one attribute check and nothing is copied; metrics run on their own
schedule, whether or not the recorder records the step.

On a scheduled step, in training mode only (eval-mode forwards are ignored):

* ``input`` / ``output``: detached CPU copies of the module's first positional tensor
  input (copied before the forward, so in-place modules cannot change it) and first
  tensor output, of its last forward in the step;
* ``output_grad``: a tensor hook on that output copies its gradient, one per backward
  pass (the first gradient a module's outputs receive in that pass);
* ``weight_grad`` / ``bias_grad``: copied when a backward pass ends (an autograd engine
  callback), the last pass's kept; ``weight`` / ``bias`` and BatchNorm running statistics
  when the step is sent (in ``watch``: after the optimizer's update; in the Monitor: at
  ``track``, where Taiyi reads them);
* ``bn_batch_mean`` / ``bn_batch_var`` (MeanTID, VarTID): the one per-step cost of
  unscheduled steps, a per-channel mean and variance of the BatchNorm's input on every
  training forward, kept on the device until the metric is computed.

The hooks never change a value or a gradient: training is bitwise the same with them.
They never raise into training either (``record/guard.py``): an internal failure is
logged once, the open step's metrics are dropped, and training goes on.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from ..errors import ConfigurationError
from ..metrics.user import as_number
from ..protocol import MetricData
from .flow import in_flow_pass
from .guard import Guard
from .hooks import queue_after_backward
from .metric_config import LOSS, MetricSpec

TRAINING = "training"
_GRAD_NEEDS = {"output_grad", "weight_grad", "bias_grad"}
_LOSS_BATCH = 256  # loss rows buffered before they are sent on their own


def first_tensor(obj: Any) -> torch.Tensor | None:
    """The first floating-point tensor of a forward's arguments or output."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_floating_point() else None
    if isinstance(obj, (tuple, list)):
        for x in obj:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return x
        return None
    if isinstance(obj, dict):
        return first_tensor(list(obj.values()))
    return None


def copy_of(t: torch.Tensor) -> torch.Tensor:
    """A detached CPU copy (half precision widened to float32, float64 kept)."""
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        return t.detach().to("cpu", dtype, copy=True)


def pack(t: torch.Tensor) -> list:
    """``[dtype, shape, data]`` of a CPU copy, as MetricData carries arrays."""
    a = t.contiguous().numpy()
    return [a.dtype.str, list(a.shape), memoryview(a).cast("B")]


def batch_norm_stats(module: torch.nn.Module, x: torch.Tensor | None, output: Any
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per-channel mean and unbiased variance of a BatchNorm's input in training mode.

    The batch norm computed both already: its autograd node keeps the mean and
    1/sqrt(biased var + eps), so they cost nothing here (computing the variance again
    took ~10 ms per step for a 32x16x32x32 input on one CPU thread, more than the
    layer). Without that node (no gradient, another backend) two passes over the input.
    """
    if x is None or x.dim() < 2:
        return None
    channels = x.shape[1]
    n = x.numel() // max(channels, 1)
    if n < 2:
        return None
    node = getattr(output, "grad_fn", None)
    if node is not None and type(node).__name__ == "NativeBatchNormBackward0":
        mean = getattr(node, "_saved_result1", None)
        invstd = getattr(node, "_saved_result2", None)
        if isinstance(mean, torch.Tensor) and isinstance(invstd, torch.Tensor) and \
                mean.numel() == channels == invstd.numel():
            eps = float(getattr(module, "eps", 0.0))
            with torch.no_grad():
                var = (invstd.double().pow(-2) - eps).clamp_min(0.0) * (n / (n - 1))
                return mean.detach().double().clone(), var
    dims = [d for d in range(x.dim()) if d != 1]
    with torch.no_grad():
        x = x.detach()
        mean = x.mean(dim=dims)
        shape = [1, channels] + [1] * (x.dim() - 2)
        centered = x - mean.reshape(shape)
        var = (centered * centered).sum(dim=dims) / (n - 1)
    return mean, var


class Sender:
    """Sends MetricData to a writer client (``WriterClient``): in the process transport
    the arrays go through one shared-memory file per message, in the segment folder and
    with the segment prefix of the client's slots (``WriterClient.slots``; the writer
    unlinks the file once read, and deletes what a crash left behind by the prefix); in
    the thread transport they go as they are.
    """

    def __init__(self, writer: Any):
        self.submit = writer.submit
        self.folder: str | None = None
        self.prefix = ""
        self.seq = 0
        slots = getattr(writer, "slots", None)  # WriterClient.slots: a SlotPool
        dirs = getattr(slots, "segment_dirs", None)
        prefix = getattr(slots, "segment_prefix", None)
        if getattr(writer, "mode", None) == "process" and dirs and prefix:
            self.folder, self.prefix = dirs[0], f"{prefix}metrics-"

    def send(self, msg: MetricData) -> None:
        if self.folder is not None and msg.modules:
            self._to_file(msg)
        self.submit(msg)

    def _to_file(self, msg: MetricData) -> None:
        entries = []
        for _module, _cls, _names, arrays in msg.modules:
            for need, packed in arrays.items():
                entries.extend(packed if need == "output_grad" else [packed])
        path = os.path.join(self.folder, f"{self.prefix}{self.seq}")  # type: ignore[arg-type]
        self.seq += 1
        placed = []
        offset = 0
        try:
            with open(path, "xb") as f:
                for entry in entries:
                    buffer = entry[2]
                    placed.append((entry, buffer))
                    entry[2] = offset
                    f.write(buffer)
                    size = buffer.nbytes
                    pad = -size % 64  # each array starts 64-byte aligned
                    if pad:
                        f.write(bytes(pad))
                    offset += size + pad
        except OSError:  # a full shared-memory folder: the bytes go in the message
            for entry, buffer in placed:
                entry[2] = buffer
            try:
                os.unlink(path)
            except OSError:
                pass
            return
        msg.path = path


class _Module:
    """One module with metrics: its specs, what they need, what this step captured."""

    def __init__(self, specs: list[MetricSpec]):
        first = specs[0]
        self.name = first.module_name
        self.module = first.module
        self.cls = first.module_class
        self.specs = specs
        self.needs = frozenset().union(*(s.needs for s in specs))
        self.tid = [s for s in specs if s.needs & {"bn_batch_mean", "bn_batch_var"}]
        # per TID spec: (mean, var) rows since its previous computation (on the device)
        self.bn_rows: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
            s.metric: [] for s in self.tid}
        self.reset()

    def reset(self) -> None:
        self.input: torch.Tensor | None = None
        self.output: torch.Tensor | None = None
        self.grads: list[torch.Tensor] = []
        self.grad_pass = -1  # the backward pass of the last gradient kept
        self.weight_grad: torch.Tensor | None = None
        self.bias_grad: torch.Tensor | None = None


class Collector:
    """Hooks on the modules a resolved config names, feeding a writer client.

    ``step_of`` returns the number of the step a root forward in training mode belongs
    to (None: no step, nothing collected); ``writer`` is the recorder's writer client.
    """

    def __init__(self, model: torch.nn.Module, specs: list[MetricSpec], root_name: str,
                 writer: Any, step_of: Callable[[], int | None] | None = None):
        self.model = model
        self.root = root_name
        self.root_class = type(model).__name__
        self.sender = Sender(writer)
        self.step_of = step_of
        self.specs = specs
        modules: dict[str, list[MetricSpec]] = {}
        for s in specs:
            modules.setdefault(s.module_name, []).append(s)
        self.modules = {name: _Module(group) for name, group in modules.items()}
        schedules: dict[object, list[MetricSpec]] = {}
        for s in specs:
            schedules.setdefault(s.schedule, []).append(s)
        self._schedules = list(schedules.items())
        self.armed = False  # the one check of every hook on steps without metrics
        self.training = False  # the root's last forward was in training mode
        self.open: int | None = None  # the scheduled step being collected
        self.current: int | None = None  # the last step begun (scheduled or not)
        self.due: dict[str, list[MetricSpec]] = {}
        self.backward_count = 0
        self._queued = False
        self._generation = 0  # tells hooks of an earlier step's tensors apart
        self._wall = 0.0
        self._loss_rows: list[list] = []
        self._step_loss: dict[int, float] = {}
        self._users: dict[tuple[str, str], Any] = {}
        self._previous_weight: dict[tuple[str, str], torch.Tensor] = {}
        self.closed = False
        self.guard = Guard("comgra_like metrics", self.discard)
        self.handles: list = []
        self._hook()

    # ----- hooks ------------------------------------------------------------------------

    def _hook(self) -> None:
        self.handles.append(self.model.register_forward_pre_hook(self._root_pre))
        self.handles.append(self.model.register_forward_hook(self._root_post))
        for m in self.modules.values():
            if "input" in m.needs:
                self.handles.append(m.module.register_forward_pre_hook(self._pre_of(m)))
            if m.needs & {"output", "output_grad"}:
                self.handles.append(m.module.register_forward_hook(self._post_of(m)))
            if m.tid:
                self.handles.append(m.module.register_forward_hook(self._bn_of(m)))

    def remove_hooks(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _root_pre(self, module, args):
        self.training = module.training
        if not module.training or self.step_of is None:
            return
        try:
            step = self.step_of()
            if step is not None and step != self.current:
                self.begin(step)
        except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
            self.guard.failed("the root module's forward pre-hook", e)

    def _root_post(self, module, args, output):
        if not self.armed or not self.training:
            return
        try:
            if any(m.needs & _GRAD_NEEDS for m in self.modules.values()):
                out = first_tensor(output)
                if out is not None and out.requires_grad:
                    out.register_hook(self._grad_seen(self._generation))
        except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
            self.guard.failed("the root module's forward hook", e)

    def _pre_of(self, m: _Module):
        collector = self

        def pre(module, args):
            if not collector.armed or not collector.training or m.name not in collector.due:
                return
            try:
                x = first_tensor(args)
                if x is not None:
                    m.input = copy_of(x)
            except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
                collector.guard.failed("a module's forward pre-hook", e)
        return pre

    def _post_of(self, m: _Module):
        collector = self

        def post(module, args, output):
            if not collector.armed or not collector.training or m.name not in collector.due:
                return
            try:
                y = first_tensor(output)
                if y is None:
                    return
                if "output" in m.needs:
                    m.output = copy_of(y)
                if "output_grad" in m.needs and y.requires_grad:
                    y.register_hook(collector._output_grad_of(m, collector._generation))
            except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
                collector.guard.failed("a module's forward hook", e)
        return post

    def _bn_of(self, m: _Module):
        collector = self

        def post(module, args, output):
            if not module.training or not collector.training:
                return
            try:
                stats = batch_norm_stats(module, first_tensor(args), output)
                if stats is not None:
                    for rows in m.bn_rows.values():
                        rows.append(stats)
            except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
                collector.guard.failed("a batch norm's forward hook", e)
        return post

    def _grad_seen(self, generation: int):
        def hook(grad):
            try:
                if generation == self._generation and not in_flow_pass():
                    self._queue_callback()
            except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
                self._queued = False
                self.guard.failed("a gradient hook", e)
        return hook

    def _output_grad_of(self, m: _Module, generation: int):
        def hook(grad):
            if generation != self._generation or in_flow_pass():  # a FlowChain's pass
                return
            try:
                if m.grad_pass != self.backward_count:
                    m.grad_pass = self.backward_count
                    m.grads.append(copy_of(grad))
                self._queue_callback()
            except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
                self.guard.failed("a module's output gradient hook", e)
        return hook

    def _queue_callback(self) -> None:
        if not self._queued:
            self._queued = True
            queue_after_backward(self._backward_done)  # after DDP's all-reduce

    def _backward_done(self) -> None:
        """A backward pass of the open step ended: every gradient of it is there now."""
        self._queued = False
        if not self.armed:
            return
        try:
            self._keep_parameter_gradients()
        except Exception as e:  # noqa: BLE001 - never into training (record/guard.py)
            self.guard.failed("the end of a backward pass", e)

    def _keep_parameter_gradients(self) -> None:
        self.backward_count += 1
        for name in self.due:
            m = self.modules[name]
            if "weight_grad" in m.needs:
                g = getattr(m.module.weight, "grad", None)
                if g is not None:
                    m.weight_grad = copy_of(g)
            if "bias_grad" in m.needs:
                bias = getattr(m.module, "bias", None)
                g = getattr(bias, "grad", None)
                if g is not None:
                    m.bias_grad = copy_of(g)

    # ----- steps ------------------------------------------------------------------------

    def begin(self, step: int) -> None:
        """Step ``step`` starts: the open step is sent; hooks collect if any metric is due."""
        if self.open is not None:
            self.finish()
        self.current = step
        due: dict[str, list[MetricSpec]] = {}
        for schedule, specs in self._schedules:
            if schedule.due(step):
                for s in specs:
                    due.setdefault(s.module_name, []).append(s)
        if not due:
            return
        self._generation += 1
        self.open = step
        self.due = due
        self.backward_count = 0
        self._wall = time.time()
        for m in self.modules.values():
            m.reset()
        self.armed = True

    def discard(self) -> None:
        """Forget what the open step collected (it is not sent)."""
        self.armed = False
        self.open = None
        self.due = {}
        self._generation += 1
        for m in self.modules.values():
            m.reset()

    def finish(self) -> None:
        """Send the open step's data (nothing when no step is open)."""
        if self.open is None:
            if len(self._loss_rows) >= _LOSS_BATCH:
                self._send(None, [])
            return
        step = self.open
        self.armed = False
        self.open = None
        try:
            modules = []
            values = list(self._loss_rows)
            self._loss_rows.clear()
            with torch.no_grad():
                for name, specs in self.due.items():
                    m = self.modules[name]
                    builtin = [s for s in specs if s.quantity is not None]
                    if builtin:
                        entry = self._arrays(m, builtin)
                        if entry is not None:
                            modules.append(entry)
                    for s in specs:
                        if s.user_class is not None:
                            values.extend(self._user(m, s, step))
            self._send(step, modules, values)
        finally:
            self.due = {}
            self._generation += 1
            for m in self.modules.values():
                m.reset()

    def _send(self, step: int | None, modules: list, values: list | None = None) -> None:
        if values is None:
            values = list(self._loss_rows)
            self._loss_rows.clear()
        if not modules and not values:
            return
        self.sender.send(MetricData(-1 if step is None else int(step), TRAINING, self._wall,
                                    modules, values))

    def _arrays(self, m: _Module, specs: list[MetricSpec]) -> list | None:
        """The MetricData entry of a module: the metrics whose needs were captured."""
        needed = frozenset().union(*(s.needs for s in specs))
        module = m.module
        available: dict[str, Any] = {}
        if "input" in needed and m.input is not None:
            available["input"] = pack(m.input)
        if "output" in needed and m.output is not None:
            available["output"] = pack(m.output)
        if "output_grad" in needed and m.grads:
            available["output_grad"] = [pack(g) for g in m.grads]
        for attr, need in (("weight", "weight"), ("bias", "bias"),
                           ("running_mean", "bn_running_mean"),
                           ("running_var", "bn_running_var")):
            t = getattr(module, attr, None)
            if need in needed and isinstance(t, torch.Tensor):
                available[need] = pack(copy_of(t))
        for attr, need, kept in (("weight", "weight_grad", m.weight_grad),
                                 ("bias", "bias_grad", m.bias_grad)):
            if need not in needed:
                continue
            if kept is None:  # no backward pass seen in the step: the gradient as it is
                grad = getattr(getattr(module, attr, None), "grad", None)
                kept = None if grad is None else copy_of(grad)
            if kept is not None:
                available[need] = pack(kept)
        names = []
        arrays: dict[str, Any] = {}
        for s in specs:
            extra = {}
            if s.needs & {"bn_batch_mean", "bn_batch_var"}:
                rows = m.bn_rows.get(s.metric) or []
                if not rows:
                    continue
                extra["bn_batch_mean"] = pack(copy_of(torch.stack([r[0] for r in rows])))
                extra["bn_batch_var"] = pack(copy_of(torch.stack([r[1] for r in rows])))
                rows.clear()
            if not all(n in available or n in extra for n in s.needs):
                continue  # not captured this step (module not called, no gradient)
            names.append(s.metric)
            for n in s.needs:
                arrays[n] = extra[n] if n in extra else available[n]
        if not names:
            return None
        return [m.name, m.cls, names, arrays]

    def _user(self, m: _Module, s: MetricSpec, step: int) -> list[list]:
        """Rows of a user metric, computed here (once per backward pass if it needs the
        output gradient)."""
        key = (m.name, s.metric)
        metric = self._users.get(key)
        if metric is None:
            metric = self._users[key] = s.user_class()  # type: ignore[misc]
        data: dict[str, Any] = {}
        module = m.module
        for need in s.needs:
            if need == "input":
                data[need] = m.input
            elif need == "output":
                data[need] = m.output
            elif need == "weight":
                data[need] = module.weight.detach()
            elif need == "weight_grad":
                g = m.weight_grad if m.weight_grad is not None else module.weight.grad
                data[need] = None if g is None else g.detach()
            elif need == "update":
                now = copy_of(module.weight)
                before = self._previous_weight.get(key)
                self._previous_weight[key] = now
                data[need] = None if before is None else now - before
            elif need == "loss":
                loss = self._step_loss.get(step)
                data[need] = None if loss is None else torch.tensor(loss)
        if any(data[n] is None for n in data):
            return []
        wall = time.time()
        if "output_grad" not in s.needs:
            return [[step, m.name, m.cls, s.metric, 0,
                     _finite(as_number(metric.compute(data), s.metric)), wall]]
        rows = []
        for index, grad in enumerate(m.grads):
            data["output_grad"] = grad
            rows.append([step, m.name, m.cls, s.metric, index,
                         _finite(as_number(metric.compute(data), s.metric)), wall])
        return rows

    # ----- loss and the end --------------------------------------------------------------

    def log_loss(self, loss: Any, step: int | None = None) -> None:
        """Record the loss of a step (the current one by default) as the metric ``loss``
        of the root module."""
        if step is None:
            step = self.current
        if step is None:
            raise ConfigurationError(
                "log_loss() without step= before any training forward: pass step=")
        value = as_number(loss.detach() if isinstance(loss, torch.Tensor) else loss, LOSS)
        self._step_loss = {int(step): value}
        self._loss_rows.append([int(step), self.root, self.root_class, LOSS, 0,
                                _finite(value), time.time()])
        if self.open is None and len(self._loss_rows) >= _LOSS_BATCH:
            self._send(None, [])

    def flush(self) -> None:
        """Send what is buffered (the open step stays open)."""
        if self._loss_rows:
            self._send(None, [])

    def close(self) -> None:
        """Send the open step and the buffered losses; remove every hook."""
        if self.closed:
            return
        self.closed = True
        self.remove_hooks()
        try:
            self.finish()
            self.flush()
        except Exception as e:  # noqa: BLE001 - the last step's metrics are lost, not
            self.guard.failed("sending the last step", e)  # the recording (guard.py)
        finally:
            self.armed = False
            for m in self.modules.values():
                m.bn_rows = {k: [] for k in m.bn_rows}


def _finite(value: float) -> float | None:
    """None stands for NaN in a message (as in the KPI rows)."""
    return None if math.isnan(value) else value
