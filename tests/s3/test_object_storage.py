"""Groups on S3 (issue 19, "Object storage"): real training loops record to an
S3-compatible server (moto's server mode, a process on loopback: conftest.py), and the
query API, compaction and the GUI read them like a group on disk."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pytest

from comgra_like.errors import NotFoundError, StorageError
from comgra_like.format.files import files_for, s3_options
from comgra_like.query import open_group
from tests.conftest import TinyRun

CHILD = Path(__file__).with_name("train_child.py")
RECORD = [0, 1, 4, 5, 8, 9]
# Columns whose values depend on when the row was written, not on what was recorded.
TIME_COLUMNS = ("wall_time",)


def _record(root: str | Path, trial_id: str, seed: int, steps: int = 10) -> None:
    run = TinyRun(root, "g", trial_id, record_steps=RECORD, seed=seed)
    for step in range(steps):
        run.step(step)
        run.recorder.flush()  # a shard per step: compaction has work to do
    run.finalize()


def _fs() -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**s3_options())


def _names(root: str, rest: str) -> list[str]:
    key = files_for(root).key(root) + "/" + rest
    return sorted(i.base_name for i in _fs().get_file_info(
        pafs.FileSelector(key, allow_not_found=True)))


def _without_times(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c in TIME_COLUMNS]).reset_index(
        drop=True)


def test_a_training_loop_recorded_to_s3_reads_like_the_same_loop_on_disk(s3, tmp_path):
    for root in (s3, tmp_path):
        for seed, trial in enumerate(["trial_a", "trial_b"]):
            _record(root, trial, seed)
    remote, local = open_group(f"{s3}/g"), open_group(tmp_path / "g")
    assert repr(remote).startswith(f"Group('{s3}/g', 2 trials")
    assert remote.skipped == []
    assert [t.trial_id for t in remote.list_trials()] == ["trial_a", "trial_b"]
    assert {t.status for t in remote.list_trials()} == {"finished"}
    for trial in ("trial_a", "trial_b"):
        # compaction ran on the store: one compact object per table, the parts deleted
        for table in ("steps", "tensors", "kpis"):
            names = _names(s3, f"g/trials/{trial}/{table}")
            assert len(names) == 1 and names[0].startswith("compact-"), (table, names)
        pd.testing.assert_frame_equal(_without_times(remote.read_statistics(trial)),
                                      _without_times(local.read_statistics(trial)))
        pd.testing.assert_frame_equal(_without_times(remote.list_steps(trial)),
                                      _without_times(local.list_steps(trial)))
        pd.testing.assert_frame_equal(_without_times(remote.read_kpis(trial)),
                                      _without_times(local.read_kpis(trial)))
        assert ([n.text for n in remote.read_notes(trial)]
                == [n.text for n in local.read_notes(trial)])
        assert remote.read_modules(trial) == local.read_modules(trial)
    # nothing of the s3:// recording landed on the local disk (no "s3:" folder)
    assert not Path("s3:").exists()


def test_recording_again_replaces_the_trial_on_s3(s3):
    _record(s3, "trial_a", seed=0, steps=10)
    _record(s3, "trial_a", seed=1, steps=3)
    group = open_group(f"{s3}/g")
    assert sorted({int(s) for s in group.read_statistics("trial_a")["training_step"]}) == [0, 1]


def test_opening_an_empty_s3_prefix_says_what_to_pass(s3):
    with pytest.raises(NotFoundError, match="nothing is stored under s3://"):
        open_group(f"{s3}/no-group")


def test_an_unreachable_store_is_a_storage_error_naming_it(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match="cannot reach s3://.*AWS_ENDPOINT_URL"):
        TinyRun(s3, "g", "t", record_steps=RECORD)


def _steps(group, trial: str) -> list[int]:
    return sorted({int(s) for s in group.list_steps(trial)["training_step"]})


def _start_child(s3: str, trial: str, steps: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CHILD), s3, "g", trial, steps],
                            stdout=subprocess.PIPE, text=True)


def _read_steps(proc: subprocess.Popen, seen: list) -> threading.Thread:
    def run() -> None:
        for line in proc.stdout:
            seen.append(line.strip())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _stop(proc: subprocess.Popen, seen: list[str]) -> None:
    """Kill a training process and wait for its writer, which then writes what it got
    (so that no writer outlives the test and its server)."""
    proc.kill()
    proc.wait()
    if seen and seen[0].startswith("writer "):
        writer = int(seen[0].split()[1])
        _wait(lambda: not _alive(writer), "the writer to end", 60)


def _wait(predicate, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_group_reads_live_while_training_writes_to_s3(s3):
    proc = _start_child(s3, "live", "40")
    seen: list[str] = []
    _read_steps(proc, seen)
    try:
        _wait(lambda: "3" in seen, "four steps")
        group = open_group(f"{s3}/g")
        first = _steps(group, "live")
        assert len(first) >= 4
        assert group.list_trials()[0].status == "running"
        _wait(lambda: "finalized" in seen, "the end of training")
        group.refresh()
        steps = _steps(group, "live")
        assert steps == list(range(40)) and len(steps) > len(first)
        assert group.list_trials()[0].status == "finished"
        stats = group.read_statistics("live")
        assert sorted(set(stats["training_step"])) == list(range(40))
    finally:
        _stop(proc, seen)


def test_a_training_process_killed_mid_recording_leaves_a_readable_group(s3):
    proc = _start_child(s3, "killed", "forever")
    seen: list[str] = []
    reader = _read_steps(proc, seen)
    try:
        _wait(lambda: len(seen) >= 6, "five steps")
        writer = int(seen[0].split()[1])
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join()
    done = {int(s) for s in seen[1:]}  # steps the training process saw flushed
    # The writer writes what it received, marks the trial aborted on the store and exits.
    _wait(lambda: not _alive(writer), "the writer to end")
    group = open_group(f"{s3}/g")
    assert group.skipped == []
    info = group.list_trials()[0]
    assert info.status == "aborted", info
    steps = set(_steps(group, "killed"))
    assert done <= steps, sorted(done - steps)
    stats = group.read_statistics("killed")
    assert set(stats["training_step"]) == steps


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_comgra_serves_an_s3_group_while_training_writes_it(s3, monkeypatch):
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    proc = _start_child(s3, "served", "forever")
    seen: list[str] = []
    _read_steps(proc, seen)
    port = _free_port()
    # the endpoint as the flag gives it, not from the environment
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    gui = subprocess.Popen(
        [sys.executable, "-m", "comgra_like.app.cli", "--path", f"{s3}/g",
         "--s3-endpoint", endpoint, "--port", str(port), "--refresh", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    _read_steps(gui, out)
    try:
        _wait(lambda: len(seen) >= 3, "two steps")
        _wait(lambda: any("open http" in line for line in out), "the GUI to start", 60)
        assert any(f"showing {s3}/g" in line for line in out), out
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read()
        assert b"_dash-renderer" in page or b"dash" in page.lower()
        # the server's data layer sees the trial (Dash's first callback data)
        layout = urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout",
                                        timeout=30).read()
        assert layout
    finally:
        gui.kill()
        gui.wait()
        _stop(proc, seen)


def test_appdata_reads_an_s3_group_live(s3):
    from comgra_like.app.data import AppData

    proc = _start_child(s3, "appdata", "forever")
    seen: list[str] = []
    _read_steps(proc, seen)
    try:
        _wait(lambda: len(seen) >= 3, "two steps")
        data = AppData(f"{s3}/g")
        data.refresh()
        assert [t.trial_id for t in data.group.list_trials()] == ["appdata"]
        before = len(_steps(data.group, "appdata"))

        def refreshed_has_more() -> bool:
            # The child prints a step when it hands it to its writer; the upload follows
            # at the writer's next flush, later still on a loaded machine.
            data.refresh()
            return len(_steps(data.group, "appdata")) > before

        _wait(lambda: len(seen) >= before + 4, "more steps")
        _wait(refreshed_has_more, "a refresh that shows the new steps")
    finally:
        _stop(proc, seen)


def test_probe_inputs_are_stored_and_read_back_on_s3(s3):
    import numpy as np

    from comgra_like.format.flows import submit_input

    _record(s3, "trial_a", seed=0, steps=2)
    edited = np.arange(6, dtype=np.float32).reshape(2, 3)
    probe = submit_input(f"{s3}/g", "trial_a", edited, training_step=0)
    group = open_group(f"{s3}/g")
    assert [p.probe_id for p in group.read_probes("trial_a")] == [probe]
    np.testing.assert_array_equal(group.read_probe_input("trial_a", probe), edited)
    assert _names(s3, f"g/trials/trial_a/probes/{probe}") == ["input.npy", "request.json"]


def test_watch_into_a_recorder_on_s3_reads_its_histograms_and_module_graphs(s3):
    import torch
    from torch import nn

    import comgra_like
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = ComgraRecorder(s3, "g", "watched", DecisionMakerForRecordingsFrequencyPerType(2),
                         max_num_batch_size_to_record=2)
    rec.track_module("net", model)
    handle = comgra_like.watch(model, recorder=rec, verbose=False)
    for step in range(4):
        x = torch.randn(4, 6)
        rec.start_batch(step, 4, "train")
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        loss = model(x).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        rec.finish_iteration()
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_batch()
    handle.unwatch()
    rec.finalize()
    group = open_group(f"{s3}/g")
    histograms = group.read_histograms("watched")
    assert sorted(set(histograms.training_step)) == [0, 2]
    assert group.read_module_graph("watched", 2) is not None
    assert group.read_watch_report("watched") is not None


def test_per_module_metrics_recorded_to_s3_are_read_back(s3):
    import torch
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    rec = ComgraRecorder(s3, "g", "metrics", DecisionMakerForRecordingsFrequencyPerType(5))
    rec.track_module("net", net, metrics={"0": [["WeightNorm", "linear(3, 1)"]]})
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    weights = {}
    for step in range(10):
        x = torch.randn(4, 3)
        rec.start_batch(step, 4)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        loss = net(x).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_iteration()
        rec.finish_batch()
        weights[step] = float(net[0].weight.detach().double().norm())
    rec.finalize()
    frame = open_group(f"{s3}/g").read_metrics("metrics", module="net.0")
    assert list(frame.training_step) == [1, 4, 7]
    assert list(frame.value) == pytest.approx([weights[s] for s in (1, 4, 7)], rel=1e-12)


def test_a_store_that_goes_away_keeps_the_trials_read_and_says_why(tmp_path, monkeypatch):
    from tests.s3.conftest import start_moto, stop_moto, use_server

    proc, endpoint = start_moto(tmp_path)  # a server of its own, to stop it
    try:
        root = use_server(monkeypatch, endpoint)
        _record(root, "trial_a", seed=0, steps=2)
        group = open_group(f"{root}/g")
        assert [t.trial_id for t in group.list_trials()] == ["trial_a"]
    finally:
        stop_moto(proc)
    # a refresh that cannot list is an error, not a group whose trials were all deleted
    with pytest.raises(StorageError, match="cannot list s3://"):
        group.refresh()
    assert [t.trial_id for t in group.list_trials()] == ["trial_a"]
    assert _steps(group, "trial_a") == [0, 1]  # the index keeps what it had read
