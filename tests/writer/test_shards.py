"""Shards: written atomically, sorted, read back incrementally, the same from both transports."""

import numpy as np
import pytest
import torch

from comgra_like.errors import NotFoundError, StorageError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder
from comgra_like.writer.compaction import compact_trial

from .helpers import new_recorder, record_one_shard_per_step, record_steps, train_step


def test_incremental_refresh_sees_new_shards_and_compaction(tmp_path):
    rec, net = new_recorder(tmp_path)
    rec.writer.flush_seconds = 0.0
    record_steps(rec, net, range(3))
    rec.flush()
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2]
    before = g.read_tensor("t", 1, 0, "out", "out", "forward", "sample", 2).values
    version = g.version
    assert not g.refresh().changed and g.version == version

    record_steps(rec, net, range(3, 6))
    rec.flush()
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
    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(2))
    rec.writer.close()
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


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_failing_disk_is_reported_as_storage_error(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    assert rec.writer.mode == mode
    rec.track_module("net", net)
    (tmp_path / "g/trials/t/tensors").write_text("a file where the writer needs a folder")
    record_steps(rec, net, range(3))
    with pytest.raises(StorageError, match="writing recordings to .* failed: .*tensors"):
        rec.flush(timeout=60)
    with pytest.raises(StorageError):  # every later call says so too, and nothing hangs
        record_steps(rec, net, range(3, 10))


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_steps_sent_before_the_training_process_ends_are_written_without_finalize(tmp_path,
                                                                                 monkeypatch,
                                                                                 mode):
    """The writer writes what it got when its input ends (no finalize, long flush time),
    then marks the trial aborted."""
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import torch
        from comgra_like.objects import DecisionMakerForRecordingsHardcoded
        from comgra_like.recorder import ComgraRecorder
        net = torch.nn.Linear(3, 2)
        rec = ComgraRecorder({str(tmp_path)!r}, "g", "t",
                             DecisionMakerForRecordingsHardcoded(range(100)))
        rec.track_module("net", net)
        rec.writer.flush_seconds = 3600
        for step in range(5):
            x = torch.randn(4, 3)
            rec.start_batch(step, 4)
            rec.start_iteration()
            rec.register_tensor("x", x, is_input=True)
            rec.register_tensor("out", net(x))
            rec.finish_iteration()
            rec.finish_batch()
        # no finalize(): the process just ends
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    import time

    deadline = time.monotonic() + 30
    while True:  # the writer may still be writing after its parent exited
        g = open_group(tmp_path / "g")
        if g.list_trials()[0].status == "aborted" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert g.list_trials()[0].status == "aborted"
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2, 3, 4]
    assert g.read_tensor("t", 4, 0, "out", "out", "forward", "sample", 3).values.shape == (2,)


def test_floats_are_stored_byte_stream_split_in_shards_and_compacted_files(tmp_path):
    """Float columns, the values lists included, are written byte-stream-split (zstd
    compresses that better); strings stay dictionary-encoded. A column path pyarrow does
    not know would be ignored silently, so the files' metadata is checked."""
    import pyarrow.parquet as pq

    trial = record_one_shard_per_step(tmp_path, 2)

    def encodings(folder):
        [f] = list(folder.iterdir())[:1]
        md = pq.ParquetFile(f).metadata.row_group(0)
        return {md.column(i).path_in_schema: md.column(i).encodings
                for i in range(md.num_columns)}

    for stage in ("shard", "compacted"):
        enc = encodings(trial / "tensors")
        for column in ("values.list.element", "mean", "std", "norm", "svd_top"):
            assert "BYTE_STREAM_SPLIT" in enc[column], (stage, column, enc[column])
        assert "RLE_DICTIONARY" in enc["node"], (stage, enc["node"])
        assert "BYTE_STREAM_SPLIT" in encodings(trial / "steps")["wall_time"], stage
        if stage == "shard":
            compact_trial(trial)
            assert len(list((trial / "tensors").iterdir())) == 1


def test_tensor_shards_come_out_in_sort_order_without_sorting(tmp_path):
    """The writer skips sorting tensor shards: rows are built sorted. Check it on a
    recurrent run with several iterations, samples, parameters and two loss groups."""
    import pyarrow.parquet as pq

    from comgra_like.writer.shards import sort_table

    net = torch.nn.Linear(3, 3)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)),
                         max_num_batch_size_to_record=3)
    rec.track_module("net", net)
    rec.writer.flush_seconds = 3600
    for step in range(4):
        rec.start_batch(step, 5)
        h = torch.zeros(5, 3)
        rec.register_tensor("state", h, is_initial_value=True)
        for _ in range(3):
            rec.start_iteration()
            x = torch.randn(5, 3)
            rec.register_tensor("x", x, is_input=True)
            h = torch.tanh(net(x) + h)
            rec.register_tensor("state", h, node_name="cell", role_within_node="h")
            rec.register_tensor("zz_last", h * 2)
            rec.finish_iteration()
        loss = h.pow(2).mean()
        rec.start_iteration()
        rec.register_tensor("loss", loss, is_loss=True)
        loss.backward(retain_graph=True)
        rec.record_current_gradients("a")
        loss.backward(retain_graph=True)  # a second group needs gradients of its own
        rec.record_current_gradients("b")
        rec.finish_iteration()
        rec.finish_batch()
    rec.flush(timeout=60)
    [shard] = (tmp_path / "g/trials/t/tensors").iterdir()
    table = pq.read_table(shard)
    assert table.num_rows > 100 and len(set(table.column("training_step").to_pylist())) == 4
    assert table.equals(sort_table("tensors", table))
    rec.finalize()


def test_thread_and_process_writers_write_the_same_rows(tmp_path, monkeypatch):
    """Both transports run the same worker: same seeds give the same shards' contents."""
    import pyarrow.parquet as pq

    tables = {}
    for mode in ("process", "thread"):
        monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        rec = ComgraRecorder(tmp_path / mode, "g", "t",
                             DecisionMakerForRecordingsHardcoded(range(0, 20, 3)),
                             max_num_batch_size_to_record=2)
        rec.track_module("net", net)
        for step in range(20):
            train_step(rec, net, opt, step, torch.randn(6, 3))
        rec.finalize()
        [f] = (tmp_path / mode / "g/trials/t/tensors").iterdir()
        tables[mode] = pq.read_table(f).drop_columns(["trial_id"])
    assert tables["process"].num_rows > 100
    assert tables["process"].equals(tables["thread"])


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_every_step_of_a_long_recording_has_its_own_numbers(tmp_path, monkeypatch, mode):
    """The writer reuses a step's plan (views of a slot, update buffer) for later steps in
    the same slot: every recorded step must still show its own values, gradients and
    parameter updates, not those of the step the plan was made for."""
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    torch.manual_seed(1)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(30)))
    rec.track_module("net", net)
    expected = {}
    for step in range(30):
        before = net.weight.detach().clone()
        out = train_step(rec, net, opt, step, torch.randn(4, 3))
        expected[step] = (out.detach().mean(0).numpy(), out.grad[2].numpy(),
                          (net.weight.detach() - before).abs().max().item())
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step, (out_mean, out_grad, update_max) in expected.items():
        got = g.read_tensor("t", step, 0, "out", "out", "forward", "batch_mean")
        np.testing.assert_allclose(got.values, out_mean, rtol=1e-5, atol=1e-7, err_msg=step)
        got = g.read_tensor("t", step, 0, "out", "out", "gradient:loss", "sample", 2)
        np.testing.assert_allclose(got.values, out_grad, rtol=1e-5, atol=1e-9, err_msg=step)
        upd = g.read_tensor("t", step, -1, "net.weight", "net.weight", "update", "none")
        assert abs(upd.stats["abs_max"] - update_max) <= 1e-6 * update_max + 1e-9, step


def test_flush_puts_everything_sent_on_disk(tmp_path):
    """ComgraRecorder.flush(): steps, the KPI points the recorder still held back and
    notes are in shards a reader sees, however long the writer would have waited."""
    import os

    rec, net = new_recorder(tmp_path)
    rec.writer.flush_seconds = 3600
    os.kill(rec.writer.pid, 0)  # a real process
    record_steps(rec, net, range(2))
    rec.record_kpi_in_graph("g", "k", 1.5, timepoint=7, record_even_if_recording_is_inactive=True)
    rec.add_note("a note")
    rec.flush(timeout=60)
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 1]
    assert g.read_kpis("t")[["kpi_name", "timepoint", "value"]].values.tolist() == [["k", 7, 1.5]]
    assert [n.text for n in g.read_notes("t")] == ["a note"]
    rec.finalize()
    rec.flush()  # nothing left to do, and no error
    rec.drain()
