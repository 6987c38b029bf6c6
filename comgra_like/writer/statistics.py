"""The statistics of a recorded step: every capture reduced to the rows of the tensors
table (runs in the writer process, no torch).

Captured tensors arrive as flat float32 arrays (views of the shared memory the training
process filled); ``writer/stats.py`` reduces them a block of equally sized tensors at a
time and ``writer/rows.py`` lays the numbers out as rows. What depends only on the
layout of a step (which tensors, where in memory) is planned once and cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..format.layout import TENSORS
from ..protocol import CaptureSpec, Start
from ..vocabulary import FORWARD, STATISTIC_INDEX, UPDATE
from .rows import CaptureMeta, build_tensor_table, row_layout
from .stats import (
    CHUNK_VALUES,
    NUM_STATS,
    batch_aggregates,
    block_statistics,
    group_by_size,
    top_singular_value,
)
from .step_processor import StepInput, StepProcessor

_NORM = STATISTIC_INDEX["norm"]



# (layout key, grouping, samples) -> (batch metas, flat metas, row layout); see below
_LAYOUT_CACHE: dict[tuple, tuple] = {}


def _describe_captures(specs, batch_i, flat_i, batch_groups, flat_groups, value_shapes):
    """The CaptureMeta of every capture, in the order the statistics come out."""
    batch_meta: list[CaptureMeta] = []
    seg, value_offset = 0, 0
    for group in batch_groups:
        g, n = group.block.shape[0], group.block.shape[2]
        for j, m in enumerate(group.members):
            s = specs[batch_i[m]]
            batch_meta.append(CaptureMeta(
                s.tensor_name, s.node, s.role, s.kind, s.iteration, s.recording_type,
                value_shapes[m], s.per_sample, s.with_values, seg, value_offset + j * n, n,
                s.param_index))
            seg += 1
        value_offset += g * n
    flat_meta: list[CaptureMeta] = []
    seg, value_offset = 0, 0
    for group in flat_groups:
        for m in group.members:
            s = specs[flat_i[m]]
            off = -1
            if s.with_values:
                off = value_offset
                value_offset += s.numel
            flat_meta.append(CaptureMeta(
                s.tensor_name, s.node, s.role, s.kind, s.iteration, s.recording_type,
                s.shape, False, s.with_values, seg, off, s.numel, s.param_index, "flat"))
            seg += 1
    return batch_meta, flat_meta


@dataclass
class _StepPlan:
    """How the arrays of a recorded step are reduced: everything but the numbers.

    It holds views of the arrays (the writer's shared memory), so it serves only steps
    whose arrays are the same memory (``arrays_key``); updates go to a buffer of its own.
    """

    forward_param: dict  # parameter index -> (spec, values before the optimizer step)
    updates: list  # (after, before, out) per update capture: out = after - before
    vecs: list  # a [1, n] view per capture without batch dimension
    flat_i: list  # the index in specs of each of those
    batch_groups: list
    flat_groups: list
    batch_meta: list
    flat_meta: list
    rows: object  # the _RowLayout
    owned_bytes: int = 0  # the update buffer and stacked copies it keeps


# (layout key, arrays key, samples) -> _StepPlan; emptied when shared memory changes.
# Plans keep buffers of their own; beyond this many bytes in all, a plan is used for its
# step only (a model that large spends its time in the numbers, not in planning).
_PLAN_CACHE: dict[tuple, _StepPlan] = {}


def clear_plan_cache() -> None:
    """Forget every step plan (their views and buffers): called when a slot's memory
    changes, which makes the plans of its steps stale."""
    _PLAN_CACHE.clear()


PLAN_CACHE_BYTES = 64 * 2**20


def _plan_step(samples, specs, arrays, layout_key) -> _StepPlan:
    """The plan of a step, with the step's updates computed into its buffer."""
    # parameter index -> (spec, values) of the parameter before the optimizer step
    forward_param = {s.param_index: (s, a) for s, a in zip(specs, arrays)
                     if s.recording_type == FORWARD and s.param_index >= 0}
    # The updates (after - before) go into one buffer, back to back, so that those of
    # one size form one block below.
    update_i = [i for i, s in enumerate(specs) if s.recording_type == UPDATE]
    values = list(arrays)
    updates = []
    if update_i:
        buffer = np.empty(sum(specs[i].numel for i in update_i), np.float32)
        pos = 0
        for i in update_i:
            n = specs[i].numel
            before = forward_param[specs[i].param_index][1]
            out = values[i] = np.subtract(arrays[i], before, out=buffer[pos:pos + n])
            updates.append((arrays[i], before, out))
            pos += n
    batch_i = [i for i, s in enumerate(specs) if s.batch_dim is not None]
    flat_i = [i for i, s in enumerate(specs) if s.batch_dim is None]
    mats: list[np.ndarray] = []
    value_shapes = []
    for i in batch_i:
        s = specs[i]
        a = values[i].reshape(s.shape)
        if s.batch_dim:
            a = np.moveaxis(a, s.batch_dim, 0)
        value_shapes.append(a.shape[1:])
        mats.append(a.reshape(a.shape[0], -1))
    vecs = [values[i].reshape(1, -1) for i in flat_i]
    batch_groups = group_by_size(mats) if mats else []
    flat_groups = group_by_size(vecs) if vecs else []
    # The captures' descriptions and the rows' layout depend on the layout, the grouping
    # and the samples only: steps of a training loop repeat them, so they are made once.
    key = None
    if layout_key is not None:
        key = (layout_key, tuple(tuple(g.members) for g in batch_groups),
               tuple(tuple(g.members) for g in flat_groups), tuple(samples))
    cached = _LAYOUT_CACHE.get(key) if key is not None else None
    if cached is None:
        batch_meta, flat_meta = _describe_captures(specs, batch_i, flat_i, batch_groups,
                                                   flat_groups, value_shapes)
        n_batch_values = sum(g.block.shape[0] * g.block.shape[2] for g in batch_groups)
        cached = (batch_meta, flat_meta,
                  row_layout(tuple(batch_meta), tuple(flat_meta), tuple(samples), n_batch_values))
        if key is not None:
            if len(_LAYOUT_CACHE) >= 64:
                _LAYOUT_CACHE.clear()
            _LAYOUT_CACHE[key] = cached
    batch_meta, flat_meta, rows = cached
    owned = sum(out.nbytes for _, _, out in updates) + sum(
        g.block.nbytes for g in batch_groups + flat_groups if g.stacked_from is not None)
    return _StepPlan(forward_param, updates, vecs, flat_i, batch_groups, flat_groups,
                     batch_meta, flat_meta, rows, owned)


def compute_tensor_table(trial_id: str, step: int, toe: str, samples: list[int],
                         specs: list[CaptureSpec], arrays: list[np.ndarray],
                         svd_vectors: dict[int, np.ndarray] | None, release=None,
                         layout_key: object = None, pause=None,
                         arrays_key: object = None) -> pa.Table | None:
    """Statistics, values and rows of one recorded step: :func:`reduce_step`, then
    ``release()`` (the arrays are no longer needed), then :func:`tensor_table`.

    ``arrays[i]`` holds the values of ``specs[i]`` (flat float32; for an ``update``
    capture the parameter *after* the optimizer step, the update is computed here).
    ``svd_vectors`` carries the warm starts of the power iterations from step to step
    (None: no singular values). ``release`` is called once ``arrays`` are no longer needed.
    ``layout_key``: a hashable that stands for ``specs`` (the same object for the same
    specs); with it, what depends only on the layout is computed once and cached.
    ``arrays_key`` (with ``layout_key``): a hashable that stands for the memory of
    ``arrays`` (the same key: the same buffers, with new numbers in them); with it, the
    views, groups and update buffer are made once per layout and memory, not per step.
    ``pause``: called between units of work of ~50-100 us (the writer process gives
    way to training threads there, see ``scheduling.Courtesy``).
    """
    if pause is None:
        pause = _no_pause
    reduced = reduce_step(trial_id, step, toe, samples, specs, arrays, svd_vectors,
                          layout_key, pause, arrays_key)
    if release is not None:
        release()
    return tensor_table(reduced, pause)


@dataclass
class Reduced:
    """A step's numbers, taken out of the shared memory; what :func:`tensor_table` needs."""

    trial_id: str
    step: int
    toe: str
    samples: list[int]
    batch_meta: list
    flat_meta: list
    rows: object  # the row layout
    agg_stats: np.ndarray
    sample_stats: np.ndarray
    agg_vals: np.ndarray
    sample_vals: np.ndarray
    flat_stats: np.ndarray
    flat_vals: np.ndarray
    svd: dict


def reduce_step(trial_id: str, step: int, toe: str, samples: list[int],
                specs: list[CaptureSpec], arrays: list[np.ndarray],
                svd_vectors: dict[int, np.ndarray] | None, layout_key: object,
                pause, arrays_key: object) -> Reduced | None:
    """Every statistic of a step (the part that reads ``arrays``); None without captures.
    The arguments are those of :func:`compute_tensor_table`."""
    if not specs:
        return None
    plan = None
    plan_key = None
    if layout_key is not None and arrays_key is not None:
        plan_key = (layout_key, arrays_key, tuple(samples))
        plan = _PLAN_CACHE.get(plan_key)
    if plan is None:
        plan = _plan_step(samples, specs, arrays, layout_key)
        if plan_key is not None:
            held = sum(p.owned_bytes for p in _PLAN_CACHE.values())
            if len(_PLAN_CACHE) >= 64 or held + plan.owned_bytes > PLAN_CACHE_BYTES:
                _PLAN_CACHE.clear()
            if plan.owned_bytes <= PLAN_CACHE_BYTES:
                _PLAN_CACHE[plan_key] = plan
    else:  # the same memory with new numbers in it
        for after, before, out in plan.updates:
            np.subtract(after, before, out=out)
        for group in plan.batch_groups:
            group.restack()
        for group in plan.flat_groups:
            group.restack()
    k = len(samples)
    forward_param, vecs, flat_i = plan.forward_param, plan.vecs, plan.flat_i
    batch_groups, flat_groups = plan.batch_groups, plan.flat_groups
    batch_meta, flat_meta, rows = plan.batch_meta, plan.flat_meta, plan.rows
    agg_stats = np.zeros((3, 0, NUM_STATS), np.float32)
    sample_stats = np.zeros((k, 0, NUM_STATS), np.float32)
    agg_vals, sample_vals = np.zeros((3, 0), np.float32), np.zeros((k, 0), np.float32)
    if batch_groups:
        idx = np.asarray(samples, np.int64)
        parts_ps, parts_av, parts_sv = [], [], []
        for group in batch_groups:
            block = group.block  # [g, B, n]
            g, b, n = block.shape
            # Both reductions of a few tensors at a time, while they are in cache.
            per = max(1, CHUNK_VALUES // max(1, b * n))
            for a in range(0, g, per):
                pause()
                sub = block[a:a + per]
                parts_ps.append(block_statistics(sub).transpose(1, 0, 2))  # [B, g', STATS]
                parts_av.append(batch_aggregates(sub, axis=1).reshape(3, -1))
            parts_sv.append(block[:, idx].transpose(1, 0, 2).reshape(k, g * n))
        per_sample = np.concatenate(parts_ps, axis=1)  # [B, S, NUM_STATS]
        agg_stats = batch_aggregates(per_sample)
        sample_stats = per_sample[idx]
        agg_vals = np.concatenate(parts_av, axis=1)
        sample_vals = np.concatenate(parts_sv, axis=1)
    flat_stats = np.zeros((0, NUM_STATS), np.float32)
    flat_vals = np.zeros(0, np.float32)
    if flat_groups:
        stats, value_vecs = [], []
        for group in flat_groups:
            block = group.block  # [g, 1, n]
            # One call per group (it reduces a chunk at a time and pauses in between):
            # a call per chunk cost ~15 us more each, to finish the statistics of one row.
            pause()
            stats.append(block_statistics(block, pause)[:, 0])  # [g, NUM_STATS]
            for m in group.members:
                if specs[flat_i[m]].with_values:
                    value_vecs.append(vecs[m][0].copy())
        flat_stats = np.concatenate(stats, axis=0)
        if value_vecs:
            flat_vals = np.concatenate(value_vecs)
    svd = {}
    if svd_vectors is not None:
        for p, (spec, w) in forward_param.items():
            if len(spec.shape) == 2:
                pause()
                svd[p], svd_vectors[p] = top_singular_value(w.reshape(spec.shape),
                                                            svd_vectors.get(p))
    return Reduced(trial_id, step, toe, samples, batch_meta, flat_meta, rows, agg_stats,
                   sample_stats, agg_vals, sample_vals, flat_stats, flat_vals, svd)


def tensor_table(r: Reduced | None, pause) -> pa.Table | None:
    """The rows of the tensors table of a reduced step (None: a step without captures)."""
    if r is None:
        return None
    flat_meta, flat_stats = r.flat_meta, r.flat_stats
    # Update ratio: norm of the update over the norm of the weight before it.
    forward_norm = {m.param_index: flat_stats[m.segment, _NORM] for m in flat_meta
                    if m.recording_type == FORWARD and m.param_index >= 0}
    ratio = {}
    for m in flat_meta:
        if m.recording_type == UPDATE:
            w = forward_norm.get(m.param_index)
            u = flat_stats[m.segment, _NORM]
            ratio[m.param_index] = float(u / w) if w else float("nan")
    pause()
    return build_tensor_table(
        trial_id=r.trial_id, training_step=r.step, type_of_execution=r.toe,
        sample_indices=r.samples, batch_meta=r.batch_meta, batch_agg_stats=r.agg_stats,
        batch_sample_stats=r.sample_stats, batch_agg_values=r.agg_vals,
        batch_sample_values=r.sample_vals, flat_meta=flat_meta, flat_stats=flat_stats,
        flat_values=r.flat_vals, svd_top=r.svd, update_ratio=ratio, layout=r.rows,
    )


class TensorStatistics(StepProcessor):
    """The step processor of the tensors table: statistics and values of every capture
    (the first of ``processors.PROCESSORS``). It keeps the warm starts of the singular
    value iterations from step to step."""

    presorted = (TENSORS,)  # a step's rows come sorted, after the steps before it

    def __init__(self, start: Start):
        self.svd_vectors: dict[int, np.ndarray] | None = {} if start.calculate_svd else None

    def reduce(self, step: StepInput, pause) -> Reduced | None:
        m = step.message
        return reduce_step(step.trial_id, m.step, m.toe, m.samples, step.specs, step.arrays,
                           self.svd_vectors, step.layout_key, pause, step.arrays_key)

    def tables(self, reduced: Reduced | None, pause) -> dict[str, pa.Table | None]:
        return {TENSORS: tensor_table(reduced, pause)}


def _no_pause() -> None:
    pass
