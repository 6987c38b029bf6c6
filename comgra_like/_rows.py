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


def _values_column(chunks: list[np.ndarray | None]) -> pa.Array:
    lengths = np.array([0 if c is None else c.size for c in chunks], dtype=np.int64)
    offsets = np.zeros(len(chunks) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    present = [c for c in chunks if c is not None]
    flat = np.concatenate(present).astype(np.float32, copy=False) if present else np.zeros(0, np.float32)
    mask = pa.array([c is None for c in chunks])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat), mask=mask)


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
    stats_rows: list[np.ndarray] = []
    chunks: list[np.ndarray | None] = []
    cols: dict[str, list] = {
        k: []
        for k in (
            "iteration", "node", "role", "tensor_name", "kind", "recording_type",
            "aggregation", "sample_index", "shape", "numel", "svd_top", "update_ratio",
        )
    }

    def add(meta: CaptureMeta, aggregation: str, sample_index: int, stats, values) -> None:
        cols["iteration"].append(meta.iteration)
        cols["node"].append(meta.node)
        cols["role"].append(meta.role)
        cols["tensor_name"].append(meta.tensor_name)
        cols["kind"].append(meta.kind)
        cols["recording_type"].append(meta.recording_type)
        cols["aggregation"].append(aggregation)
        cols["sample_index"].append(sample_index)
        cols["shape"].append(list(meta.value_shape))
        cols["numel"].append(meta.numel)
        cols["svd_top"].append(svd_top.get(meta.param_index) if meta.recording_type == "forward" else None)
        cols["update_ratio"].append(update_ratio.get(meta.param_index) if meta.recording_type == "update" else None)
        stats_rows.append(stats)
        chunks.append(values)

    for meta in batch_meta:
        s = meta.segment
        sl = slice(meta.value_offset, meta.value_offset + meta.numel) if meta.with_values else None
        for a, agg in enumerate(AGG_NAMES):
            add(meta, agg, -1, batch_agg_stats[a, s], batch_agg_values[a, sl] if sl else None)
        if meta.per_sample:
            for j, idx in enumerate(sample_indices):
                add(meta, "sample", idx, batch_sample_stats[j, s], batch_sample_values[j, sl] if sl else None)
    for meta in flat_meta:
        sl = slice(meta.value_offset, meta.value_offset + meta.numel) if meta.with_values else None
        add(meta, "none", -1, flat_stats[meta.segment], flat_values[sl] if sl else None)

    n = len(chunks)
    stats = np.stack(stats_rows).astype(np.float32) if n else np.zeros((0, len(STATISTICS)), np.float32)
    dict_type = pa.dictionary(pa.int32(), pa.string())

    def dict_col(values):
        return pa.array(values, type=pa.string()).dictionary_encode().cast(dict_type)

    arrays = {
        "trial_id": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([trial_id])
        ),
        "training_step": pa.array(np.full(n, training_step, np.int64)),
        "type_of_execution": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([type_of_execution])
        ),
        "iteration": pa.array(cols["iteration"], pa.int32()),
        "node": dict_col(cols["node"]),
        "role": dict_col(cols["role"]),
        "tensor_name": dict_col(cols["tensor_name"]),
        "kind": dict_col(cols["kind"]),
        "recording_type": dict_col(cols["recording_type"]),
        "aggregation": dict_col(cols["aggregation"]),
        "sample_index": pa.array(cols["sample_index"], pa.int32()),
        "shape": pa.array(cols["shape"], pa.list_(pa.int32())),
    }
    for i, name in enumerate(STATISTICS):
        arrays[name] = pa.array(stats[:, i])
    arrays["numel"] = pa.array(cols["numel"], pa.int64())
    arrays["svd_top"] = pa.array(cols["svd_top"], pa.float32())
    arrays["update_ratio"] = pa.array(cols["update_ratio"], pa.float32())
    arrays["values"] = _values_column(chunks)
    return pa.Table.from_arrays([arrays[f.name] for f in TENSORS_SCHEMA], schema=TENSORS_SCHEMA)
