"""Compaction: merged sorted, idempotent, safe against a crash and a damaged shard."""

import pyarrow as pa

from comgra_like.query import open_group
from comgra_like.writer.compaction import compact_trial

from .helpers import new_recorder, record_one_shard_per_step, record_steps


def test_compaction_merges_sorted_and_is_idempotent(tmp_path):
    trial = record_one_shard_per_step(tmp_path, 4)
    assert len(list((trial / "tensors").iterdir())) == 4
    assert compact_trial(trial)["tensors"] == 4
    assert compact_trial(trial)["tensors"] == 0
    import pyarrow.parquet as pq

    [f] = (trial / "tensors").iterdir()
    steps = pq.read_table(f, columns=["training_step"]).column(0).to_pylist()
    assert steps == sorted(steps)
    assert isinstance(pq.read_table(f).column("node").type, pa.DictionaryType)


def test_crash_between_compaction_write_and_delete_reads_the_same(tmp_path):
    """A compact file next to the sources it merged (killed before deleting them)."""
    import shutil

    rec, net = new_recorder(tmp_path)
    rec.writer.flush_seconds = 0.0
    for s in range(3):
        record_steps(rec, net, [s])
        rec.flush()
    rec.writer.close()
    trial = tmp_path / "g/trials/t"
    backup = tmp_path / "backup"
    shutil.copytree(trial, backup)
    compact_trial(trial)
    for kind in ("steps", "tensors"):
        for f in (backup / kind).iterdir():
            shutil.copy(f, trial / kind / f.name)  # the sources are back, as after a crash
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2]
    assert len(g.read_series("t", "out", "out", "forward", "batch_mean", "mean")) == 3


def test_compaction_skips_a_damaged_shard_without_hiding_it(tmp_path):
    rec, net = new_recorder(tmp_path)
    rec.writer.flush_seconds = 0.0
    for s in range(5):
        record_steps(rec, net, [s])
        rec.flush()
    rec.writer.close()
    steps_dir = tmp_path / "g/trials/t/steps"
    (steps_dir / "part-00000001.parquet").write_bytes(b"garbage")
    compact_trial(tmp_path / "g/trials/t")
    names = sorted(p.name for p in steps_dir.iterdir())
    assert names == ["compact-00000002-00000004.parquet", "part-00000000.parquet",
                     "part-00000001.parquet"]
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 2, 3, 4]
    assert len(g.skipped) == 1
