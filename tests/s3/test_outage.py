"""An object store that refuses connections while a real training loop records to it
(issue 28, item 4): the writer retries for a stated time, keeps the steps recorded
meanwhile, and fails with a clear error - and marks the trial aborted once the store is
back - only when the outage lasts longer. The outage: a relay in front of the moto server
(gate.py) that stops listening and cuts its connections, then listens again on the same
port with the store's objects intact."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from comgra_like.errors import StorageError
from comgra_like.format.files import files_for
from comgra_like.query import open_group
from tests.s3.conftest import use_server

CHILD = Path(__file__).with_name("outage_child.py")


def _start(root: str, trial: str, steps: int, stderr: Path) -> tuple[subprocess.Popen, list]:
    with open(stderr, "wb") as sink:
        proc = subprocess.Popen([sys.executable, str(CHILD), root, "g", trial, str(steps),
                                 "0.05"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=sink, text=True)
    seen: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
    threading.Thread(target=read, daemon=True).start()
    return proc, seen


def _wait(predicate, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _steps(seen: list[str]) -> list[int]:
    return [int(s) for s in seen if s.isdigit()]


def _line(seen: list[str], prefix: str) -> str | None:
    return next((s[len(prefix):] for s in seen if s.startswith(prefix)), None)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _status(root: str) -> str | None:
    """The trial's status as a fresh open lists it; None when the open raised a clear
    StorageError (the store not answering yet). A listing never leaves the trial out."""
    try:
        trials = open_group(f"{root}/g").list_trials()
    except StorageError:
        return None
    assert [t.trial_id for t in trials] == ["t"], trials
    return trials[0].status


def _stored_steps(root: str, trial: str) -> list[int]:
    group = open_group(f"{root}/g")
    return sorted({int(s) for s in group.list_steps(trial)["training_step"]})


def test_a_10_s_outage_loses_no_step_and_the_trial_finishes(gate, monkeypatch, tmp_path):
    root = use_server(monkeypatch, gate.endpoint)
    monkeypatch.setenv("COMGRA_LIKE_STORE_RETRY_SECONDS", "90")
    steps = 150
    proc, seen = _start(root, "t", steps, tmp_path / "stderr")
    try:
        _wait(lambda: len(_steps(seen)) >= 5, "five steps")
        gate.close()
        before = len(_steps(seen))
        time.sleep(10)
        during = len(_steps(seen)) - before
        gate.open()
        _wait(lambda: "finalized" in seen or proc.poll() is not None, "the end of training",
              240)
        assert proc.wait(60) == 0, (tmp_path / "stderr").read_text()
    finally:
        _stop(proc)
    # training went on during the outage: more steps than the writer's slots hold
    assert during > 8, during
    assert _steps(seen) == list(range(steps))
    group = open_group(f"{root}/g")
    assert group.list_trials()[0].status == "finished"
    assert _stored_steps(root, "t") == list(range(steps))
    stats = group.read_statistics("t")
    assert sorted(set(stats["training_step"])) == list(range(steps))
    log = (tmp_path / "stderr").read_text()
    assert "cannot be reached" in log and "answers again after" in log, log
    assert "bug" not in log


def test_an_outage_longer_than_the_bound_fails_clearly_and_marks_the_trial_once_back(
        gate, monkeypatch, tmp_path):
    root = use_server(monkeypatch, gate.endpoint)
    monkeypatch.setenv("COMGRA_LIKE_STORE_RETRY_SECONDS", "4")
    proc, seen = _start(root, "t", 10**6, tmp_path / "stderr")
    try:
        _wait(lambda: len(_steps(seen)) >= 5, "five steps")
        gate.close()
        _wait(lambda: _line(seen, "error ") is not None, "the error in training", 120)
        error = json.loads(_line(seen, "error "))
        bucket = root.split("/")[2]
        assert re.search(rf"the object store s3://{bucket}/\S+ could not be reached for "
                         r"\d+ s: writing s3://\S+ failed", error), error
        assert "retried for 4 s (COMGRA_LIKE_STORE_RETRY_SECONDS)" in error
        assert "bug" not in error
        assert "still marked running" in error
        received = int(re.search(r"\((\d+) received in all\)", error).group(1))
        assert received >= 5
        gate.open()
        # the writer, still running, writes what it kept and marks the trial aborted
        _wait(lambda: _status(root) == "aborted", "the trial marked aborted", 60)
        proc.stdin.write("\n")
        proc.stdin.flush()
        _wait(lambda: _line(seen, "closed ") is not None, "the writer's last word", 60)
        last = json.loads(_line(seen, "closed "))
        assert "the steps kept were written" in last and "is marked aborted" in last, last
    finally:
        _stop(proc)
    info = files_for(root).read_json(Path(f"{root}/g/trials/t/trial.json"))
    assert "could not be reached" in info["abort_reason"], info
    # every step the writer had received is stored, none after the failure
    assert _stored_steps(root, "t") == list(range(received))


def test_a_store_that_never_comes_back_says_the_trial_could_not_be_marked(
        gate, monkeypatch, tmp_path):
    root = use_server(monkeypatch, gate.endpoint)
    monkeypatch.setenv("COMGRA_LIKE_STORE_RETRY_SECONDS", "3")
    proc, seen = _start(root, "t", 10**6, tmp_path / "stderr")
    try:
        _wait(lambda: len(_steps(seen)) >= 3, "three steps")
        gate.close()
        _wait(lambda: _line(seen, "error ") is not None, "the error in training", 120)
        proc.stdin.write("\n")
        proc.stdin.flush()
        _wait(lambda: _line(seen, "closed ") is not None, "the writer's last word", 60)
        last = json.loads(_line(seen, "closed "))
        assert "could NOT be marked aborted, it still says running" in last, last
        assert "bug" not in last
    finally:
        _stop(proc)
    gate.open()
    assert open_group(f"{root}/g").list_trials()[0].status == "running"


def test_a_full_buffer_holds_training_until_the_store_is_back(gate, monkeypatch, tmp_path):
    root = use_server(monkeypatch, gate.endpoint)
    monkeypatch.setenv("COMGRA_LIKE_STORE_RETRY_SECONDS", "90")
    monkeypatch.setenv("COMGRA_LIKE_STORE_BUFFER_MB", "0")  # nothing kept beyond 2 shards
    steps = 80
    proc, seen = _start(root, "t", steps, tmp_path / "stderr")
    try:
        _wait(lambda: len(_steps(seen)) >= 5, "five steps")
        gate.close()
        time.sleep(10)
        during = len(_steps(seen))
        time.sleep(2)
        stalled = len(_steps(seen)) == during  # training waits for the writer
        gate.open()
        _wait(lambda: "finalized" in seen or proc.poll() is not None, "the end of training",
              240)
        assert proc.wait(60) == 0, (tmp_path / "stderr").read_text()
    finally:
        _stop(proc)
    assert stalled and during < steps, during
    log = (tmp_path / "stderr").read_text()
    assert "are full (COMGRA_LIKE_STORE_BUFFER_MB)" in log, log
    assert open_group(f"{root}/g").list_trials()[0].status == "finished"
    assert _stored_steps(root, "t") == list(range(steps))
