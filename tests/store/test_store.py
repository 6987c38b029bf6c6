"""The storage contract: atomic shards, compaction, incremental refresh, damaged files."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from comgra_like.errors import NotFoundError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder
from comgra_like.store.compaction import compact_trial
from comgra_like.store.files import live_shards
from comgra_like.store.writer import ShardWriter


def test_live_shards_skip_what_a_compaction_covers():
    names = ["part-00000000.parquet", "part-00000001.parquet", "compact-00000000-00000001.parquet",
             "part-00000002.parquet", "notes.txt"]
    assert live_shards(names) == ["compact-00000000-00000001.parquet", "part-00000002.parquet"]
    assert live_shards(["compact-00000000-00000001.parquet",
                        "compact-00000000-00000003.parquet"]) == ["compact-00000000-00000003.parquet"]


def record_steps(recorder, net, steps):
    for step in steps:
        x = torch.randn(4, 3)
        recorder.start_batch(step, 4)
        recorder.start_iteration()
        recorder.register_tensor("x", x, is_input=True)
        out = net(x)
        recorder.register_tensor("out", out)
        recorder.finish_iteration()
        recorder.finish_batch()


def test_incremental_refresh_sees_new_shards_and_compaction(tmp_path):
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    rec._writer.flush_seconds = 0.0
    record_steps(rec, net, range(3))
    rec._writer.flush()
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2]
    before = g.read_tensor("t", 1, 0, "out", "out", "forward", "sample", 2).values
    version = g.version
    assert not g.refresh().changed and g.version == version

    record_steps(rec, net, range(3, 6))
    rec._writer.flush()
    report = g.refresh()
    assert report.changed_trials["t"].new_steps == [3, 4, 5]
    assert g.version == version + 1

    rec.finalize()  # compacts: the part files disappear
    report = g.refresh()
    assert report.changed_trials["t"].status_changed
    files = sorted(p.name for p in (tmp_path / "g/trials/t/tensors").iterdir())
    assert files == ["compact-00000000-00000005.parquet"]
    after = g.read_tensor("t", 1, 0, "out", "out", "forward", "sample", 2).values
    np.testing.assert_array_equal(before, after)
    assert g.list_steps("t")["training_step"].tolist() == list(range(6))
    assert len(g.read_series("t", "out", "out", "forward", "batch_mean", "mean")) == 6


def test_damaged_shard_is_reported_and_skipped(tmp_path):
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    record_steps(rec, net, range(2))
    rec._writer.close()
    steps_dir = tmp_path / "g/trials/t/steps"
    (steps_dir / "part-00000099.parquet").write_bytes(b"PAR1 truncated")
    g = open_group(tmp_path / "g")
    assert [s.path.endswith("part-00000099.parquet") for s in g.skipped] == [True]
    assert "unreadable" in g.skipped[0].reason
    assert g.list_steps("t")["training_step"].tolist() == [0, 1]
    assert not g.refresh().skipped  # reported once


def test_unknown_schema_version_and_empty_group(tmp_path):
    (tmp_path / "g" / "trials" / "future").mkdir(parents=True)
    (tmp_path / "g" / "trials" / "future" / "trial.json").write_text('{"schema_version": 999}')
    g = open_group(tmp_path / "g")
    assert g.list_trials() == []
    assert "upgrade comgra_like" in g.skipped[0].reason
    with pytest.raises(NotFoundError, match="does not exist"):
        open_group(tmp_path / "missing")
    with pytest.raises(NotFoundError, match="no trial"):
        g.list_steps("nope")


def test_writer_is_bounded_and_reports_failures(tmp_path):
    (tmp_path / "trial").mkdir()
    w = ShardWriter(tmp_path / "trial", max_queued_jobs=2)

    def bad_job():
        raise OSError("disk full")

    w.submit(bad_job)
    with pytest.raises(Exception, match="disk full"):
        w.flush(timeout=10)


def test_compaction_merges_sorted_and_is_idempotent(tmp_path):
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    rec._writer.flush_seconds = 0.0
    for s in range(4):
        record_steps(rec, net, [s])
        rec._writer.flush()
    rec._writer.close()
    trial = tmp_path / "g/trials/t"
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

    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    rec._writer.flush_seconds = 0.0
    for s in range(3):
        record_steps(rec, net, [s])
        rec._writer.flush()
    rec._writer.close()
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
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    rec._writer.flush_seconds = 0.0
    for s in range(5):
        record_steps(rec, net, [s])
        rec._writer.flush()
    rec._writer.close()
    steps_dir = tmp_path / "g/trials/t/steps"
    (steps_dir / "part-00000001.parquet").write_bytes(b"garbage")
    compact_trial(tmp_path / "g/trials/t")
    names = sorted(p.name for p in steps_dir.iterdir())
    assert names == ["compact-00000002-00000004.parquet", "part-00000000.parquet",
                     "part-00000001.parquet"]
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 2, 3, 4]
    assert len(g.skipped) == 1
