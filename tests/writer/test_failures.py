"""When the writer fails, dies or stops: training hears what happened, nothing received
is lost, the trial is marked aborted, and nothing waits forever."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from comgra_like import protocol
from comgra_like.errors import StorageError
from comgra_like.query import open_group

from .helpers import new_recorder, record_steps


def trial_json(root) -> dict:
    return json.loads((root / "g/trials/t/trial.json").read_text())


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_shard_that_cannot_be_written_is_reported_with_its_exception(tmp_path, monkeypatch,
                                                                       mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    rec, net = new_recorder(tmp_path)
    assert rec.writer.mode == mode
    record_steps(rec, net, range(5))
    rec.flush(timeout=60)
    # A folder where the writer's next tensors shard goes.
    tensors = tmp_path / "g/trials/t/tensors"
    assert sorted(p.name for p in tensors.iterdir()) == ["part-00000000.parquet"]
    (tensors / "part-00000001.parquet").mkdir()
    record_steps(rec, net, range(5, 8))
    with pytest.raises(StorageError) as caught:
        rec.flush(timeout=60)
    message = str(caught.value)
    # The real exception, the file it concerns and what it means; no guess about space.
    assert "IsADirectoryError" in message and "part-00000001.parquet" in message
    assert "something else stands where the writer needs a folder or a file" in message
    assert "disk is full" not in message and "exit code" not in message
    with pytest.raises(StorageError, match="IsADirectoryError"):  # every later call says so
        record_steps(rec, net, [8])
        rec.finalize()
    info = trial_json(tmp_path)
    assert info["status"] == "aborted"  # not "finished", not "running"
    assert "IsADirectoryError" in info["abort_reason"]
    assert info["trial_id"] == "t" and "settings" in info and "created" in info  # kept
    g = open_group(tmp_path / "g")
    [trial] = g.list_trials()
    assert trial.status == "aborted"
    assert g.list_steps("t")["training_step"].tolist()[:5] == [0, 1, 2, 3, 4]
    assert g.read_tensor("t", 4, 0, "out", "out", "forward", "sample", 3).values.shape == (2,)


@pytest.mark.parametrize("damage", ["unknown layout", "no JSON"])
def test_a_failure_on_one_message_keeps_every_step_buffered_before_it(tmp_path, damage):
    """A message the writer cannot handle (a protocol bug, sent through the real pipe):
    the steps it holds in memory are written, not dropped with the failing one."""
    rec, net = new_recorder(tmp_path)
    writer = rec.writer
    writer.flush_seconds = 3600  # steps 0-4 stay in the writer's memory
    record_steps(rec, net, range(5))
    rec.drain()
    assert not (tmp_path / "g/trials/t/steps").exists()
    if damage == "unknown layout":
        writer.channel.send(protocol.Step(slot=0, layout_id=999, refs=[], step=5, toe="x",
                                          samples=[], categories=[], batch_size=4, wall=0.0,
                                          graphs=[]))
        expected = "KeyError: 999"
    else:
        writer.channel.write("this is not JSON")
        expected = "JSONDecodeError"
    with pytest.raises(StorageError) as caught:
        writer.flush(timeout=60)
    message = str(caught.value)
    assert expected in message and "a bug in comgra_like's writer" in message
    assert "every other step received is written" in message
    assert "exit code" not in message
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2, 3, 4]
    assert g.list_trials()[0].status == "aborted"
    assert expected in trial_json(tmp_path)["abort_reason"]


def test_a_stopped_writer_fails_the_waiting_step_after_the_bound_instead_of_hanging(tmp_path):
    rec, net = new_recorder(tmp_path)
    writer = rec.writer
    writer.stall_seconds = 2.0
    record_steps(rec, net, [0])
    writer.flush(timeout=60)
    pid = writer.pid
    os.kill(pid, signal.SIGSTOP)
    outcome: list = []
    sent: list[int] = []

    def train():
        try:
            for step in range(1, 90):
                record_steps(rec, net, [step])
                sent.append(step)
        except StorageError as e:
            outcome.append(e)

    try:
        t = threading.Thread(target=train, daemon=True)
        t.start()
        t.join(timeout=60)  # without a bound the loop waits for a slot forever
        assert not t.is_alive(), "training still waits for the stopped writer"
    finally:
        os.kill(pid, signal.SIGCONT)
    [error] = outcome
    message = str(error)
    assert f"pid {pid}" in message and "it is stopped" in message
    assert "kill -CONT" in message and "COMGRA_LIKE_WRITER_STALL_SECONDS" in message
    assert 1 <= len(sent) <= writer.slots.max_slots  # the slots filled, then the bound held
    with pytest.raises(StorageError, match="it is stopped"):  # later calls say the same
        record_steps(rec, net, [99])
    assert trial_json(tmp_path)["status"] == "aborted"
    # Resumed, the writer writes every step it had received and exits on its own.
    writer.channel.proc.wait(timeout=60)
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == [0] + sent
