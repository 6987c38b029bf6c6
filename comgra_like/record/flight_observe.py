"""The flight recorder's observation of a step (issue 30, ``record/flight.py``): the
parameters' values at the start of a step, every registered tensor and its gradient,
the parameters' gradients and updates, KPIs and sample ids, reduced where they live;
at the end of the step the statistics go to the judge, at once on the CPU and, on a
GPU, once their copy to pinned memory has landed. A mixin of
:class:`~comgra_like.record.flight.FlightRecorder`: its state lives on the recorder
(``_init_observer``)."""

from __future__ import annotations

import functools
import logging
import math
from collections import deque

import numpy as np
import torch

from ..errors import FlightTriggerError
from ..format import flight as ff
from . import flight_catalog as cat
from .flight_catalog import StepRecord
from .flight_stats import BLOCK, batched_sums, derive
from .module_io import tensor_version

log = logging.getLogger("comgra_like")

MAX_PENDING = 4  # GPU steps judged late at most (then the oldest is waited for)
_HALF = (torch.float16, torch.bfloat16)
_F32 = torch.float32
_NORM = torch.linalg.vector_norm


_COMPLETE_CHUNK = 1 << 24  # values per float64 chunk of _counts_and_sums (128 MiB)


def _counts_and_sums(t: torch.Tensor) -> tuple[float, float, float, float]:
    """(NaN count, Inf count, sum, sum of squares) of a tensor where it lives, in float64
    chunks of at most ``_COMPLETE_CHUNK`` values, read with one host synchronisation."""
    flat = t.detach().reshape(-1)
    acc = torch.zeros(4, dtype=torch.float64, device=flat.device)
    for part in flat.split(_COMPLETE_CHUNK):
        wide = part.double()
        acc += torch.stack((torch.isnan(wide).sum(), torch.isinf(wide).sum(), wide.sum(),
                            torch.dot(wide, wide)))
    nan, inf, total, squares = acc.tolist()
    return nan, inf, total, squares


def _host_row(flat: torch.Tensor) -> tuple:
    """A flat float32 CPU tensor's 7 numbers (sum, sum of squares, min, max, NaN count,
    Inf count, numel), NaN and Inf counted only where a sum is not finite; finite values
    whose float32 sums overflowed (1e20) are summed again in float64."""
    total, squares = flat.sum().item(), torch.dot(flat, flat).item()
    low, high = torch.aminmax(flat)
    nan = inf = 0.0
    if not (math.isfinite(total) and math.isfinite(squares)):
        nan, inf = float(torch.isnan(flat).sum()), float(torch.isinf(flat).sum())
        if not (nan or inf):
            wide = flat.double()
            total, squares = wide.sum().item(), torch.dot(wide, wide).item()
    return (total, squares, low.item(), high.item(), nan, inf, flat.numel())


def guarded(method):
    """Never raise into training: log once, disarm, go on (FlightTriggerError passes)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._broken:
            return None
        try:
            return method(self, *args, **kwargs)
        except FlightTriggerError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of ours must not stop training
            self._broken = True
            log.warning("comgra_like: the flight recorder failed in %s (%s: %s) and is "
                        "switched off; training and the regular recording go on",
                        method.__name__, type(e).__name__, e)
            return None
    return wrapper


class FlightObserver:
    """What one step shows: its rows (a catalog key and the reductions each)."""

    def _init_observer(self) -> None:
        self._broken = False
        self._step: int | None = None
        self._rows_idx: list[int] = []
        # per row: (reductions, tensor or None, numel) or a host row (the 6 statistics)
        self._rows: list = []
        self._blocks: list = []  # (rows, 4) tensors of _observe_many
        self._block_rows = 0
        # tests: the GPU's reductions (single rows and batched blocks) on the CPU
        self._force_batched = False
        self._ends: dict = {}  # where each tensor ends in a concatenation, per layout
        self._layouts: dict = {}  # a role of a set of parameters: keys, names, sizes
        self._before: list[torch.Tensor | None] = []
        self._params_seen_grad = False
        self._distributed = False
        self._in_bad_stretch = False  # _complete: the steps after the first bad one
        self._sample_ids: list | None = None
        self._pending: deque = deque()  # device steps waiting for their host copy

    # ----- one step ----------------------------------------------------------------------

    @guarded
    def begin(self, step: int, params: list) -> None:
        """Start of a training step: the parameters' values (statistics, and the copy the
        update is computed from)."""
        self._step = int(step)
        self._rows_idx, self._rows, self._full = [], [], []
        self._full_bytes = 0
        self._params_seen_grad = False
        self._sample_ids = None
        self._blocks, self._block_rows = [], 0
        dist = torch.distributed  # asked once a step, not for each parameter's gradient
        self._distributed = dist.is_available() and dist.is_initialized()
        values = [p.tensor.detach() for p in params]
        keys, names, nbytes, numels = self._layout(ff.VALUE, cat.PARAM_VALUE, params, values)
        if self.state is not None:
            self.state.keep(self._step, names, values)
        self._observe_many(keys, values, numels)
        before: list = [None] * len(values)
        if self.updates or self.full_steps:
            before = (torch._foreach_mul(values, 1.0) if self._batched(values)
                      else [t.clone() for t in values])  # one launch on a GPU
            self._keep_many(names, ff.VALUE, before, True, nbytes)
        self._before = before

    @guarded
    def observe_tensor(self, name: str, tensor: torch.Tensor, node: str | None, kind: str) -> None:
        """A registered tensor's value; its gradient is observed by a hook when backward
        reaches it (the hook returns None: the gradient is not changed)."""
        if self._step is None or not isinstance(tensor, torch.Tensor):
            return
        t = tensor.detach()
        code = cat.LOSS_VALUE if kind == "loss" else cat.OTHER
        self._observe(self._key(name, node or name, ff.VALUE, kind, code, t), t)
        self._keep(name, ff.VALUE, t, copied=False)
        if tensor.requires_grad and not isinstance(tensor, torch.nn.Parameter) and kind != "parameter":
            tensor.register_hook(functools.partial(self._gradient_hook, name, node or name, kind))

    def _gradient_hook(self, name: str, node: str, kind: str, grad: torch.Tensor) -> None:
        if self._broken or self._step is None:
            return
        try:
            g = grad.detach()
            self._observe(self._key(name, node, ff.GRADIENT, kind, cat.OTHER, g), g)
            self._keep(name, ff.GRADIENT, g, copied=False)
        except Exception as e:  # noqa: BLE001 - inside backward: never raise
            self._broken = True
            log.warning("comgra_like: the flight recorder failed in a gradient hook (%s: %s) "
                        "and is switched off; training goes on", type(e).__name__, e)
        return

    @guarded
    def observe_parameter_gradients(self, params: list) -> None:
        """The parameters' gradients at the end of the step, unless they were observed
        during it (``observe_gradients``, ``observe_gradient``)."""
        if self._step is None or self._params_seen_grad:
            return
        self._gradients_now(params)

    @guarded
    def observe_gradients(self, params: list) -> None:
        """These parameters' gradients as they are now, reduced together (watch(): at the
        end of each backward pass, after DDP's averaging); the parameters' gradients are
        then not read again at the end of the step."""
        if self._step is None:
            return
        self._gradients_now(params)

    def _gradients_now(self, params: list) -> None:
        self._params_seen_grad = True
        grads = [p.tensor.grad for p in params]
        if any(g is None for g in grads):  # not `None in grads`: == on each tensor, ~12 us
            have = [(p, g) for p, g in zip(params, grads) if g is not None]
            params, grads = [p for p, _ in have], [g for _, g in have]
        grads = [g.detach() for g in grads]
        keys, names, nbytes, numels = self._layout(ff.GRADIENT, cat.PARAM_GRAD, params, grads)
        self._observe_many(keys, grads, numels)
        self._keep_many(names, ff.GRADIENT, grads, False, nbytes)

    def gradients_together(self, grad: torch.Tensor) -> bool:
        """Whether parameter gradients like ``grad`` are best reduced all together at the
        end of a backward pass (``observe_gradients``) rather than one by one as they
        come: on a GPU (a few launches for all), in a distributed job (DDP averages them
        at the end of the pass), or with the device path forced (tests)."""
        if self._force_batched or not grad.is_cpu:
            return True
        return self._distributed

    @guarded
    def observe_gradient(self, name: str, grad: torch.Tensor) -> None:
        """One parameter's gradient (watch()'s post-accumulate hooks); the parameters'
        gradients are then not read again at the end of the step."""
        if self._step is None:
            return
        self._params_seen_grad = True
        g = grad.detach()
        self._observe(self._key(name, name, ff.GRADIENT, "parameter", cat.PARAM_GRAD, g), g)
        self._keep(name, ff.GRADIENT, g, copied=False)

    @guarded
    def observe_kpi(self, group: str, name: str, value) -> None:
        if self._step is None:
            return
        full = f"{group}/{name}"
        code = cat.LOSS_KPI if "loss" in full.lower() else cat.OTHER
        if isinstance(value, torch.Tensor):
            v = value.detach().reshape(-1)[:1]
            self._observe(self._key(full, full, ff.KPI, "kpi", code, v), v)
        else:
            v = float(value)
            key = self._key(full, full, ff.KPI, "kpi", code, None)
            self._rows_idx.append(key)
            self._rows.append((v, v * v, v, v, float(math.isnan(v)), float(math.isinf(v)),
                               1))  # a host row, as the CPU's reductions

    @guarded
    def register_sample_ids(self, ids) -> None:
        if self._step is None:
            return
        if isinstance(ids, torch.Tensor):
            ids = ids.detach().reshape(-1).tolist()
        self._sample_ids = [i if isinstance(i, (int, str)) else str(i) for i in ids]

    @guarded
    def end(self, params: list) -> None:
        """End of a training step (after the optimizer step): the updates, then the
        step's statistics go into the ring and the triggers are judged."""
        if self._step is None:
            return
        self.observe_parameter_gradients(params)
        if self.updates:
            pairs = [(p, b) for p, b in zip(params, self._before)
                     if b is not None and b.shape == p.tensor.shape]
            after = [p.tensor.detach() for p, _ in pairs]
            befores = [b for _, b in pairs]
            updates = (torch._foreach_sub(after, befores) if self._batched(after)
                       else [a - b for a, b in zip(after, befores)])
            keys, names, nbytes, numels = self._layout(
                ff.UPDATE, cat.PARAM_UPDATE, [p for p, _ in pairs], updates)
            self._observe_many(keys, updates, numels)
            self._keep_many(names, ff.UPDATE, updates, True, nbytes)
        self._before = []
        step, idx, rows = self._step, np.asarray(self._rows_idx, np.int64), self._rows
        sample_ids, full = self._sample_ids, self._full
        self._step, self._rows_idx, self._rows, self._full = None, [], [], []
        if self.full_steps:
            self._full_ring.append((step, full))
        parts = [q for row in rows if type(row[0]) is tuple for q in row[0]]
        blocks, self._blocks, self._block_rows = self._blocks, [], 0
        pieces = ([torch.stack(parts)] if parts else []) + [b.reshape(-1) for b in blocks]
        if pieces and pieces[0].device.type != "cpu":
            # a GPU: one stacked copy to pinned memory, judged once it has landed
            stacked = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
            host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
            host.copy_(stacked, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._pending.append((step, idx, rows, host, event, sample_ids))
            self._drain()
            return
        raw = (torch.cat(pieces) if len(pieces) > 1 else pieces[0]).tolist() if pieces else []
        values = derive(rows, raw)
        if raw:  # the device path (forced, in tests): what it could not count
            self._complete(step, idx, values)
        self._judge(StepRecord(step, idx, values, sample_ids, {}))

    @guarded
    def settle(self) -> None:
        """Judge the steps still waiting for their copy from the GPU (at flush and
        finalize): waits for them."""
        while self._pending:
            self._settle(self._pending.popleft())

    def _drain(self) -> None:
        """Judge, oldest first, every waiting step whose copy has landed (``query()``:
        no waiting); the oldest is waited for only when more than ``MAX_PENDING`` wait.
        Waiting for the step before at the end of each step (as before) kept the CPU at
        most a step ahead of the GPU, and an armed GPT-2 step waited for the CPU."""
        pending = self._pending
        while pending and (len(pending) > MAX_PENDING or pending[0][4].query()):
            self._settle(pending.popleft())

    def _settle(self, pending: tuple) -> None:
        step, idx, rows, host, event, sample_ids = pending
        event.synchronize()
        values = derive(rows, host.tolist())
        self._complete(step, idx, values)
        self._judge(StepRecord(step, idx, values, sample_ids, {}))

    def _complete(self, step: int, idx: np.ndarray, values: np.ndarray) -> None:
        """What the device path could not tell, counted from the step's full values where
        they are still kept (the ``full_steps`` ring, unchanged since): the NaN and Inf
        counts of a row whose abs max is not finite ("not counted" otherwise), and the
        mean and std of a finite row whose batched sum a NaN before it in its chunk made
        NaN; a one-value row (a loss, a KPI) is its own count. Done for the first step of
        a non-finite stretch only (the step its trigger names; a diverged run that goes
        on must not pay it on every step), in chunks of ``_COMPLETE_CHUNK`` values (no
        float64 copy of a whole large tensor on a GPU that may be full), one host
        synchronisation per row. A step that has left the ring (judged late), a tensor
        not kept or changed in place, and a tensor with several rows in the step (several
        iterations) stay "not counted". A healthy step costs one numpy test. In place."""
        counts_unknown = np.isnan(values[:, 4])
        sum_unknown = np.isnan(values[:, 0]) & np.isfinite(values[:, 2])
        todo = np.flatnonzero(counts_unknown | sum_unknown)
        if not len(todo):
            self._in_bad_stretch = False
            return
        if self._in_bad_stretch:
            return
        self._in_bad_stretch = True
        kept = next((full for s, full in self._full_ring if s == step), None) \
            if self.full_steps else None
        # a name and role kept twice (several iterations in a step) is ambiguous: left
        by_name: dict = {}
        for name, role, t, version in kept or ():
            by_name[(name, role)] = None if (name, role) in by_name else (t, version)
        keys, counts = np.unique(idx, return_counts=True)
        repeated = set(keys[counts > 1].tolist())
        for row in todo:
            key = int(idx[row])
            if self._numel[key] == 1 and counts_unknown[row] and not sum_unknown[row]:
                value = values[row, 0]  # one value (a loss, a KPI): it is its own count
                values[row, 4], values[row, 5] = float(np.isnan(value)), float(np.isinf(value))
                continue
            if key in repeated:
                continue
            found = by_name.get((self._names[key], self._roles[key]))
            if found is None or (found[1] is not None and tensor_version(found[0]) != found[1]):
                continue  # not kept (over max_full_bytes), or changed in place since
            nan, inf, total, squares = _counts_and_sums(found[0])
            if counts_unknown[row]:
                values[row, 4], values[row, 5] = nan, inf
            if sum_unknown[row]:
                n = found[0].numel()
                mean = total / n
                var = squares / n - mean * mean
                values[row, 0] = mean
                values[row, 1] = math.sqrt(var) if var > 0 and n > 1 else 0.0

    # ----- statistics --------------------------------------------------------------------

    def _observe(self, key: int, t: torch.Tensor) -> None:
        """Three reductions where the tensor lives (sum, sum of squares, min and max). On
        the CPU they are read at once as Python floats (no waiting there; cheaper than
        stacking 0-dim tensors at the end of the step), NaN and Inf counted only where a
        sum is not finite. On a GPU they stay 0-dim tensors (the L2 norm, not its
        square: one launch fewer) until the end of the step stacks them all into one; NaN
        and Inf are not counted there (each count was three more launches per tensor):
        the abs max says whether there are any (``derive``)."""
        if t.dtype is _F32 and t.is_cpu and not self._force_batched:
            # the common case first, with as little Python as there can be (a step of the
            # recorder benchmark's MLP observes 44 tensors): no reshape (the L2 norm
            # takes any shape; its square is the sum of squares)
            n = t.numel()
            if n:
                total, norm = t.sum().item(), _NORM(t).item()
                if math.isfinite(total) and math.isfinite(norm):
                    low, high = torch.aminmax(t)
                    self._rows.append((total, norm * norm, low.item(), high.item(), 0.0, 0.0, n))
                else:
                    self._rows.append(_host_row(t.reshape(-1)))
                self._rows_idx.append(key)
            return
        n = t.numel()
        if n == 0:
            return
        if t.is_complex():
            t = t.abs()
        on_host = t.device.type == "cpu" and not self._force_batched
        if t.dtype is not torch.float32 and (on_host or t.dtype not in _HALF):
            t = t.float()
        flat = t.reshape(-1)
        if on_host:
            self._rows.append(_host_row(flat))
        elif flat.dtype in _HALF:  # bf16 / fp16 (autocast): summed in float32, no copy
            parts = (flat.sum(dtype=torch.float32),
                     torch.linalg.vector_norm(flat, dtype=torch.float32), *torch.aminmax(flat))
            self._rows.append((parts, None, n))  # the stack at the end makes them float32
        else:
            parts = (flat.sum(), torch.linalg.vector_norm(flat), *torch.aminmax(flat))
            self._rows.append((parts, None, n))
        self._rows_idx.append(key)

    def _batched(self, tensors: list) -> bool:
        """Whether a list of tensors is reduced together: on a GPU (or when forced for
        tests), all float32 on one device, more than a few."""
        if len(tensors) < 4 or not (self._force_batched or tensors[0].device.type != "cpu"):
            return False
        dev = tensors[0].device
        return all(t.dtype is torch.float32 and t.device == dev for t in tensors)

    def _layout(self, role: str, code: int, params: list, tensors: list) -> tuple:
        """(catalog keys, names, bytes in all, numels) of a role of these parameters,
        worked out once per set of parameters (a step's per-parameter Python was a good
        part of an armed GPU step, whose CPU launches the kernels)."""
        key = (role, tuple(map(id, params)))
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) > 32:
                self._layouts.clear()
            layout = self._layouts[key] = (
                [self._key(p.full_name, p.full_name, role, "parameter", code, t)
                 for p, t in zip(params, tensors)],
                [p.full_name for p in params],
                sum(t.numel() * t.element_size() for t in tensors),
                [int(t.numel()) for t in tensors])
        return layout

    def _observe_many(self, keys: list[int], tensors: list, numels: list | None = None) -> None:
        """The statistics of many tensors with few launches (a GPU's parameters,
        gradients, updates): the L2 norms and abs maxima with the multi-tensor
        ``torch._foreach_norm`` (fused kernels on a GPU), the sums with a few launches
        (``batched_sums``), three stacks. NaN and Inf are not counted here: the abs max
        says whether there are any (``derive``)."""
        if numels is None or 0 in numels:
            pairs = [(k, t) for k, t in zip(keys, tensors) if t.numel()]
            keys, tensors = [k for k, _ in pairs], [t for _, t in pairs]
            numels = [int(t.numel()) for t in tensors]
        if not self._batched(tensors):
            for key, t in zip(keys, tensors):
                self._observe(key, t)
            return
        ts = tensors
        l2 = torch.stack(torch._foreach_norm(ts, 2))
        amax = torch.stack(torch._foreach_norm(ts, float("inf")))
        sums = batched_sums(ts, self._ends)
        self._blocks.append(torch.stack((sums, l2, -amax, amax), dim=1))
        first = self._block_rows
        self._rows.extend((BLOCK, first + i, n) for i, n in enumerate(numels))
        self._rows_idx.extend(keys)
        self._block_rows += len(keys)
