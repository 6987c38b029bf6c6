"""The storage contract: atomic shards, compaction, incremental refresh, damaged files."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from comgra_like.errors import NotFoundError, StorageError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder
from comgra_like.store.compaction import compact_trial
from comgra_like.store.files import live_shards


def test_live_shards_skip_what_a_compaction_covers():
    names = ["part-00000000.parquet", "part-00000001.parquet", "compact-00000000-00000001.parquet",
             "part-00000002.parquet", "notes.txt"]
    assert live_shards(names) == ["compact-00000000-00000001.parquet", "part-00000002.parquet"]
    assert live_shards(["compact-00000000-00000001.parquet",
                        "compact-00000000-00000003.parquet"]) == ["compact-00000000-00000003.parquet"]


def new_recorder(root, steps=range(100)):
    """A recorder of ``steps`` tracking a Linear(3, 2), which it returns too."""
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsHardcoded(steps))
    rec.track_module("net", net)
    return rec, net


def record_steps(recorder, net, steps, batch=4, width=3):
    """Steps of ``batch`` random inputs through ``net``; returns the inputs by step."""
    inputs = {}
    for step in steps:
        x = inputs[step] = torch.randn(batch, width)
        recorder.start_batch(step, batch)
        recorder.start_iteration()
        recorder.register_tensor("x", x, is_input=True)
        out = net(x)
        recorder.register_tensor("out", out)
        recorder.finish_iteration()
        recorder.finish_batch()
    return inputs


def test_incremental_refresh_sees_new_shards_and_compaction(tmp_path):
    rec, net = new_recorder(tmp_path)
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
    rec, net = new_recorder(tmp_path)
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


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_failing_disk_is_reported_as_storage_error(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    assert rec._writer.mode == mode
    rec.track_module("net", net)
    (tmp_path / "g/trials/t/tensors").write_text("a file where the writer needs a folder")
    record_steps(rec, net, range(3))
    with pytest.raises(StorageError, match="writing recordings to .* failed: .*tensors"):
        rec._writer.flush(timeout=60)
    with pytest.raises(StorageError):  # every later call says so too, and nothing hangs
        record_steps(rec, net, range(3, 10))


def test_a_killed_writer_process_is_reported_not_waited_for(tmp_path):
    import os

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(2))
    rec._writer._proc.kill()
    rec._writer._proc.wait()
    with pytest.raises(StorageError, match=r"writer process \(pid \d+\) was killed by SIGKILL"):
        record_steps(rec, net, range(2, 10))
        rec._writer.flush(timeout=60)
    mine = rec._writer._segment_prefix
    assert not [n for n in os.listdir(rec._writer._shm_dir) if n.startswith(mine)]
    [trial] = open_group(tmp_path / "g").list_trials()
    assert trial.status == "aborted"


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
        rec._writer.flush_seconds = 3600
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


def test_shared_memory_is_not_left_behind(tmp_path):
    import os

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(4))
    rec._writer.flush(timeout=60)
    mine = rec._writer._segment_prefix
    assert rec._writer._slots[0].segments  # shared memory was used
    # The writer unlinks each segment as soon as it has mapped it.
    assert not [n for n in os.listdir(rec._writer._shm_dir) if n.startswith(mine)]
    # A segment created but never announced (the training process killed in between):
    # the writer process removes it when it exits.
    orphan = os.path.join(rec._writer._shm_dir, mine + "999")
    open(orphan, "wb").close()
    rec.finalize()
    assert not [n for n in os.listdir(rec._writer._shm_dir) if n.startswith(mine)]


def train_step(rec, net, opt, step, x):
    """One recorded SGD step on the loss mean(net(x)^2), gradients recorded; returns
    the output (its .grad retained)."""
    rec.start_batch(step, x.shape[0])
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    out = net(x)
    rec.register_tensor("out", out)
    loss = out.pow(2).mean()
    rec.register_tensor("loss", loss, is_loss=True)
    opt.zero_grad()
    loss.backward()
    opt.step()
    rec.record_current_gradients("loss")
    rec.finish_iteration()
    rec.finish_batch()
    return out


def record_one_shard_per_step(root, steps):
    """A trial with one shard per recorded step (flushed after each), writer closed."""
    rec, net = new_recorder(root)
    rec._writer.flush_seconds = 0.0
    for s in range(steps):
        record_steps(rec, net, [s])
        rec._writer.flush()
    rec._writer.close()
    return root / "g/trials/t"


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


def test_crash_between_compaction_write_and_delete_reads_the_same(tmp_path):
    """A compact file next to the sources it merged (killed before deleting them)."""
    import shutil

    rec, net = new_recorder(tmp_path)
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
    rec, net = new_recorder(tmp_path)
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


def test_tensor_shards_come_out_in_sort_order_without_sorting(tmp_path):
    """The writer skips sorting tensor shards: rows are built sorted. Check it on a
    recurrent run with several iterations, samples, parameters and two loss groups."""
    import pyarrow.parquet as pq

    from comgra_like.store.writer import sort_table

    net = torch.nn.Linear(3, 3)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)),
                         max_num_batch_size_to_record=3)
    rec.track_module("net", net)
    rec._writer.flush_seconds = 3600
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
    rec._writer.flush(timeout=60)
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


def test_without_a_usable_interpreter_the_writer_runs_in_a_thread(tmp_path, monkeypatch):
    import sys

    monkeypatch.delenv("COMGRA_LIKE_WRITER", raising=False)
    monkeypatch.setattr(sys, "executable", "")
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    assert rec._writer.mode == "thread"
    rec.track_module("net", net)
    record_steps(rec, net, range(3))
    rec.finalize()
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("budget_slots", [None, 3])
def test_a_stalled_writer_gets_more_slots_then_makes_training_wait(tmp_path, budget_slots,
                                                                    caplog):
    """Back-pressure: while the writer is stopped, recorded steps take new slots up to the
    cap (8, or fewer when a memory budget says so), then the next one waits, and the user
    is told once; once the writer runs again every step arrives."""
    import os
    import signal
    import threading
    import time

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, [0])
    rec._writer.flush(timeout=60)
    writer = rec._writer
    expected = writer._max_slots
    if budget_slots is not None:
        writer._slot_budget = budget_slots * 4 * max(slot.needed for slot in writer._slots)
        expected = budget_slots
    os.kill(writer._proc.pid, signal.SIGSTOP)
    try:
        done = []
        t = threading.Thread(target=lambda: (record_steps(rec, net, range(1, 13)),
                                             done.append(True)))
        t.start()
        time.sleep(2.0)
        assert not done and t.is_alive()  # waiting for a slot
        assert len(writer._slots) == expected
    finally:
        os.kill(writer._proc.pid, signal.SIGCONT)
    t.join(timeout=60)
    assert done
    waits = [r for r in caplog.records if "training waits for the writer" in r.getMessage()]
    assert len(waits) == 1 and "record less often" in waits[0].getMessage()
    rec.finalize()
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == list(range(13))


def test_drain_waits_until_the_writer_has_taken_in_every_step(tmp_path):
    """drain() (the benchmark waits with it when every step records) returns only once
    the writer has read every step sent, and then every slot is free again."""
    import os
    import signal
    import threading
    import time

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, [0])
    writer = rec._writer
    os.kill(writer._proc.pid, signal.SIGSTOP)
    try:
        record_steps(rec, net, [1, 2])
        done = []
        t = threading.Thread(target=lambda: (writer.drain(), done.append(True)))
        t.start()
        time.sleep(1.0)
        assert not done  # the stopped writer holds the slots of steps 1 and 2
    finally:
        os.kill(writer._proc.pid, signal.SIGCONT)
    t.join(timeout=60)
    assert done
    assert len(writer._free) == len(writer._slots)
    rec.finalize()
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == [0, 1, 2]


def test_a_step_with_thousands_of_tensors(tmp_path):
    """One message per step larger than a pipe's buffer, thousands of captures per slot."""
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(10)),
                         max_num_batch_size_to_record=1)
    rec.track_module("net", net)
    n = 1500
    for step in range(3):
        rec.start_batch(step, 2)
        rec.start_iteration()
        x = torch.randn(2, 3)
        rec.register_tensor("x", x, is_input=True)
        for i in range(n):
            rec.register_tensor(f"t{i:04d}", x * (i + 1))
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    table = g.list_tensors("t", 2)
    assert set(table.query("recording_type == 'forward' and kind == 'calculated'")["node"]) == {
        f"t{i:04d}" for i in range(n)}
    r = g.read_tensor("t", 2, 0, "t1499", "t1499", "forward", "sample", 0)
    x0 = g.read_tensor("t", 2, 0, "x", "x", "forward", "sample", 0).values
    np.testing.assert_allclose(r.values, x0 * 1500, rtol=1e-6)


def test_layouts_that_change_every_step_stay_bounded_and_correct(tmp_path):
    """Each batch size is a new capture layout: past 256 the ids are reused, each time
    together with its layout, and every step still reads back its own values."""
    rec, net = new_recorder(tmp_path, range(300))
    rec._writer.flush_seconds = 3600
    inputs = {}
    for step in range(300):
        inputs |= record_steps(rec, net, [step], batch=1 + step % 299)
    assert len(rec._writer._layout_ids) <= 256
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step in (0, 255, 256, 257, 298, 299):
        got = g.read_tensor("t", step, 0, "x", "x", "forward", "batch_mean").values
        np.testing.assert_allclose(got, inputs[step].detach().mean(0).numpy(), rtol=1e-5, atol=1e-6)


def test_cached_parameter_registrations_follow_a_parameter_whose_shape_changes(tmp_path):
    """The parameters' registrations are built once and reused; a parameter whose data is
    replaced by one of another shape is recorded with its new shape and values (the bias
    here broadcasts, so nothing else in the step changes shape)."""
    rec, net = new_recorder(tmp_path, range(6))
    record_steps(rec, net, [0, 1])
    with torch.no_grad():
        net.bias.data = torch.tensor([7.0])
    record_steps(rec, net, [2, 3, 4, 5])
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step in (2, 3, 4, 5):
        bias = g.read_tensor("t", step, -1, "net.bias", "net.bias", "forward", "none")
        assert tuple(bias.shape) == (1,)
        assert bias.stats["mean"] == 7.0 and bias.stats["max"] == 7.0
        assert g.read_graph("t", step, 0).node("net.bias").shapes["net.bias"] == (1,)
    assert g.read_graph("t", 1, 0).node("net.bias").shapes["net.bias"] == (2,)


def test_a_module_tracked_after_a_dropped_batch_is_recorded(tmp_path):
    """A batch started for dynamic recording and then not recorded has built the
    parameters' registrations already; a module tracked afterwards must still appear."""
    net_a, net_b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded({5}))
    rec.track_module("a", net_a)
    rec.start_batch(0, 4, type_of_execution=None)
    rec.decide_recording_of_batch(None)  # not recorded after all
    rec.finish_batch()
    rec.track_module("b", net_b)
    x = torch.randn(4, 3)
    rec.start_batch(5, 4)
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("out", net_b(net_a(x)))
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    nodes = set(open_group(tmp_path / "g").list_tensors("t", 5)["node"])
    assert {"a.weight", "a.bias", "b.weight", "b.bias", "x", "out"} <= nodes


def writer_specs(params=("w",)):
    """Captures as the writer gets them: batch tensors of two sizes (one with its batch
    dimension second), a scalar loss, and forward and update of 4x4 parameters."""
    from comgra_like.store.worker import CaptureSpec

    def param(name, kind, i):
        return CaptureSpec(name, name, name, "parameter", -1, kind, (4, 4), None, False, False, i)

    return [
        CaptureSpec("a", "a", "a", "calculated", 0, "forward", (6, 4), 0, True, True, -1),
        CaptureSpec("b", "b", "b", "calculated", 0, "forward", (6, 4), 0, False, True, -1),
        CaptureSpec("c", "c", "c", "calculated", 0, "forward", (3, 6), 1, True, True, -1),
        *[param(p, "forward", i) for i, p in enumerate(params)],
        *[param(p, "update", i) for i, p in enumerate(params)],
        CaptureSpec("l", "l", "l", "loss", 0, "forward", (), None, False, True, -1),
    ]


def test_the_writers_layout_caches_give_the_rows_of_an_uncached_computation():
    """compute_tensor_table caches what depends only on the layout; the tables of two
    steps with different numbers are those computed without any cache."""
    from comgra_like.store.worker import compute_tensor_table

    specs = writer_specs()
    key = object()
    rng = np.random.default_rng(3)
    for step in range(3):
        arrays = [rng.standard_normal(s.numel).astype(np.float32) for s in specs]
        cached = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, None,
                                      layout_key=key)
        plain = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, None)
        assert cached.equals(plain)
        assert cached.num_rows == plain.num_rows > 0
    # Another sample choice under the same layout: other rows, not the cached ones.
    other = compute_tensor_table("t", 3, "main", [0, 2, 5], specs, arrays, None, layout_key=key)
    plain = compute_tensor_table("t", 3, "main", [0, 2, 5], specs, arrays, None)
    assert other.equals(plain) and other.num_rows > cached.num_rows


def test_a_cached_step_plan_reads_the_new_numbers_in_the_same_memory():
    """With ``arrays_key`` the writer keeps the views, groups and update buffer of a step
    and reuses them while the arrays are the same memory: steps that write new numbers
    into that memory (as the training process does into a slot) give the tables of an
    uncached computation, for blocks that are views of the memory as well as for
    stacked copies (tensors of one size that do not lie back to back)."""
    from comgra_like.store.worker import compute_tensor_table

    specs = writer_specs(params=("w", "v"))
    # One buffer, as shared memory: "a" and "b" back to back (one view), the parameters
    # with gaps between them (stacked copies).
    memory = np.zeros(400, np.float32)
    starts = [0, 24, 60, 100, 140, 180, 220, 260]
    arrays = [memory[o:o + s.numel] for o, s in zip(starts, specs)]
    key = object()
    rng = np.random.default_rng(4)
    svd_cached, svd_plain = {}, {}
    for step in range(4):
        memory[:] = rng.standard_normal(memory.size).astype(np.float32)
        cached = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, svd_cached,
                                      layout_key=key, arrays_key=("slot", 0))
        copies = [a.copy() for a in arrays]
        plain = compute_tensor_table("t", step, "main", [1, 4], specs, copies, svd_plain)
        assert cached.equals(plain), step
    assert cached.column("update_ratio").null_count < cached.num_rows


def test_a_cached_message_is_not_sent_with_a_layout_id_given_to_another_layout(tmp_path):
    """The recorder keeps each capture plan's message JSON; after the writer's layout ids
    start over, a cached id may name another layout, so the message is made anew."""
    rec, net = new_recorder(tmp_path, range(10))
    inputs = {}
    for s in range(4):  # each slot has its plans and cached messages for batch size 4
        inputs |= record_steps(rec, net, [s])
        rec._writer.flush()
    for i in range(255):  # with the next new layout the ids start over ...
        rec._writer.layout_id(("not a real layout", i))
    inputs |= record_steps(rec, net, [4], batch=7)  # ... and id 0 names its layout now
    rec._writer.flush()
    inputs |= record_steps(rec, net, [5, 6, 7])
    rec.finalize()
    g = open_group(tmp_path / "g")
    for s in (4, 5, 6, 7):
        got = g.read_tensor("t", s, 0, "x", "x", "forward", "batch_mean").values
        np.testing.assert_allclose(got, inputs[s].detach().mean(0).numpy(), rtol=1e-5, atol=1e-6)


def test_a_complex_tensor_records_its_magnitude_and_leaves_real_tensors_signed(tmp_path):
    """Complex tensors are stored as their magnitude; real tensors copied in the same
    call keep their signs (they once went through abs() too)."""
    rec, net = new_recorder(tmp_path, {0})
    x = torch.tensor([[-3.0, -2.0, -1.0]] * 4)
    z = torch.complex(torch.full((4, 2), 3.0), torch.full((4, 2), -4.0))
    rec.start_batch(0, 4)
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("z", z)
    rec.register_tensor("out", net(x))
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    got_x = g.read_tensor("t", 0, 0, "x", "x", "forward", "batch_mean").values
    np.testing.assert_allclose(got_x, [-3.0, -2.0, -1.0])
    got_z = g.read_tensor("t", 0, 0, "z", "z", "forward", "batch_mean").values
    np.testing.assert_allclose(got_z, [5.0, 5.0])


def test_slots_keep_their_segments_and_later_slots_start_at_the_size_needed(tmp_path):
    """New shared memory is expensive for the training thread, so: the first recorded
    step, which does not know its size, overflows into more segments and its slot keeps
    them; the other slot starts with one segment as large as that step needed; nothing
    is reallocated afterwards, and every step's values come back intact."""
    from comgra_like.store.client import MIN_SEGMENT

    net = torch.nn.Linear(600, 600)  # 360,600 parameter values: more than MIN_SEGMENT
    assert sum(p.numel() for p in net.parameters()) > MIN_SEGMENT
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(8)))
    rec.track_module("net", net)
    writer = rec._writer
    inputs = record_steps(rec, net, [0], batch=4, width=600)
    [a] = [slot for slot in writer._slots if slot.segments]  # the slot of step 0
    inputs.update(record_steps(rec, net, [1], batch=4, width=600))
    [b] = [slot for slot in writer._slots if slot is not a]  # both slots in flight now
    assert len(a.segments) > 1  # the first step overflowed
    assert len(b.segments) == 1 and b.segments[0].nelems >= a.needed
    segments = (list(a.segments), list(b.segments))
    inputs.update(record_steps(rec, net, range(2, 8), batch=4, width=600))
    assert (a.segments, b.segments) == segments  # the same objects: nothing replaced
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step, x in inputs.items():
        r = g.read_tensor("t", step, 0, "x", "x", "forward", "sample", 3)
        np.testing.assert_array_equal(r.values, x[3].detach().numpy())


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
