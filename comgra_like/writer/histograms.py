"""Histograms of watched modules (``comgra_like.watch``): a per-step computation of the
writer (see ``processors.py``).

For each captured tensor that belongs to a watched module (``protocol.Watch`` says which)
one histogram per step: the module's inputs and outputs (``io``), the per-sample l2 norms
of their gradients over the non-batch dimensions (``io_grad``), its parameters
(``params``) and their gradients (``params_grad``).

The values are torchexplorer's (1.1.2): ``sample_n`` values drawn with replacement when
the tensor has more (all of them when ``sample_n`` is None), then the
``reject_outlier_proportion`` of them farthest from the (lower) median dropped. The
histogram has ``bins`` equal bins from the smallest to the largest value kept (numpy's
``histogram`` over that range); instead of torchexplorer's running bounds, each step keeps
its own range, and readers rebin for a picture over time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ..format.layout import HISTOGRAMS
from ..format.schema import HISTOGRAMS_SCHEMA
from ..protocol import CaptureSpec, Start, Watch
from ..vocabulary import FORWARD, GRADIENT_PREFIX, PARAMETER
from .step_processor import StepProcessor

IO, IO_GRAD, PARAMS, PARAMS_GRAD = "io", "io_grad", "params", "params_grad"
# Rows binned together at most (~100 us of work per 16 rows of 1000 values, between two
# pauses; see scheduling.py)
_BLOCK_ROWS = 16
_IO_ROLE_PREFIXES = ("input ", "output ")


def sample_values(values: np.ndarray, sample_n: int | None, reject: float,
                  rng: np.random.Generator) -> np.ndarray:
    """The values a histogram counts (torchexplorer's sampling and outlier rejection)."""
    if sample_n is not None and sample_n < values.size:
        values = values[rng.integers(0, values.size, sample_n)]
    if reject > 0:
        k = int(values.size * reject)
        if k > 0:
            middle = (values.size - 1) // 2  # torch.median: the lower of the two middles
            center = np.partition(values, middle)[middle]
            keep = np.argsort(np.abs(values - center), kind="stable")[: values.size - k]
            values = values[keep]
    return values


def histogram(values: np.ndarray, bins: int) -> tuple[float, float, np.ndarray]:
    """(lo, hi, counts): ``bins`` equal bins over the range of ``values`` (numpy's
    ``histogram``, whose range of one value is that value +- 0.5; see ``_wide_histogram``
    for ranges numpy cannot bin)."""
    lo, hi = float(values.min()), float(values.max())
    try:
        counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    except ValueError:
        return _wide_histogram(values, bins, lo, hi)
    return float(edges[0]), float(edges[-1]), counts.astype(np.int64)


def _wide_histogram(values: np.ndarray, bins: int, lo: float, hi: float
                    ) -> tuple[float, float, np.ndarray]:
    """Binned in float64 where numpy's ``histogram`` cannot bin the range in the values'
    precision: one value so large that it +- 0.5 is itself (a gradient of 1e38 just before
    an overflow; the range is widened by a millionth of the value), or a float32 range
    wider than float32 holds."""
    kept = np.asarray(values, dtype=np.float64)
    first, last = float(lo), float(hi)
    if not last - first > 0 or first - 0.5 == first:
        half = max(0.5, abs(first) * 1e-6, abs(last) * 1e-6)
        middle = first / 2 + last / 2
        first, last = middle - half, middle + half
    counts, edges = np.histogram(kept, bins=bins, range=(first, last))
    return float(edges[0]), float(edges[-1]), counts.astype(np.int64)


def _kept_mask(values: np.ndarray, reject: float) -> np.ndarray | None:
    """Per row of ``values`` (rows of one size), which values ``sample_values`` keeps
    after rejecting outliers (None: all): the same set as its stable argsort, found with
    two partitions of the whole block instead of a sort per row."""
    n = values.shape[1]
    k = int(n * reject) if reject > 0 else 0
    if k <= 0:
        return None
    middle = (n - 1) // 2  # torch.median: the lower of the two middles
    center = np.partition(values, middle, axis=1)[:, middle:middle + 1]
    dist = np.abs(values - center)
    m = n - k
    threshold = np.partition(dist, m - 1, axis=1)[:, m - 1:m]
    keep = dist < threshold
    # Ties at the threshold: a stable sort keeps the first ones, in index order.
    tie = dist == threshold
    need = m - keep.sum(axis=1, keepdims=True)
    keep |= tie & (np.cumsum(tie, axis=1) <= need)
    return keep


def block_histograms(values: np.ndarray, keep: np.ndarray | None, bins: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, counts) per row of ``values`` (finite, rows of one size and dtype) over
    the values ``keep`` marks (all if None): what ``histogram`` gives for each row, bit
    for bit (numpy's binning replayed on the whole block; one call per row cost the writer
    ~80 us each, 190 per recorded step of the benchmark's transformer).

    A row whose range is too narrow for ``bins`` distinct edges in its own precision
    (numpy's ``histogram`` raises there), or too wide for it, is binned with float64
    edges (``_wide_histogram`` where numpy cannot bin it at all).
    """
    rows = values.shape[0]
    if keep is None:
        lo, hi = values.min(axis=1), values.max(axis=1)
    else:
        lo = np.where(keep, values, np.inf).min(axis=1)
        hi = np.where(keep, values, -np.inf).max(axis=1)
    first, last = lo.astype(np.float64), hi.astype(np.float64)
    flat = first == last  # numpy's expansion of an empty range
    first[flat] -= 0.5
    last[flat] += 0.5
    dtype = values.dtype
    edges = np.linspace(first, last, bins + 1, endpoint=True, dtype=dtype, axis=1)
    counts = np.zeros((rows, bins), dtype=np.int64)
    out_lo, out_hi = edges[:, 0].astype(np.float64), edges[:, -1].astype(np.float64)
    narrow = np.any(edges[:, :-1] >= edges[:, 1:], axis=1)
    # a range wider than the dtype holds: the differences below would overflow
    narrow |= (last - first) >= float(np.finfo(dtype).max)
    for r in np.flatnonzero(narrow):
        kept = values[r] if keep is None else values[r][keep[r]]
        try:
            c, e = np.histogram(kept.astype(np.float64), bins=bins, range=(first[r], last[r]))
            counts[r], out_lo[r], out_hi[r] = c, e[0], e[-1]
        except ValueError:
            out_lo[r], out_hi[r], counts[r] = _wide_histogram(kept, bins, lo[r], hi[r])
    ok = np.flatnonzero(~narrow)
    if ok.size == 0:
        return out_lo, out_hi, counts
    if ok.size < rows:
        values, edges, first, last, lo = values[ok], edges[ok], first[ok], last[ok], lo[ok]
        keep = None if keep is None else keep[ok]
    a = values if keep is None else np.where(keep, values, lo[:, None])
    # numpy's order and precisions: the difference in the values' dtype (the range's
    # Python floats are weak), divided by the width as a float64 scalar, times bins
    f = (a - first.astype(dtype)[:, None]) / (last - first)[:, None] * bins
    index = f.astype(np.intp)
    index[index == bins] -= 1
    index[a < np.take_along_axis(edges, index, axis=1)] -= 1
    up = (a >= np.take_along_axis(edges, index + 1, axis=1)) & (index != bins - 1)
    index[up] += 1
    index += (np.arange(ok.size) * bins)[:, None]
    picked = index.ravel() if keep is None else index[keep]
    counts[ok] = np.bincount(picked, minlength=ok.size * bins).reshape(ok.size, bins)
    return out_lo, out_hi, counts


def per_sample_norms(flat: np.ndarray, shape: tuple[int, ...],
                     batch_dim: int | None) -> np.ndarray:
    """The l2 norm of each sample over the non-batch dimensions (one value for a tensor
    without a batch dimension)."""
    if batch_dim is None or len(shape) == 0:
        return np.array([np.linalg.norm(flat.astype(np.float64))], dtype=np.float64)
    x = np.moveaxis(flat.reshape(shape), batch_dim, 0).reshape(shape[batch_dim], -1)
    x = x.astype(np.float64)
    return np.sqrt(np.einsum("ij,ij->i", x, x))


class Histograms(StepProcessor):
    """The writer's histogram processor; idle until a ``protocol.Watch`` configures it."""

    presorted: tuple[str, ...] = ()

    def __init__(self, start: Start):
        self.trial_id = start.trial_id
        self.config: dict | None = None
        self._io_nodes: frozenset[str] = frozenset()
        self._no_io_grad: frozenset[str] = frozenset()
        self._params: dict[str, tuple[str, str]] = {}
        self._log: frozenset[str] = frozenset()
        self._times: dict[int, float] = {}
        self._rng = np.random.default_rng(0)
        self._plans: dict[object, list] = {}  # layout key -> [(index, what, node, role)]

    def configure(self, msg: Watch) -> None:
        c = msg.config
        self.config = c
        self._io_nodes = frozenset(c.get("io_nodes", ()))
        self._no_io_grad = frozenset(c.get("no_io_grad", ()))
        self._params = {k: (v[0], v[1]) for k, v in c.get("params", {}).items()}
        self._log = frozenset(c.get("log", ()))
        self._rng = np.random.default_rng(c.get("seed", 0))
        self._plans.clear()

    def step_time(self, step: int, time: float) -> None:
        self._times[int(step)] = float(time)

    def _plan(self, specs: list[CaptureSpec]) -> list[tuple[int, str, str, str]]:
        """Which captures get a histogram, and as what (the same for a layout)."""
        plan = []
        log, params, io_nodes = self._log, self._params, self._io_nodes
        for i, s in enumerate(specs):
            grad = s.recording_type.startswith(GRADIENT_PREFIX)
            if not grad and s.recording_type != FORWARD:
                continue  # updates
            if s.kind == PARAMETER:
                where = params.get(s.tensor_name)
                what = PARAMS_GRAD if grad else PARAMS
                if where is not None and what in log:
                    plan.append((i, what, where[0], where[1]))
                continue
            base = s.node.split("#", 1)[0]
            if s.role.startswith(_IO_ROLE_PREFIXES) and base in io_nodes:
                what = IO_GRAD if grad else IO
                if what in log and not (grad and base in self._no_io_grad):
                    plan.append((i, what, s.node, s.role))
        return plan

    def reduce(self, step, pause: Callable[[], None]) -> Any:
        if self.config is None:
            return None
        plan = self._plans.get(step.layout_key)
        if plan is None:
            if len(self._plans) > 64:
                self._plans.clear()
            plan = self._plans[step.layout_key] = self._plan(step.specs)
        if not plan:
            return None
        sample_n = self.config.get("sample_n")
        rows = []
        for i, what, node, role in plan:
            spec = step.specs[i]
            flat = step.arrays[i]
            if flat.size == 0:
                continue
            if what == IO_GRAD:
                values = per_sample_norms(flat, spec.shape, spec.batch_dim)
            else:
                values = flat
            vmin, vmax = float(values.min()), float(values.max())
            # min and max are finite only if every value is (min propagates NaN): no mask
            # of the whole tensor in the common case
            if not (np.isfinite(vmin) and np.isfinite(vmax)):
                values = values[np.isfinite(values)]
                if values.size == 0:
                    continue
                vmin, vmax = float(values.min()), float(values.max())
            # the draw copies out of shared memory; rejection and counting wait for tables()
            drawn = sample_values(values, sample_n, 0.0, self._rng)
            if drawn.base is not None or drawn is flat:
                drawn = np.array(drawn)
            rows.append((spec.iteration, node, role, spec.recording_type, what, drawn, vmin,
                         vmax))
            pause()
        msg = step.message
        return msg.step, msg.toe, rows

    def tables(self, reduced: Any, pause: Callable[[], None]) -> dict[str, pa.Table | None]:
        if not reduced:
            return {}
        training_step, toe, drawn_rows = reduced
        if not drawn_rows:
            return {}
        bins = int(self.config.get("bins", 30))
        reject = float(self.config.get("reject_outlier_proportion", 0.0))
        # Rows of one size and dtype (most: sample_n values) as one block each
        blocks: dict[tuple, list[int]] = {}
        for i, row in enumerate(drawn_rows):
            blocks.setdefault((row[5].dtype.str, row[5].size), []).append(i)
        results: list = [None] * len(drawn_rows)
        for members in blocks.values():
            for part in range(0, len(members), _BLOCK_ROWS):
                chunk = members[part:part + _BLOCK_ROWS]
                values = np.stack([drawn_rows[i][5] for i in chunk])
                keep = _kept_mask(values, reject)
                lo, hi, counts = block_histograms(values, keep, bins)
                n_kept = values.shape[1] if keep is None else int(keep[0].sum())
                for j, i in enumerate(chunk):
                    results[i] = (float(lo[j]), float(hi[j]), counts[j], n_kept)
                pause()
        rows = []
        for (it, node, role, rtype, what, _drawn, vmin, vmax), (lo, hi, counts, n_kept) in zip(
                drawn_rows, results):
            rows.append((it, node, role, rtype, what, lo, hi, counts, n_kept, vmin, vmax))
        n = len(rows)
        it, node, role, rtype, what, lo, hi, counts, kept, vmin, vmax = zip(*rows)
        time = self._times.pop(training_step, float(training_step))
        if len(self._times) > 4096:  # steps announced but never sent
            self._times.clear()
        table = pa.table({
            "trial_id": [self.trial_id] * n,
            "training_step": [training_step] * n,
            "type_of_execution": [toe] * n,
            "iteration": list(it),
            "module": list(node),
            "role": list(role),
            "recording_type": list(rtype),
            "what": list(what),
            "time": [time] * n,
            "lo": list(lo),
            "hi": list(hi),
            "counts": [c.tolist() for c in counts],
            "n": list(kept),
            "vmin": list(vmin),
            "vmax": list(vmax),
        }, schema=_PLAIN)
        return {HISTOGRAMS: table.cast(HISTOGRAMS_SCHEMA)}


_PLAIN = pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                    for f in HISTOGRAMS_SCHEMA])
