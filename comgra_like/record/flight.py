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
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigurationError, FlightTriggerError, NotFoundError
from ..format import flight as ff
from .flight_replay import ReplayResult, StateKeeper, replay
from .flight_stats import BLOCK, batched_sums, derive, trial_json_entry
from .module_io import tensor_version

log = logging.getLogger("comgra_like")

#: Codes of a row's meaning, for the step's scalars (grad norm, update ratio, loss).
_OTHER, _PARAM_VALUE, _PARAM_GRAD, _PARAM_UPDATE, _LOSS_VALUE, _LOSS_KPI = range(6)
_MAD_TO_SIGMA = 1.4826
_MAX_PENDING = 4  # GPU steps judged late at most (then the oldest is waited for)


def _guarded(method):
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


@dataclass
class FlightStep:
    """One step as a predicate sees it (``FlightRecorder(predicate=...)``)."""

    step: int
    loss: float | None
    grad_norm: float | None
    update_ratio: float | None
    stats: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


@dataclass
class _StepRecord:
    step: int
    idx: np.ndarray  # catalog index per row
    values: np.ndarray  # (rows, len(STATISTICS)) float64
    sample_ids: list | None
    scalars: dict[str, float | None]


class FlightRecorder:
    """Armed: statistics of every step in memory; on a trigger, the window is written.

    ``window``: steps of statistics kept. ``full_steps``: steps whose full values are kept
    (within ``max_full_bytes`` in all). ``after``: steps recorded in full after a
    trigger. ``triggers``: any of ``non_finite``, ``loss_spike``, ``grad_norm_spike``,
    ``update_spike``. A spike: a value above median + ``spike_mads`` x max(1.4826 MAD,
    ``spike_floor`` x |median|) of the window's earlier values, judged after ``warmup``
    steps. ``predicate(FlightStep)``: a trigger of its own when it returns something
    true. ``on_trigger``: "record" (write and go on) or "raise" (write, then raise
    FlightTriggerError). ``cooldown``: steps after a written window in which no other is
    written (default: ``window``).
    """

    def __init__(self, window: int = 64, full_steps: int = 2, after: int = 8,
                 triggers: Iterable[str] = (ff.NON_FINITE, ff.LOSS_SPIKE, ff.GRAD_NORM_SPIKE,
                                            ff.UPDATE_SPIKE),
                 *, predicate: Callable[[FlightStep], Any] | None = None,
                 on_trigger: str = "record", cooldown: int | None = None, warmup: int = 16,
                 spike_mads: float = 10.0, spike_floor: float = 0.05,
                 max_full_bytes: int = 256 * 2**20, updates: bool = True,
                 keep_state: bool = False):
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
        #: keep_state=True: the parameters before each of the last two steps, on the host
        #: (record/flight_replay.py; ``replay``).
        self.state = StateKeeper() if keep_state else None
        #: Every trigger written so far (the records of the window files).
        self.fired: list[dict] = []
        #: Triggers seen inside a cooldown, not written.
        self.suppressed = 0
        self._broken = False
        self._trial_path: Path | None = None
        self._rank = 0
        self._notify: Callable[[dict], Any] | None = None
        # the catalog: one entry per (name, role) ever seen
        self._keys: dict[tuple[str, str], int] = {}
        self._names: list[str] = []
        self._nodes: list[str] = []
        self._roles: list[str] = []
        self._kinds: list[str] = []
        self._numel: list[int] = []
        self._codes: list[int] = []
        self._codes_np = np.zeros(0, np.int8)
        # the ring and the step being observed
        self._ring: deque[_StepRecord] = deque(maxlen=window)
        self._full_ring: deque[tuple[int, list]] = deque(maxlen=max(full_steps, 1))
        self._history = {k: deque(maxlen=window) for k in ("loss", "grad_norm", "update_ratio")}
        self._step: int | None = None
        self._rows_idx: list[int] = []
        # per row: (reductions, tensor or None, numel) or a host row (the 6 statistics)
        self._rows: list = []
        self._blocks: list = []  # (rows, 6) tensors of _observe_many
        self._block_rows = 0
        self._force_batched = False  # tests: the GPU's batched reductions on the CPU
        self._ends: dict = {}  # where each tensor ends in a concatenation, per layout
        self._layouts: dict = {}  # a role of a set of parameters: keys, names, sizes
        self._full: list = []
        self._full_bytes = 0
        self._before: list[torch.Tensor | None] = []
        self._params_seen_grad = False
        self._sample_ids: list | None = None
        self._pending: deque = deque()  # device steps waiting for their host copy
        self._after_left = 0
        self._cooldown_until: int | None = None
        self._seq = 0
        self._non_finite_latched = False
        self._thresholds: dict[str, tuple[float, float, int]] = {}  # med, threshold, age
        self._warned: set[str] = set()

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

    def take_forced_recording(self) -> bool:
        """Whether the next step must be recorded in full (``after`` steps after a
        trigger); counts the step when it says yes."""
        if self._after_left > 0 and not self._broken:
            self._after_left -= 1
            return True
        return False

    def replay(self, model: torch.nn.Module, run_step, step: int | None = None
               ) -> ReplayResult:
        """``keep_state=True``: replay ``step`` (default: the last trigger's) on a fresh
        ``model`` with ``run_step(model)`` (record/flight_replay.py)."""
        if self.state is None:
            raise ConfigurationError("replay() needs FlightRecorder(keep_state=True)")
        if step is None:
            if not self.fired:
                raise NotFoundError("replay(): no trigger has fired yet; pass step=")
            step = int(self.fired[-1]["step"])
        return replay(self.state, step, model, run_step)

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

    # ----- one step ----------------------------------------------------------------------

    @_guarded
    def begin(self, step: int, params: list) -> None:
        """Start of a training step: the parameters' values (statistics, and the copy the
        update is computed from)."""
        self._step = int(step)
        self._rows_idx, self._rows, self._full = [], [], []
        self._full_bytes = 0
        self._params_seen_grad = False
        self._sample_ids = None
        self._blocks, self._block_rows = [], 0
        values = [p.tensor.detach() for p in params]
        keys, names, nbytes, numels = self._layout(ff.VALUE, _PARAM_VALUE, params, values)
        if self.state is not None:
            self.state.keep(self._step, names, values)
        self._observe_many(keys, values, numels)
        before: list = [None] * len(values)
        if self.updates or self.full_steps:
            before = (torch._foreach_mul(values, 1.0) if self._batched(values)
                      else [t.clone() for t in values])  # one launch on a GPU
            self._keep_many(names, ff.VALUE, before, True, nbytes)
        self._before = before

    @_guarded
    def observe_tensor(self, name: str, tensor: torch.Tensor, node: str | None, kind: str) -> None:
        """A registered tensor's value; its gradient is observed by a hook when backward
        reaches it (the hook returns None: the gradient is not changed)."""
        if self._step is None or not isinstance(tensor, torch.Tensor):
            return
        t = tensor.detach()
        code = _LOSS_VALUE if kind == "loss" else _OTHER
        self._observe(self._key(name, node or name, ff.VALUE, kind, code, t), t)
        self._keep(name, ff.VALUE, t, copied=False)
        if tensor.requires_grad and not isinstance(tensor, torch.nn.Parameter) and kind != "parameter":
            tensor.register_hook(functools.partial(self._gradient_hook, name, node or name, kind))

    def _gradient_hook(self, name: str, node: str, kind: str, grad: torch.Tensor) -> None:
        if self._broken or self._step is None:
            return
        try:
            g = grad.detach()
            self._observe(self._key(name, node, ff.GRADIENT, kind, _OTHER, g), g)
            self._keep(name, ff.GRADIENT, g, copied=False)
        except Exception as e:  # noqa: BLE001 - inside backward: never raise
            self._broken = True
            log.warning("comgra_like: the flight recorder failed in a gradient hook (%s: %s) "
                        "and is switched off; training goes on", type(e).__name__, e)
        return

    @_guarded
    def observe_parameter_gradients(self, params: list) -> None:
        if self._step is None or self._params_seen_grad:
            return
        self._params_seen_grad = True
        grads = [p.tensor.grad for p in params]
        if None in grads:
            have = [(p, g) for p, g in zip(params, grads) if g is not None]
            params, grads = [p for p, _ in have], [g for _, g in have]
        grads = [g.detach() for g in grads]
        keys, names, nbytes, numels = self._layout(ff.GRADIENT, _PARAM_GRAD, params, grads)
        self._observe_many(keys, grads, numels)
        self._keep_many(names, ff.GRADIENT, grads, False, nbytes)

    @_guarded
    def observe_gradient(self, name: str, grad: torch.Tensor) -> None:
        """One parameter's gradient (watch()'s post-accumulate hooks); the parameters'
        gradients are then not read again at the end of the step."""
        if self._step is None:
            return
        self._params_seen_grad = True
        g = grad.detach()
        self._observe(self._key(name, name, ff.GRADIENT, "parameter", _PARAM_GRAD, g), g)
        self._keep(name, ff.GRADIENT, g, copied=False)

    @_guarded
    def observe_kpi(self, group: str, name: str, value) -> None:
        if self._step is None:
            return
        full = f"{group}/{name}"
        code = _LOSS_KPI if "loss" in full.lower() else _OTHER
        if isinstance(value, torch.Tensor):
            v = value.detach().reshape(-1)[:1]
            self._observe(self._key(full, full, ff.KPI, "kpi", code, v), v)
        else:
            v = float(value)
            key = self._key(full, full, ff.KPI, "kpi", code, None)
            self._rows_idx.append(key)
            self._rows.append((v, v * v, v, v, float(math.isnan(v)), float(math.isinf(v)),
                               1))  # a host row, as the CPU's reductions

    @_guarded
    def register_sample_ids(self, ids) -> None:
        if self._step is None:
            return
        if isinstance(ids, torch.Tensor):
            ids = ids.detach().reshape(-1).tolist()
        self._sample_ids = [i if isinstance(i, (int, str)) else str(i) for i in ids]

    @_guarded
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
                ff.UPDATE, _PARAM_UPDATE, [p for p, _ in pairs], updates)
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
        self._judge(_StepRecord(step, idx, derive(rows, raw), sample_ids, {}))

    @_guarded
    def settle(self) -> None:
        """Judge the steps still waiting for their copy from the GPU (at flush and
        finalize): waits for them."""
        while self._pending:
            self._settle(self._pending.popleft())

    def _drain(self) -> None:
        """Judge, oldest first, every waiting step whose copy has landed (``query()``:
        no waiting); the oldest is waited for only when more than ``_MAX_PENDING`` wait.
        Waiting for the step before at the end of each step (as before) kept the CPU at
        most a step ahead of the GPU, and an armed GPT-2 step waited for the CPU."""
        pending = self._pending
        while pending and (len(pending) > _MAX_PENDING or pending[0][4].query()):
            self._settle(pending.popleft())

    def _settle(self, pending: tuple) -> None:
        step, idx, rows, host, event, sample_ids = pending
        event.synchronize()
        self._judge(_StepRecord(step, idx, derive(rows, host.tolist()), sample_ids, {}))

    # ----- statistics --------------------------------------------------------------------

    def _key(self, name: str, node: str, role: str, kind: str, code: int,
             tensor: torch.Tensor | None) -> int:
        key = self._keys.get((name, role))
        if key is None:
            key = self._keys[(name, role)] = len(self._names)
            self._names.append(name)
            self._nodes.append(node)
            self._roles.append(role)
            self._kinds.append(kind)
            self._codes.append(code)
            self._numel.append(1 if tensor is None else int(tensor.numel()))
            self._codes_np = np.asarray(self._codes, np.int8)
        return key

    def _observe(self, key: int, t: torch.Tensor) -> None:
        """Three reductions where the tensor lives (sum, sum of squares, min and max). On
        the CPU they are read at once as Python floats (no waiting there; cheaper than
        stacking 0-dim tensors at the end of the step), NaN and Inf counted only where a
        sum is not finite. On a GPU they stay 0-dim tensors until the end of the step
        stacks them all into one, the NaN and Inf counted at once (two more reductions,
        no waiting)."""
        n = t.numel()
        if n == 0:
            return
        if t.is_complex():
            t = t.abs()
        if t.dtype is not torch.float32:
            t = t.float()
        flat = t.reshape(-1)
        if flat.device.type == "cpu":
            total, squares = flat.sum().item(), torch.dot(flat, flat).item()
            low, high = torch.aminmax(flat)
            nan = inf = 0.0
            if not (math.isfinite(total) and math.isfinite(squares)):
                nan, inf = float(torch.isnan(flat).sum()), float(torch.isinf(flat).sum())
            self._rows.append((total, squares, low.item(), high.item(), nan, inf, n))
        else:
            parts = (flat.sum(), torch.dot(flat, flat), *torch.aminmax(flat),
                     torch.isnan(flat).sum().float(), torch.isinf(flat).sum().float())
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
        (``_sums``), three stacks.
        NaN and Inf are not counted here (NaN in the counts); a non-finite value still
        shows in the sums and norms."""
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
        nan = torch.full_like(sums, float("nan"))
        self._blocks.append(torch.stack((sums, l2 * l2, -amax, amax, nan, nan), dim=1))
        first = self._block_rows
        self._rows.extend((BLOCK, first + i, n) for i, n in enumerate(numels))
        self._rows_idx.extend(keys)
        self._block_rows += len(keys)

    def _keep(self, name: str, role: str, t: torch.Tensor, copied: bool) -> None:
        """Keep a full value for the full_steps ring, within the per-step share of
        max_full_bytes (the ring holds full_steps steps and the open one)."""
        if not self.full_steps:
            return
        nbytes = t.numel() * t.element_size()
        if self._full_bytes + nbytes > self.max_full_bytes // (self.full_steps + 1):
            self._warn("full", "comgra_like: the flight recorder keeps full values of at most "
                       f"{self.max_full_bytes // (self.full_steps + 1)} bytes per step "
                       "(max_full_bytes / (full_steps + 1)); the rest of a step is kept as "
                       "statistics only (this warning is shown once)")
            return
        self._full_bytes += nbytes
        # not a copy: the tensor itself and its version; one changed in place later (a
        # gradient zeroed in place, an in-place op on an activation) is left out when the
        # window is written. Copies (the parameters before the step, the updates) are
        # the flight recorder's own: version None.
        self._full.append((name, role, t, None if copied else tensor_version(t)))

    def _keep_many(self, names: list, role: str, tensors: list, copied: bool,
                   nbytes: int) -> None:
        """``_keep`` for a role of all parameters at once (``nbytes``: theirs in all)."""
        if not self.full_steps:
            return
        if self._full_bytes + nbytes > self.max_full_bytes // (self.full_steps + 1):
            for name, t in zip(names, tensors):  # as many as fit, with the warning
                self._keep(name, role, t, copied)
            return
        self._full_bytes += nbytes
        self._full.extend((name, role, t, None if copied else tensor_version(t))
                          for name, t in zip(names, tensors))

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message)

    # ----- triggers ----------------------------------------------------------------------

    def _judge(self, rec: _StepRecord) -> None:
        with np.errstate(all="ignore"):  # inf / inf of a diverged step: NaN, not judged
            self._judge_step(rec)

    def _judge_step(self, rec: _StepRecord) -> None:
        v = rec.values
        codes = self._codes_np[rec.idx] if len(rec.idx) else np.zeros(0, np.int8)
        l2sq = np.square(v[:, 3]) if len(v) else np.zeros(0)
        scalars = rec.scalars
        scalars["grad_norm"] = (float(math.sqrt(l2sq[codes == _PARAM_GRAD].sum()))
                                if (codes == _PARAM_GRAD).any() else None)
        pv, pu = l2sq[codes == _PARAM_VALUE].sum(), l2sq[codes == _PARAM_UPDATE].sum()
        scalars["update_ratio"] = (float(math.sqrt(pu / pv)) if (codes == _PARAM_UPDATE).any()
                                   and pv > 0 else None)
        loss = np.flatnonzero(codes == _LOSS_VALUE)
        if not len(loss):
            loss = np.flatnonzero(codes == _LOSS_KPI)
        scalars["loss"] = float(v[loss[0], 0]) if len(loss) else None
        self._ring.append(rec)
        fired = []
        if ff.NON_FINITE in self.triggers and len(v):
            bad = (v[:, 4] > 0) | (v[:, 5] > 0) | ~np.isfinite(v[:, :4]).all(axis=1)
            if not bad.any():
                self._non_finite_latched = False
            elif not self._non_finite_latched:  # one trigger per non-finite stretch
                self._non_finite_latched = True
                row = int(np.flatnonzero(bad)[0])
                key = int(rec.idx[row])
                fired.append({"kind": ff.NON_FINITE, "tensor": self._names[key],
                              "node": self._nodes[key], "role": self._roles[key],
                              "value": float(v[row, 4] + v[row, 5]) or float(v[row, 0]),
                              "rows_non_finite": int(bad.sum())})
        for kind, scalar in ((ff.LOSS_SPIKE, "loss"), (ff.GRAD_NORM_SPIKE, "grad_norm"),
                             (ff.UPDATE_SPIKE, "update_ratio")):
            value, history = scalars[scalar], self._history[scalar]
            if value is None or not math.isfinite(value):
                continue
            if kind in self.triggers and len(history) >= self.warmup:
                med, threshold = self._threshold(scalar, history)
                if value > threshold:
                    fired.append({"kind": kind, "value": value, "median": med,
                                  "threshold": threshold, **self._mover(scalar)})
            history.append(value)
        if self.predicate is not None:
            said = self.predicate(self._view(rec))
            if said:
                fired.append({"kind": ff.PREDICATE, "value": said if isinstance(
                    said, (int, float)) and not isinstance(said, bool) else 1.0,
                    "said": str(said) if isinstance(said, str) else None})
        if fired:
            self._fire(rec.step, fired)

    def _threshold(self, scalar: str, history: deque) -> tuple[float, float]:
        """(median, spike threshold) of a scalar's window; recomputed every 8th step (the
        median and MAD of up to ``window`` values move slowly; the cost was a third of
        the flight recorder's per-step time on the benchmark MLP)."""
        cached = self._thresholds.get(scalar)
        if cached is not None and cached[2] < 7:
            self._thresholds[scalar] = (cached[0], cached[1], cached[2] + 1)
            return cached[0], cached[1]
        h = np.asarray(history)
        med = float(np.median(h))
        scale = max(_MAD_TO_SIGMA * float(np.median(np.abs(h - med))),
                    self.spike_floor * abs(med), 1e-12)
        self._thresholds[scalar] = (med, med + self.spike_mads * scale, 0)
        return med, med + self.spike_mads * scale

    def _mover(self, scalar: str) -> dict:
        """For a spike: the tensor whose statistic grew most against its window median."""
        code = {"loss": _LOSS_VALUE, "grad_norm": _PARAM_GRAD, "update_ratio": _PARAM_UPDATE}[scalar]
        last = self._ring[-1]
        best, best_ratio = None, 0.0
        for row, key in enumerate(last.idx):
            if self._codes[key] != code:
                continue
            past = [r.values[r.idx == key, 3] for r in list(self._ring)[:-1]]
            past = np.concatenate(past) if past else np.zeros(0)
            med = float(np.median(past)) if len(past) else 0.0
            ratio = float(last.values[row, 3]) / med if med > 0 else math.inf
            if best is None or ratio > best_ratio:
                best, best_ratio = int(key), ratio
        if best is None:
            return {"tensor": None}
        return {"tensor": self._names[best], "node": self._nodes[best],
                "role": self._roles[best], "growth": best_ratio}

    def _view(self, rec: _StepRecord) -> FlightStep:
        stats = {}
        for row, key in enumerate(rec.idx):
            stats[(self._names[key], self._roles[key])] = dict(zip(ff.STATISTICS,
                                                                   rec.values[row].tolist()))
        return FlightStep(rec.step, rec.scalars["loss"], rec.scalars["grad_norm"],
                          rec.scalars["update_ratio"], stats)

    def _fire(self, step: int, fired: list[dict]) -> None:
        if self._cooldown_until is not None and step < self._cooldown_until:
            self.suppressed += 1
            return
        self._cooldown_until = step + self.cooldown + 1
        first = self._ring[0].step
        trigger = {**fired[0], "step": step, "window": [first, step],
                   "steps_in_window": len(self._ring), "triggers": fired,
                   "after": self.after, "time": time.time(),
                   "sample_ids": {str(r.step): r.sample_ids for r in self._ring
                                  if r.sample_ids is not None}}
        name = None
        try:
            name = self._write(trigger)
            trigger["name"] = name
        except Exception as e:  # noqa: BLE001 - a failed write must not stop training
            log.warning("comgra_like: the flight recorder could not write the window of "
                        "step %s (%s: %s)", step, type(e).__name__, e)
        self.fired.append(trigger)
        self._after_left = self.after
        self._name_in_trial(trigger, [r.step for r in self._ring])
        log.warning("comgra_like: flight recorder trigger %s at step %s (tensor %s, value %s); "
                    "window of steps %s-%s %s", fired[0]["kind"], step,
                    fired[0].get("tensor"), fired[0].get("value"), first, step,
                    f"written as flight/{name}" if name else "NOT written")
        if self.on_trigger == "raise":
            raise FlightTriggerError(
                f"flight recorder: {fired[0]['kind']} at training step {step}"
                + (f" in {fired[0]['tensor']!r}" if fired[0].get("tensor") else "")
                + f" (value {fired[0].get('value')}); "
                + (f"the window of steps {first}-{step} is stored in the trial's flight/"
                   f"{name} (Group.read_flight)" if name else "the window could NOT be written")
                + ". FlightRecorder(on_trigger='raise') stops training here; "
                "on_trigger='record' records and goes on")

    def _name_in_trial(self, trigger: dict, steps: list[int]) -> None:
        """trial.json names the trigger (through the writer: ``notify``)."""
        if self._notify is None:
            return
        try:
            self._notify(trial_json_entry(trigger, steps))
        except Exception as e:  # noqa: BLE001 - the window is written; training goes on
            self._warn("notify", "comgra_like: the flight recorder's trigger could not be "
                       f"named in trial.json ({type(e).__name__}: {e}); the window is in "
                       "the trial's flight/ folder (shown once)")

    def _write(self, trigger: dict) -> str:
        cols: dict[str, list] = {f: [] for f in ff.STATS_SCHEMA.names}
        for rec in self._ring:
            n = len(rec.idx)
            cols["training_step"].extend([rec.step] * n)
            cols["order"].extend(range(n))
            for key in rec.idx.tolist():
                cols["name"].append(self._names[key])
                cols["node"].append(self._nodes[key])
                cols["role"].append(self._roles[key])
                cols["kind"].append(self._kinds[key])
                cols["numel"].append(self._numel[key])
            for i, stat in enumerate(ff.STATISTICS):
                cols[stat].extend(rec.values[:, i].tolist())
        full, changed = [], []
        for step, kept in (self._full_ring if self.full_steps else ()):
            for name, role, t, version in kept:
                if version is not None and tensor_version(t) != version:
                    changed.append(f"{name} ({role}, step {step})")
                    continue
                full.append((step, name, role, t.detach().float().cpu().numpy()))
        if changed:
            trigger["full_values_changed_in_place"] = changed
            self._warn("in-place", "comgra_like: the flight recorder left out the full values "
                       "of tensors changed in place after their step (listed in the "
                       "window's JSON as full_values_changed_in_place), e.g. "
                       f"{changed[0]}; their statistics are kept (shown once)")
        seq = self._seq
        self._seq += 1
        return ff.write_window(self._trial_path, seq, self._rank, trigger, cols, full)
