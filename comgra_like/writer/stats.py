"""Statistics of many tensors at once, in numpy, with a handful of calls per tensor size.

This runs in the writer process (see ``writer/worker.py``), which has no torch: the
training process copies the recorded tensors into shared memory and goes on training
while this process reduces them. Captured tensors are flattened to ``[batch, values]``;
tensors with the same number of values are stacked into one ``[batch, count, values]``
block and reduced along the last (contiguous) axis, so a network whose registered tensors
come in a few sizes costs a few dozen numpy calls per recorded step, however many tensors
it registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..vocabulary import STATISTIC_INDEX, STATISTICS

# The last axis of every statistics array holds vocabulary.STATISTICS in their order.
NUM_STATS = len(STATISTICS)
_I = STATISTIC_INDEX
_MEAN, _ABS_MEAN, _STD, _ABS_MAX = _I["mean"], _I["abs_mean"], _I["std"], _I["abs_max"]
_MIN, _MAX, _NORM = _I["min"], _I["max"], _I["norm"]
_NAN_COUNT, _INF_COUNT = _I["nan_count"], _I["inf_count"]
_COUNTS = [_NORM, _NAN_COUNT, _INF_COUNT]  # 0 for an empty tensor, the others NaN
# Both counts with one index: a slice where they are neighbours (one numpy call).
_BOTH_COUNTS = (slice(_NAN_COUNT, _INF_COUNT + 1) if _INF_COUNT == _NAN_COUNT + 1
                else [_NAN_COUNT, _INF_COUNT])


# Values per chunk: a chunk (256 KiB of float32) and its temporaries stay in a core's L2
# cache while every pass over it runs. Whole-array passes went to L3/DRAM once per
# statistic, and that memory traffic slowed the training process on the other core
# about three times as much as the chunked passes (README, Performance). Smaller chunks
# cost more numpy calls: ~0.3 ms of the writer's CPU per recorded step of the benchmark.
CHUNK_VALUES = 1 << 16

_ONES: dict[int, np.ndarray] = {}


def _ones(n: int) -> np.ndarray:
    ones = _ONES.get(n)
    if ones is None:
        if len(_ONES) >= 64:
            _ONES.clear()
        ones = _ONES[n] = np.ones(n, np.float32)
    return ones


def _row_extremes(c: np.ndarray, mx: np.ndarray, mn: np.ndarray) -> None:
    """Maximum and minimum of every row of a 2-D ``c`` into ``mx`` and ``mn``.

    ``np.max(c, axis=1)`` sets up numpy's reduction loop once per row, which dominates
    for short rows (23 us for 256 rows of 256 values here, 4 us for one row of 65,536);
    ``reduceat`` over the flat array with one start per row does the same in ~11 us.
    Both give exactly the maximum (and propagate NaN).
    """
    r, n = c.shape
    if n >= 2 and r > 1 and c.flags.c_contiguous:
        flat = c.reshape(-1)
        starts = np.arange(0, r * n, n)
        np.maximum.reduceat(flat, starts, out=mx)
        np.minimum.reduceat(flat, starts, out=mn)
    else:
        np.max(c, axis=1, out=mx)
        np.min(c, axis=1, out=mn)


def block_statistics(x: np.ndarray, pause=None) -> np.ndarray:
    """Statistics over the last axis of a float32 ``x`` (``[..., n]``) -> ``[..., NUM_STATS]``.

    ``std`` uses Bessel's correction and is 0 for one value. It comes from the sum of
    squares where that is exact enough (the mean carries at most half of the second
    moment, so the subtraction loses at most one bit) and from the centred values for
    the other rows, so a large mean does not cost accuracy. NaN propagates into every
    statistic but the counts, as numpy's own functions do.

    Rows are reduced a chunk at a time (``CHUNK_VALUES``), with every pass over a chunk
    done before the next chunk is read; the results of all chunks are finished at once.
    ``pause`` (optional) is called before every chunk but the first.
    """
    # Overflow of a float32 sum is handled below (the row again in float64); inf - inf of
    # non-finite rows gives the NaN numpy's own functions give. Neither is worth a warning.
    with np.errstate(over="ignore", invalid="ignore"):
        return _block_statistics(x, pause)


def _block_statistics(x: np.ndarray, pause) -> np.ndarray:
    n = x.shape[-1]
    lead = x.shape[:-1]
    out = np.empty(lead + (NUM_STATS,), np.float32)
    r = math.prod(lead)
    if r == 0:
        return out
    if n == 0:
        # An empty tensor (a (B, 0) activation, a zero-size parameter) has no values to
        # average or compare: NaN; its norm is that of an empty sum (0), counts are 0.
        out[...] = np.nan
        out[..., _COUNTS] = 0.0
        return out
    rows = x.reshape(r, n)  # a view for the writer's blocks (C-contiguous); else a copy
    total = np.empty(r, np.float32)
    abs_sum = np.empty(r, np.float32)
    sq = np.empty(r, np.float32)
    mx = np.empty(r, np.float32)
    mn = np.empty(r, np.float32)
    ones = _ones(n)
    per = max(1, CHUNK_VALUES // n)
    scratch = np.empty((min(per, r), n), np.float32)
    exact_var: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, variance) to put in
    nf = np.float32(n)
    half_n = np.float32(0.5 * n)
    for a in range(0, r, per):
        if a and pause is not None:
            pause()
        b = min(a + per, r)
        c = rows[a:b]
        t = scratch[:b - a]
        tc = total[a:b]
        # Sums as matrix-vector products: several times faster than numpy's reduction
        # on short rows (one per sample of an activation).
        np.matmul(c, ones, out=tc)
        np.abs(c, out=t)
        np.matmul(t, ones, out=abs_sum[a:b])
        _row_extremes(c, mx[a:b], mn[a:b])
        np.vecdot(c, c, out=sq[a:b])
        if n > 1:
            # n mean^2 > sum(x^2) / 2: the subtraction below would lose more than a
            # bit, so this row's variance comes from its centred values, computed now
            # while the chunk is in cache.
            inexact = np.flatnonzero(tc * tc > half_n * sq[a:b])
            if inexact.size:
                centred = c[inexact] - (tc[inexact] / nf)[:, None]
                exact_var.append((inexact + a, np.vecdot(centred, centred)))
    mean = total / nf
    if n > 1:
        var = np.maximum(sq - total * mean, 0)
        for idx, v in exact_var:
            var[idx] = v
        var /= np.float32(n - 1)
    else:
        var = np.zeros_like(mean)
    flat = out.reshape(r, NUM_STATS)
    flat[:, _MEAN] = mean
    flat[:, _ABS_MEAN] = abs_sum / nf
    flat[:, _STD] = np.sqrt(var)
    flat[:, _ABS_MAX] = np.maximum(mx, -mn)
    flat[:, _MIN] = mn
    flat[:, _MAX] = mx
    flat[:, _NORM] = np.sqrt(sq)
    if np.isfinite(total).all() and np.isfinite(sq).all():
        # Finite sums mean no NaN or Inf in the row (overflow of the sum of squares
        # aside, which only costs the exact count below): skip two full passes.
        flat[:, _BOTH_COUNTS] = 0.0
    else:
        flat[:, _NAN_COUNT] = np.isnan(rows).sum(axis=1)
        flat[:, _INF_COUNT] = np.isinf(rows).sum(axis=1)
        # Finite values whose float32 sums overflowed (an attention mask of -3.4e38, the
        # float32 minimum): those rows again in float64, where their sums fit.
        overflowed = np.flatnonzero(
            (flat[:, _NAN_COUNT] == 0) & (flat[:, _INF_COUNT] == 0)
            & ~(np.isfinite(total) & np.isfinite(sq) & np.isfinite(abs_sum)))
        if overflowed.size:
            _float64_rows(rows, overflowed, flat)
    return out


def _float64_rows(rows: np.ndarray, idx: np.ndarray, flat: np.ndarray) -> None:
    """Mean, abs mean, std and norm of the rows ``idx`` in float64 (stored as float32: a
    norm beyond float32's range is inf, every other statistic fits)."""
    x = rows[idx].astype(np.float64)
    n = x.shape[1]
    scale = np.abs(x).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    y = x / scale  # the sum of squares of values near 3.4e38 fits float64 even so
    mean = y.mean(axis=1)
    std = y.std(axis=1, ddof=1) if n > 1 else np.zeros(len(idx))
    norm = np.sqrt(np.einsum("ij,ij->i", y, y))
    s = scale[:, 0]
    with np.errstate(over="ignore"):
        flat[idx, _MEAN] = (mean * s).astype(np.float32)
        flat[idx, _ABS_MEAN] = (np.abs(y).mean(axis=1) * s).astype(np.float32)
        flat[idx, _STD] = (std * s).astype(np.float32)
        flat[idx, _NORM] = (norm * s).astype(np.float32)


def batch_aggregates(per_sample: np.ndarray, axis: int = 0) -> np.ndarray:
    """Mean, abs-max and std (ddof=1) over ``axis`` -> ``[3, <the other axes>]``.

    Not chunked itself: the writer hands it blocks of at most ``CHUNK_VALUES`` values,
    the same sub-blocks ``block_statistics`` reduces, while they are in cache. Sums over
    ``axis`` are products with a vector of ones (half the time of ``sum(axis=...)`` on
    the writer's ``[tensors, batch, values]`` blocks).
    """
    shape = per_sample.shape
    b = shape[axis]
    rest = shape[:axis] + shape[axis + 1:]
    out = np.empty((3,) + rest, np.float32)
    lead = math.prod(shape[:axis])
    trail = math.prod(shape[axis + 1:])
    x = per_sample.reshape(lead, b, trail)  # a view for contiguous input
    ones = _ones(b)[None, :]
    mean = np.matmul(ones, x)[:, 0]  # [lead, trail]
    mean /= np.float32(b)
    out[0] = mean.reshape(rest)
    out[1] = np.maximum(x.max(axis=1), -x.min(axis=1)).reshape(rest)
    if b > 1:
        centered = x - mean[:, None, :]
        np.multiply(centered, centered, out=centered)
        var = np.matmul(ones, centered)[:, 0]
        var /= np.float32(b - 1)
        out[2] = np.sqrt(var).reshape(rest)
    else:
        out[2] = 0.0
    return out


@dataclass
class SizeGroup:
    """Arrays of one size, stacked: ``members[j]`` is the caller's index of ``block[j]``."""

    members: list[int]
    block: np.ndarray  # [len(members), B, n], C-contiguous
    # The matrices ``block`` is a copy of (None: it is a view of them); once they hold
    # new numbers, ``restack()`` brings the copy up to date.
    stacked_from: list[np.ndarray] | None = None

    def restack(self) -> None:
        if self.stacked_from is not None:
            np.stack(self.stacked_from, axis=0, out=self.block)


def group_by_size(mats: list[np.ndarray]) -> list[SizeGroup]:
    """Stack ``[B, n_i]`` matrices of equal ``n_i`` (order of first appearance).

    Matrices that lie one after the other in memory (the recorder allocates tensors of
    one size next to each other in shared memory) become one strided view, not a copy;
    a size whose matrices lie in several such runs gives one group per run.
    """
    by_size: dict[tuple, list[int]] = {}
    for i, m in enumerate(mats):
        by_size.setdefault((m.shape[0], m.shape[1]), []).append(i)
    groups = []
    for members in by_size.values():
        runs = _adjacent_runs([mats[i] for i in members])
        if runs is None:
            sources = [mats[i] for i in members]
            groups.append(SizeGroup(members, np.stack(sources, axis=0), sources))
            continue
        for start, stop in runs:
            first = mats[members[start]]
            b, n = first.shape
            item = first.itemsize
            block = np.lib.stride_tricks.as_strided(
                first, shape=(stop - start, b, n), strides=(first.nbytes, n * item, item),
                writeable=False)
            groups.append(SizeGroup(members[start:stop], block))
    return groups


def _adjacent_runs(arrs: list[np.ndarray]) -> list[tuple[int, int]] | None:
    """Ranges of ``arrs`` that lie back to back in memory; None if that does not pay.

    Only for C-contiguous arrays of one shape and dtype; when most arrays would stand
    alone, one stacked copy is cheaper than many small reductions.
    """
    first = arrs[0]
    if any(a.dtype != first.dtype or not a.flags.c_contiguous for a in arrs):
        return None
    step = first.nbytes
    runs = []
    start = 0
    prev = first.__array_interface__["data"][0]
    for j in range(1, len(arrs)):
        ptr = arrs[j].__array_interface__["data"][0]
        if ptr != prev + step:
            runs.append((start, j))
            start = j
        prev = ptr
    runs.append((start, len(arrs)))
    if len(runs) > 1 and len(runs) * 2 > len(arrs):
        return None
    return runs


def top_singular_value(w: np.ndarray, v: np.ndarray | None, tol: float = 1e-6,
                       max_iterations: int = 200) -> tuple[float, np.ndarray]:
    """Largest singular value of a 2-D ``w`` by power iteration on ``wᵀw``.

    ``v`` is the right singular vector from the previous recorded step (or None):
    weights change little between steps, so a warm start converges in a few
    iterations, instead of the milliseconds a full SVD of a 256x256 matrix costs.
    """
    w = np.asarray(w, np.float32)
    if w.size == 0:  # a zero-size parameter has no singular values
        return float("nan"), np.zeros(w.shape[1], np.float32)
    if v is None or v.shape[0] != w.shape[1]:
        v = np.random.default_rng(0).standard_normal(w.shape[1]).astype(np.float32)
    v = v / max(float(np.linalg.norm(v)), 1e-30)
    sigma = 0.0
    for _ in range(max_iterations):
        u = w @ v
        new_sigma = float(np.linalg.norm(u))
        if new_sigma == 0.0 or math.isnan(new_sigma) or math.isinf(new_sigma):
            return new_sigma, v
        v = w.T @ (u / np.float32(new_sigma))
        v = v / max(float(np.linalg.norm(v)), 1e-30)
        if abs(new_sigma - sigma) <= tol * new_sigma:
            return new_sigma, v
        sigma = new_sigma
    return sigma, v
