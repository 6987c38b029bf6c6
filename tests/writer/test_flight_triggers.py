"""The flight recorder's triggers: WriterClient.flight_trigger names each in trial.json,
through the real writer, and a trigger sent right before the training process is killed
is on disk."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from comgra_like.format.trial import (
    FLIGHT_TRIGGERS,
    FLIGHT_TRIGGERS_DROPPED,
    FLIGHT_TRIGGERS_KEPT,
    flight_triggers,
)

from .helpers import new_recorder, record_steps

TRAINING_SCRIPT = textwrap.dedent("""
    import sys, torch
    from comgra_like.recorder import ComgraRecorder
    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(sys.argv[1], "g", "t", DecisionMakerForRecordingsHardcoded(range(10)))
    rec.track_module("net", net)
    for step in range(5):
        rec.start_batch(step, 4)
        rec.start_iteration()
        rec.register_tensor("x", torch.randn(4, 3), is_input=True)
        rec.finish_iteration()
        rec.finish_batch()
    rec.writer.flight_trigger({"kind": "non_finite", "training_step": 4, "tensor": "net.weight",
                               "value": float("nan"), "window_steps": [0, 1, 2, 3, 4],
                               "detail": {"role": "gradient", "threshold": float("inf")}})
    print(rec.writer.pid, flush=True)
    while True:  # training goes on until it is killed
        pass
""")


def _trial_json(root):
    return json.loads((root / "g/trials/t/trial.json").read_text())


def _gone(pid: int) -> bool:
    """The process has ended (a zombie not waited for yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(b")") + 2:].startswith(b"Z")


def _wait_until_gone(pid: int) -> None:
    deadline = time.monotonic() + 60
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), f"process {pid} did not end"


def test_a_trigger_sent_right_before_a_kill_is_named_in_trial_json(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        writer_pid = int(proc.stdout.readline())
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # at once: the trigger may still be in the pipe
        proc.wait()
    _wait_until_gone(writer_pid)  # it writes what it received, marks the trial aborted
    info = _trial_json(tmp_path)
    assert info["status"] == "aborted"  # the writer's mark kept the triggers
    [trigger] = info[FLIGHT_TRIGGERS]
    assert trigger["kind"] == "non_finite"
    assert trigger["training_step"] == 4
    assert trigger["tensor"] == "net.weight"
    assert trigger["value"] == "NaN"  # JSON has no NaN
    assert trigger["window_steps"] == [0, 1, 2, 3, 4]
    assert trigger["detail"] == {"role": "gradient", "threshold": "Infinity"}
    assert trigger["rank"] == 0
    listed, dropped = flight_triggers(info)
    assert math.isnan(listed[0]["value"]) and dropped == 0
    assert math.isinf(float(listed[0]["detail"]["threshold"]))


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_triggers_beyond_the_kept_ones_are_counted_and_finishing_keeps_them(
        tmp_path, monkeypatch, mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(3))
    for i in range(FLIGHT_TRIGGERS_KEPT + 5):
        assert rec.writer.flight_trigger({"kind": "loss_spike", "training_step": i,
                                          "value": 2.5 + i, "wall_time": 7.0,
                                          "median": 1.0}) is True
    rec.flush()
    info = _trial_json(tmp_path)
    assert info["status"] == "running"
    assert len(info[FLIGHT_TRIGGERS]) == FLIGHT_TRIGGERS_KEPT
    assert info[FLIGHT_TRIGGERS_DROPPED] == 5
    rec.finalize()
    info = _trial_json(tmp_path)
    assert info["status"] == "finished"
    listed, dropped = flight_triggers(info)
    assert [t["training_step"] for t in listed] == list(range(FLIGHT_TRIGGERS_KEPT))
    assert dropped == 5
    first = listed[0]
    assert first == {"kind": "loss_spike", "training_step": 0, "tensor": None, "value": 2.5,
                     "window_steps": [], "detail": {"median": 1.0}, "wall_time": 7.0,
                     "rank": 0}


def test_a_bad_trigger_never_raises_into_training_and_is_said_once(tmp_path, caplog):
    rec, net = new_recorder(tmp_path)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        assert rec.writer.flight_trigger({"training_step": 3}) is False  # no kind
        assert rec.writer.flight_trigger({"kind": "x", "training_step": "soon"}) is False
        assert rec.writer.flight_trigger(["not", "a", "mapping"]) is False
    warnings = [r for r in caplog.records if "flight-recorder trigger" in r.getMessage()]
    assert len(warnings) == 1 and "needs 'kind'" in warnings[0].getMessage()
    # objects that are no JSON become text; training and recording go on
    assert rec.writer.flight_trigger({"kind": "user", "training_step": 1,
                                      "detail": {"obj": object, (1, 2): {1, 2}}})
    record_steps(rec, net, range(2))
    rec.finalize()
    [trigger] = _trial_json(tmp_path)[FLIGHT_TRIGGERS]
    assert trigger["detail"] == {"obj": str(object), "(1, 2)": str({1, 2})}
    rec.writer.flight_trigger({"kind": "late", "training_step": 9})  # closed: no raise


def test_a_trigger_of_a_failed_writer_is_dropped_without_raising(tmp_path):
    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(1))
    os.kill(rec.writer.pid, signal.SIGKILL)
    _wait_until_gone(rec.writer.pid)
    # /proc shows a killed multi-threaded process as a zombie before its threads are
    # gone; waitpid reports it only then: wait for that, as a real failure would be seen
    deadline = time.monotonic() + 60
    while not rec.writer.channel.exited() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rec.writer.flight_trigger({"kind": "x", "training_step": 1}) is False
    assert rec.writer.flight_trigger({"kind": "x", "training_step": 2}) is False
