"""Turns the statistics computed on the device into Arrow tables (runs on the writer thread)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .store.schema import STATISTICS, TENSORS_SCHEMA

AGG_NAMES = ("batch_mean", "batch_abs_max", "batch_std")


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


_DICT = pa.dictionary(pa.int32(), pa.string())


def _dict_column(per_capture: list[str], capture_of_row: np.ndarray) -> pa.Array:
    """A dictionary column from one string per capture, repeated for that capture's rows."""
    uniques: dict[str, int] = {}
    codes = np.fromiter((uniques.setdefault(v, len(uniques)) for v in per_capture), np.int32,
                        count=len(per_capture))
    return pa.DictionaryArray.from_arrays(pa.array(codes[capture_of_row]),
                                          pa.array(list(uniques), pa.string()))


def _constant_dict(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


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
) -> pa.Table:
    """One row per capture x aggregation, built with per-capture (not per-row) Python work.

    This runs on the writer thread while training continues, so it must hold the GIL
    as briefly as possible.
    """
    k = len(sample_indices)
    metas = batch_meta + flat_meta
    rows_per = np.array([(3 + (k if m.per_sample else 0)) for m in batch_meta]
                        + [1] * len(flat_meta), dtype=np.int64)
    capture_of_row = np.repeat(np.arange(len(metas)), rows_per)
    n = int(rows_per.sum())

    # Statistics: [S, 3+k, NUM_STATS] for batch captures, dropping sample rows where unwanted.
    stat_blocks = []
    agg_code = []
    sample_col = []
    if batch_meta:
        both = np.concatenate([batch_agg_stats, batch_sample_stats], axis=0).transpose(1, 0, 2)
        keep = np.ones((len(batch_meta), 3 + k), dtype=bool)
        for i, m in enumerate(batch_meta):
            if not m.per_sample:
                keep[i, 3:] = False
        stat_blocks.append(both[keep])
        codes = np.broadcast_to(np.array([0, 1, 2] + [3] * k, np.int32), keep.shape)[keep]
        samples = np.broadcast_to(np.array([-1, -1, -1] + list(sample_indices), np.int32),
                                  keep.shape)[keep]
        agg_code.append(codes)
        sample_col.append(samples)
    if flat_meta:
        stat_blocks.append(flat_stats[[m.segment for m in flat_meta]])
        agg_code.append(np.full(len(flat_meta), 4, np.int32))
        sample_col.append(np.full(len(flat_meta), -1, np.int32))
    stats = (np.concatenate(stat_blocks).astype(np.float32, copy=False) if stat_blocks
             else np.zeros((0, len(STATISTICS)), np.float32))

    # Values: a list column; captures without values give null rows.
    pieces: list[np.ndarray] = []
    lengths = np.zeros(n, np.int64)
    valid = np.zeros(n, dtype=bool)
    row = 0
    if batch_meta:
        all_vals = np.concatenate([batch_agg_values, batch_sample_values], axis=0)
    for m, r in zip(metas, rows_per):
        if m.with_values:
            if m.aggregation_free:
                pieces.append(flat_values[m.value_offset:m.value_offset + m.numel])
            else:
                block = all_vals[: r, m.value_offset:m.value_offset + m.numel]
                pieces.append(block.reshape(-1))
            lengths[row:row + r] = m.numel
            valid[row:row + r] = True
        row += r
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = (np.concatenate(pieces).astype(np.float32, copy=False) if pieces
            else np.zeros(0, np.float32))
    values = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), mask=pa.array(~valid))

    svd = np.array([svd_top.get(m.param_index, np.nan) if m.recording_type == "forward"
                    and m.param_index in svd_top else np.nan for m in metas], np.float32)
    ratio = np.array([update_ratio.get(m.param_index, np.nan) if m.recording_type == "update"
                      else np.nan for m in metas], np.float32)
    svd_rows, ratio_rows = svd[capture_of_row], ratio[capture_of_row]

    arrays = {
        "trial_id": _constant_dict(trial_id, n),
        "training_step": pa.array(np.full(n, training_step, np.int64)),
        "type_of_execution": _constant_dict(type_of_execution, n),
        "iteration": pa.array(np.array([m.iteration for m in metas], np.int32)[capture_of_row]),
        "node": _dict_column([m.node for m in metas], capture_of_row),
        "role": _dict_column([m.role for m in metas], capture_of_row),
        "tensor_name": _dict_column([m.tensor_name for m in metas], capture_of_row),
        "kind": _dict_column([m.kind for m in metas], capture_of_row),
        "recording_type": _dict_column([m.recording_type for m in metas], capture_of_row),
        "aggregation": pa.DictionaryArray.from_arrays(
            pa.array(np.concatenate(agg_code) if agg_code else np.zeros(0, np.int32)),
            pa.array(list(AGG_NAMES) + ["sample", "none"])),
        "sample_index": pa.array(np.concatenate(sample_col) if sample_col
                                 else np.zeros(0, np.int32)),
        "shape": _shape_column(metas, capture_of_row),
        "numel": pa.array(np.array([m.numel for m in metas], np.int64)[capture_of_row]),
        "svd_top": pa.array(svd_rows, mask=np.isnan(svd_rows)),
        "update_ratio": pa.array(ratio_rows, mask=np.isnan(ratio_rows)),
        "values": values,
    }
    for i, name in enumerate(STATISTICS):
        arrays[name] = pa.array(stats[:, i])
    return pa.Table.from_arrays([arrays[f.name] for f in TENSORS_SCHEMA], schema=TENSORS_SCHEMA)


def _shape_column(metas: list[CaptureMeta], capture_of_row: np.ndarray) -> pa.Array:
    dims = [np.asarray(m.value_shape, np.int32) for m in metas]
    per_capture = pa.array([d.tolist() for d in dims], pa.list_(pa.int32()))
    return per_capture.take(pa.array(capture_of_row))
