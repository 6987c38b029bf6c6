"""One recorder per trial: a second recorder of a trial that is being recorded (another
process, e.g. a second DDP rank) is refused before it deletes anything; the lock goes with
the last of the training process and its writer, so a crash leaves nothing stale."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from writer.helpers import new_recorder, record_steps

from comgra_like.errors import StorageError
from comgra_like.query import open_group

COMMON = textwrap.dedent("""
    import sys, torch
    from comgra_like.errors import StorageError
    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder

    def steps(rec, net, numbers):
        for step in numbers:
            x = torch.randn(4, 3)
            rec.start_batch(step, 4)
            rec.start_iteration()
            rec.register_tensor("x", x, is_input=True)
            rec.register_tensor("out", net(x))
            rec.finish_iteration()
            rec.finish_batch()
""")

# Records steps 0-4, says so, waits for a line on stdin, records 5-9 and finalizes.
FIRST = COMMON + textwrap.dedent("""
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(sys.argv[1], "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    rec.track_module("net", net)
    steps(rec, net, range(5))
    rec.flush()
    print("recording", rec.writer.pid, flush=True)
    sys.stdin.readline()
    steps(rec, net, range(5, 10))
    rec.finalize()
    print("finished", flush=True)
""")

# A second recorder of the same trial: exit code 3 and the message when refused.
SECOND = COMMON + textwrap.dedent("""
    net = torch.nn.Linear(3, 2)
    try:
        rec = ComgraRecorder(sys.argv[1], "g", "t", DecisionMakerForRecordingsHardcoded({0, 1}))
    except StorageError as e:
        print(e)
        sys.exit(3)
    rec.track_module("net", net)
    steps(rec, net, range(2))
    rec.finalize()
""")


def start_first(root):
    first = subprocess.Popen([sys.executable, "-c", FIRST, str(root)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    word, writer_pid = first.stdout.readline().split()
    assert word == "recording"
    return first, int(writer_pid)


def second(root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SECOND, str(root)], capture_output=True,
                          text=True, timeout=120, check=False)


def steps_of(root) -> list[int]:
    return open_group(root / "g").list_steps("t")["training_step"].tolist()


def test_a_second_process_recording_the_same_trial_is_refused_and_destroys_nothing(tmp_path):
    first, _ = start_first(tmp_path)
    try:
        refused = second(tmp_path)
        assert refused.returncode == 3, refused.stderr
        message = refused.stdout
        assert "trial 't'" in message and f"process {first.pid}" in message
        assert "another trial_id" in message and "its own rank" in message
        assert steps_of(tmp_path) == [0, 1, 2, 3, 4]  # the first recording is intact
        first.stdin.write("go on\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "finished"
    finally:
        first.stdin.close()
        first.wait(timeout=120)
    assert first.returncode == 0
    g = open_group(tmp_path / "g")
    assert [t.trial_id for t in g.list_trials()] == ["t"]  # the lock file is no trial
    assert g.list_trials()[0].status == "finished"
    assert steps_of(tmp_path) == list(range(10))
    # Once the first recording is over, the trial can be recorded again (and is replaced).
    again = second(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert steps_of(tmp_path) == [0, 1]


def test_a_killed_training_process_leaves_the_lock_to_its_writer_and_nothing_stale(tmp_path):
    first, writer_pid = start_first(tmp_path)
    first.kill()
    first.wait(timeout=60)
    os.kill(writer_pid, signal.SIGSTOP)  # the writer is still writing what it received
    try:
        refused = second(tmp_path)
        assert refused.returncode == 3 and "another recorder" in refused.stdout
    finally:
        os.kill(writer_pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    while True:  # the writer finishes, marks the trial aborted, exits: the lock is gone
        try:
            os.kill(writer_pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the writer did not finish"
        time.sleep(0.1)
    assert open_group(tmp_path / "g").list_trials()[0].status == "aborted"
    again = second(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert steps_of(tmp_path) == [0, 1]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_two_recorders_of_one_trial_in_one_process(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(3))
    with pytest.raises(StorageError, match="trial 't' .* is being recorded by another"):
        new_recorder(tmp_path)
    record_steps(rec, net, range(3, 5))  # the first goes on undisturbed
    rec.finalize()
    assert steps_of(tmp_path) == list(range(5))
    other, net = new_recorder(tmp_path)  # released by finalize()
    record_steps(other, net, [0])
    other.finalize()
    assert steps_of(tmp_path) == [0]
    assert sorted(p.name for p in (tmp_path / "g/trials").iterdir()) == [".t.lock", "t"]
