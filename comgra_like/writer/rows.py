"""Turns the statistics of a recorded step into an Arrow table (runs in the writer process)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..format.schema import TENSORS_SCHEMA
from ..vocabulary import BATCH_AGGREGATIONS, FORWARD, NO_BATCH, SAMPLE, STATISTICS, UPDATE


@dataclass(frozen=True)
class CaptureMeta:
    """What the rows of one captured tensor need besides the numbers."""

    tensor_name: str
    node: str
    role: str
    kind: str
    iteration: int
    recording_type: str
    value_shape: tuple[int, ...]
    per_sample: bool  # rows per recorded sample
    with_values: bool  # per-neuron values stored
    segment: int  # column of this capture in its statistics matrix
    value_offset: int  # first value column in the values matrix (-1 when none)
    numel: int
    param_index: int = -1  # index into the parameter snapshots (svd, update ratio)

    @property
    def aggregation_free(self) -> bool:
        """A tensor without batch dimension: one row, values from the flat vector."""
        return self.segment_kind == "flat"

    segment_kind: str = "batch"


def _dict_column(per_capture: list[str], capture_of_row: np.ndarray) -> pa.Array:
    """A dictionary column from one string per capture, repeated for that capture's rows."""
    uniques: dict[str, int] = {}
    codes = np.fromiter((uniques.setdefault(v, len(uniques)) for v in per_capture), np.int32,
                        count=len(per_capture))
    return pa.DictionaryArray.from_arrays(pa.array(codes[capture_of_row]),
                                          pa.array(list(uniques), pa.string()))


_CONSTANT_DICTS: dict[tuple[str, int], pa.Array] = {}


def _constant_dict(value: str, n: int) -> pa.Array:
    """``n`` times ``value`` as a dictionary column (Arrow arrays are immutable: the same
    one serves every step with this trial id or type of execution and row count)."""
    column = _CONSTANT_DICTS.get((value, n))
    if column is None:
        if len(_CONSTANT_DICTS) >= 256:
            _CONSTANT_DICTS.clear()
        column = _CONSTANT_DICTS[(value, n)] = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([value]))
    return column


@dataclass(frozen=True)
class _RowLayout:
    """Everything about a batch's rows that does not depend on the numbers.

    Training loops register the same tensors step after step, so this is computed once
    per distinct layout and cached; per step only statistics and values are gathered.
    Rows come out in the shard's sort order (SORT_KEYS, within one step), so a shard of
    steps written in order needs no sorting.
    """

    n: int
    keep: np.ndarray | None  # [S, 3+k] rows kept of the batch statistics block
    flat_segments: np.ndarray
    row_order: np.ndarray  # sorted row -> row of concat(batch stats[keep], flat stats)
    value_gather: np.ndarray  # indices into concat(ravel(agg+sample values), flat values)
    static: dict  # column name -> pa.Array (sorted rows)
    svd_capture: np.ndarray  # per capture: param index whose svd goes there, or -1
    ratio_capture: np.ndarray  # per capture: param index whose update ratio goes there
    capture_of_row: np.ndarray  # per sorted row


def row_layout(batch_meta: tuple[CaptureMeta, ...], flat_meta: tuple[CaptureMeta, ...],
                sample_indices: tuple[int, ...], n_batch_values: int) -> _RowLayout:
    k = len(sample_indices)
    metas = batch_meta + flat_meta
    rows_per = np.array([(3 + (k if m.per_sample else 0)) for m in batch_meta]
                        + [1] * len(flat_meta), dtype=np.int64)
    capture_of_row = np.repeat(np.arange(len(metas)), rows_per)
    n = int(rows_per.sum())
    agg_code, sample_col = [], []
    keep = None
    if batch_meta:
        keep = np.ones((len(batch_meta), 3 + k), dtype=bool)
        for i, m in enumerate(batch_meta):
            if not m.per_sample:
                keep[i, 3:] = False
        agg_code.append(np.broadcast_to(np.array([0, 1, 2] + [3] * k, np.int32), keep.shape)[keep])
        sample_col.append(np.broadcast_to(np.array([-1, -1, -1] + list(sample_indices), np.int32),
                                          keep.shape)[keep])
    if flat_meta:
        agg_code.append(np.full(len(flat_meta), 4, np.int32))
        sample_col.append(np.full(len(flat_meta), -1, np.int32))
    agg = np.concatenate(agg_code) if agg_code else np.zeros(0, np.int32)
    sample = np.concatenate(sample_col) if sample_col else np.zeros(0, np.int32)

    # The value indices of every row, into concat(ravel(agg+sample values), flat values).
    flat_base = (3 + k) * n_batch_values
    row_values: list[np.ndarray | None] = []
    for m, r in zip(metas, rows_per):
        if not m.with_values:
            row_values += [None] * int(r)
        elif m.aggregation_free:
            row_values.append(flat_base + np.arange(m.value_offset, m.value_offset + m.numel))
        else:
            cols = np.arange(m.value_offset, m.value_offset + m.numel)
            # rows of one capture: its kept aggregations and samples, in block row order
            block_rows = [0, 1, 2] + ([3 + j for j in range(k)] if m.per_sample else [])
            row_values += [b * n_batch_values + cols for b in block_rows]

    # codes 0-2: the batch aggregations, 3: a sample, 4: no batch dimension
    agg_names = [*BATCH_AGGREGATIONS, SAMPLE, NO_BATCH]
    order = sorted(range(n), key=lambda r: (
        metas[capture_of_row[r]].iteration, metas[capture_of_row[r]].recording_type,
        metas[capture_of_row[r]].node, metas[capture_of_row[r]].role, agg_names[agg[r]],
        sample[r]))
    row_order = np.array(order, np.int64)
    capture_sorted = capture_of_row[row_order]
    lengths = np.array([0 if row_values[r] is None else len(row_values[r]) for r in order],
                       np.int64)
    valid = np.array([row_values[r] is not None for r in order], dtype=bool)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    gathered = [row_values[r] for r in order if row_values[r] is not None]

    static = {
        "iteration": pa.array(np.array([m.iteration for m in metas], np.int32)[capture_sorted]),
        "node": _dict_column([m.node for m in metas], capture_sorted),
        "role": _dict_column([m.role for m in metas], capture_sorted),
        "tensor_name": _dict_column([m.tensor_name for m in metas], capture_sorted),
        "kind": _dict_column([m.kind for m in metas], capture_sorted),
        "recording_type": _dict_column([m.recording_type for m in metas], capture_sorted),
        "aggregation": pa.DictionaryArray.from_arrays(pa.array(agg[row_order]),
                                                      pa.array(agg_names)),
        "sample_index": pa.array(sample[row_order]),
        "shape": _shape_column(metas, capture_sorted),
        "numel": pa.array(np.array([m.numel for m in metas], np.int64)[capture_sorted]),
        "_offsets": pa.array(offsets),
        "_mask": pa.array(~valid),
    }
    return _RowLayout(
        n=n, keep=keep,
        flat_segments=np.array([m.segment for m in flat_meta], np.int64),
        row_order=row_order,
        value_gather=np.concatenate(gathered) if gathered else np.zeros(0, np.int64),
        static=static,
        svd_capture=np.array([m.param_index if m.recording_type == FORWARD else -1
                              for m in metas], np.int64),
        ratio_capture=np.array([m.param_index if m.recording_type == UPDATE else -1
                                for m in metas], np.int64),
        capture_of_row=capture_sorted,
    )


def _per_row(per_capture_param: np.ndarray, values: dict[int, float],
             capture_of_row: np.ndarray) -> pa.Array:
    """A value per parameter (``values``) on the rows of the captures that show it."""
    n_params = int(per_capture_param.max(initial=-1)) + 1
    by_param = np.full(n_params + 1, np.nan, np.float32)  # the last one: no parameter
    for p, v in values.items():
        if 0 <= p < n_params:
            by_param[p] = v
    rows = by_param[per_capture_param[capture_of_row]]
    return pa.array(rows, mask=np.isnan(rows))


def build_tensor_table(
    *,
    trial_id: str,
    training_step: int,
    type_of_execution: str,
    sample_indices: list[int],
    batch_meta: list[CaptureMeta],
    batch_agg_stats: np.ndarray,  # [3, S, NUM_STATS]
    batch_sample_stats: np.ndarray,  # [k, S, NUM_STATS]
    batch_agg_values: np.ndarray,  # [3, N]
    batch_sample_values: np.ndarray,  # [k, N]
    flat_meta: list[CaptureMeta],
    flat_stats: np.ndarray,  # [S', NUM_STATS]
    flat_values: np.ndarray,  # [N']
    svd_top: dict[int, float],
    update_ratio: dict[int, float],
    layout: _RowLayout | None = None,
) -> pa.Table:
    """One row per capture x aggregation, in the shard's sort order.

    ``layout``: ``row_layout()`` of these metas and samples, when the caller keeps it
    (it depends on neither the statistics nor the values); made here otherwise.
    """
    if layout is None:
        layout = row_layout(tuple(batch_meta), tuple(flat_meta), tuple(sample_indices),
                            batch_agg_values.shape[1])
    n = layout.n
    blocks = []
    sources = []
    if batch_meta:
        both = np.concatenate([batch_agg_stats, batch_sample_stats], axis=0).transpose(1, 0, 2)
        blocks.append(both[layout.keep])
        sources.append(np.concatenate([batch_agg_values, batch_sample_values], axis=0).ravel())
    else:
        sources.append(np.zeros((3 + len(sample_indices)) * batch_agg_values.shape[1], np.float32))
    if flat_meta:
        blocks.append(flat_stats[layout.flat_segments])
        sources.append(flat_values)
    stats = (np.concatenate(blocks).astype(np.float32, copy=False)[layout.row_order] if blocks
             else np.zeros((0, len(STATISTICS)), np.float32))
    source = np.concatenate(sources).astype(np.float32, copy=False)
    static = layout.static
    values = pa.ListArray.from_arrays(static["_offsets"], pa.array(source[layout.value_gather]),
                                      mask=static["_mask"])
    arrays = {
        "trial_id": _constant_dict(trial_id, n),
        "training_step": pa.array(np.full(n, training_step, np.int64)),
        "type_of_execution": _constant_dict(type_of_execution, n),
        "svd_top": _per_row(layout.svd_capture, svd_top, layout.capture_of_row),
        "update_ratio": _per_row(layout.ratio_capture, update_ratio, layout.capture_of_row),
        "values": values,
    }
    for i, name in enumerate(STATISTICS):
        arrays[name] = pa.array(stats[:, i])
    return pa.Table.from_arrays(
        [arrays[f.name] if f.name in arrays else static[f.name] for f in TENSORS_SCHEMA],
        schema=TENSORS_SCHEMA,
    )


def _shape_column(metas, capture_of_row: np.ndarray) -> pa.Array:
    per_capture = pa.array([list(m.value_shape) for m in metas], pa.list_(pa.int32()))
    return per_capture.take(pa.array(capture_of_row))
