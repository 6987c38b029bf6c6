"""Shard names per rank: what each rank writes, what a reader reads, compaction per rank."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from comgra_like.errors import ConfigurationError
from comgra_like.format.layout import (
    SEQ_SPAN,
    compact_name,
    live_shards,
    lock_name,
    part_name,
    shard_rank,
    shard_seqs,
)
from comgra_like.format.schema import KPIS_SCHEMA


def test_rank_0_keeps_the_names_of_a_single_process_recording():
    assert part_name(3) == part_name(3, 0) == "part-00000003.parquet"
    assert part_name(3, 12) == "part-r0012-00000003.parquet"
    assert compact_name(0, 9, 1001) == "compact-r1001-00000000-00000009.parquet"
    assert shard_seqs("part-r0012-00000003.parquet") == (12, 3, 3)
    assert shard_seqs("compact-00000002-00000005.parquet") == (0, 2, 5)
    assert shard_rank("part-00000001.parquet") == 0 and shard_rank("notes.jsonl") is None
    assert lock_name("t") == ".t.lock" and lock_name("t", 3) == ".t.lock.r0003"
    with pytest.raises(ConfigurationError, match="rank -1"):
        part_name(0, -1)


def test_a_rank_s_compacted_file_hides_only_that_rank_s_parts():
    names = [part_name(s, r) for r in (0, 1, 2) for s in range(4)]
    names += [compact_name(0, 3, 1), compact_name(0, 1, 2)]
    live = live_shards(names)
    assert live == [*(part_name(s, 0) for s in range(4)), compact_name(0, 3, 1),
                    compact_name(0, 1, 2), part_name(2, 2), part_name(3, 2)]
    # a compact inside a larger one of the same rank is hidden, another rank's is not
    assert live_shards([compact_name(0, 3, 1), compact_name(1, 2, 1), compact_name(1, 2, 0)]) \
        == [compact_name(1, 2, 0), compact_name(0, 3, 1)]
    assert SEQ_SPAN > 10**8 - 1  # 8-digit sequence numbers never reach the next rank


def test_shards_of_two_ranks_in_one_folder_compact_per_rank(tmp_path):
    from comgra_like.writer.compaction import compact_trial
    from comgra_like.writer.shards import ShardBuffer

    trial = tmp_path / "t"
    trial.mkdir()
    (trial / "trial.json").write_text("{}")
    buffers = {rank: ShardBuffer(trial, rank=rank) for rank in (0, 1)}
    for i in range(3):
        for rank, buffer in buffers.items():
            table = pa.table({"trial_id": ["t"], "kpi_group": ["g"], "kpi_name": ["k"],
                              "type_of_execution": ["x"], "timepoint": [i],
                              "value": [float(10 * rank + i)], "wall_time": [0.0]})
            buffer.add({"kpis": table.cast(KPIS_SCHEMA)})
            buffer.write()
    folder = trial / "kpis"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [part_name(s, r) for r in (0, 1) for s in range(3)])
    # a rank's writer compacts its own shards while the other rank may still write
    assert compact_trial(trial, ranks=[1]) == {"kpis": 3}
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [part_name(s, 0) for s in range(3)] + [compact_name(0, 2, 1)])
    merged = pq.read_table(folder / compact_name(0, 2, 1))
    assert merged.column("rank").to_pylist() == [1, 1, 1]
    assert merged.column("value").to_pylist() == [10.0, 11.0, 12.0]
    # a new writer of rank 1 numbers on after its own names, not after rank 0's
    assert ShardBuffer(trial, rank=1)._next_seq["kpis"] == 3
    assert compact_trial(trial) == {"kpis": 3}
    assert sorted(p.name for p in folder.iterdir()) == [compact_name(0, 2),
                                                        compact_name(0, 2, 1)]
