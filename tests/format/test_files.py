"""The local filesystem seam's streamed parquet write (compaction's merged files)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq

from comgra_like.format.files import LOCAL
from comgra_like.format.schema import STEPS_SCHEMA


def _shard(first_step: int, rows: int) -> pa.Table:
    steps = list(range(first_step, first_step + rows))
    return pa.table({
        "trial_id": pa.array(["t"] * rows).dictionary_encode(),
        "training_step": pa.array(steps, pa.int64()),
        "type_of_execution": pa.array([f"type_{s % 3}" for s in steps]).dictionary_encode(),
        "iteration": pa.array([0] * rows, pa.int32()),
        "graph_hash": pa.array([f"g{first_step}"] * rows).dictionary_encode(),
        "batch_size": pa.array([8] * rows, pa.int32()),
        "sample_indices": pa.array([[0, 1]] * rows, pa.list_(pa.int32())),
        "sample_categories": pa.array([["a", ""]] * rows, pa.list_(pa.string())),
        "wall_time": pa.array([float(s) for s in steps]),
    }).cast(STEPS_SCHEMA)


def test_small_shards_are_gathered_into_full_row_groups(tmp_path):
    # 300 shards of 1-9 rows, as a recorder flushing every second leaves them
    shards, first = [], 0
    for i in range(300):
        shards.append(_shard(first, 1 + i % 9))
        first += 1 + i % 9
    path = tmp_path / "compact.parquet"
    rows = LOCAL.write_parquet_stream(path, STEPS_SCHEMA, iter(shards), row_group_size=256)
    assert rows == first
    meta = pq.read_metadata(path)
    # one row group per shard was 300 row groups
    assert meta.num_row_groups == math.ceil(first / 256)
    assert all(meta.row_group(i).num_rows == 256 for i in range(meta.num_row_groups - 1))
    assert pq.read_table(path, schema=STEPS_SCHEMA).to_pylist() == pa.concat_tables(shards).to_pylist()
