"""The transport: shared-memory slots, back-pressure, a dead or stopped writer, the thread
fallback."""

import numpy as np
import pytest
import torch
from writer.helpers import new_recorder, record_steps

from comgra_like.errors import StorageError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder


def test_a_killed_writer_process_is_reported_not_waited_for(tmp_path):
    import os
    import signal

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(2))
    os.kill(rec.writer.pid, signal.SIGKILL)
    with pytest.raises(StorageError, match=r"writer process \(pid \d+\) was killed by SIGKILL"):
        record_steps(rec, net, range(2, 10))
        rec.flush(timeout=60)
    mine = rec.writer.slots.segment_prefix
    assert not [n for n in os.listdir(rec.writer.slots.shm_dir) if n.startswith(mine)]
    [trial] = open_group(tmp_path / "g").list_trials()
    assert trial.status == "aborted"


def test_shared_memory_is_not_left_behind(tmp_path):
    import os

    rec, net = new_recorder(tmp_path)
    record_steps(rec, net, range(4))
    rec.flush(timeout=60)
    mine = rec.writer.slots.segment_prefix
    assert rec.writer.slots.slots[0].segments  # shared memory was used
    # The writer unlinks each segment as soon as it has mapped it.
    assert not [n for n in os.listdir(rec.writer.slots.shm_dir) if n.startswith(mine)]
    # A segment created but never announced (the training process killed in between):
    # the writer process removes it when it exits.
    orphan = os.path.join(rec.writer.slots.shm_dir, mine + "999")
    open(orphan, "wb").close()
    rec.finalize()
    assert not [n for n in os.listdir(rec.writer.slots.shm_dir) if n.startswith(mine)]


def test_without_a_usable_interpreter_the_writer_runs_in_a_thread(tmp_path, monkeypatch):
    import sys

    monkeypatch.delenv("COMGRA_LIKE_WRITER", raising=False)
    monkeypatch.setattr(sys, "executable", "")
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    assert rec.writer.mode == "thread"
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
    rec.flush(timeout=60)
    writer = rec.writer
    expected = writer.slots.max_slots
    if budget_slots is not None:
        writer.slots.budget_bytes = budget_slots * 4 * max(slot.needed for slot in writer.slots.slots)
        expected = budget_slots
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        done = []
        t = threading.Thread(target=lambda: (record_steps(rec, net, range(1, 13)),
                                             done.append(True)))
        t.start()
        time.sleep(2.0)
        assert not done and t.is_alive()  # waiting for a slot
        assert len(writer.slots.slots) == expected
    finally:
        os.kill(writer.pid, signal.SIGCONT)
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
    writer = rec.writer
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        record_steps(rec, net, [1, 2])
        done = []
        t = threading.Thread(target=lambda: (rec.drain(), done.append(True)))
        t.start()
        time.sleep(1.0)
        assert not done  # the stopped writer holds the slots of steps 1 and 2
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    t.join(timeout=60)
    assert done
    assert len(writer.slots.free) == len(writer.slots.slots)
    rec.finalize()
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == [0, 1, 2]


def test_a_cached_message_is_not_sent_with_a_layout_id_given_to_another_layout(tmp_path):
    """The recorder keeps each capture plan's message JSON; after the writer's layout ids
    start over, a cached id may name another layout, so the message is made anew."""
    rec, net = new_recorder(tmp_path, range(10))
    inputs = {}
    for s in range(4):  # each slot has its plans and cached messages for batch size 4
        inputs |= record_steps(rec, net, [s])
        rec.flush()
    for i in range(255):  # with the next new layout the ids start over ...
        rec.writer.layout_id(("not a real layout", i))
    inputs |= record_steps(rec, net, [4], batch=7)  # ... and id 0 names its layout now
    rec.flush()
    inputs |= record_steps(rec, net, [5, 6, 7])
    rec.finalize()
    g = open_group(tmp_path / "g")
    for s in (4, 5, 6, 7):
        got = g.read_tensor("t", s, 0, "x", "x", "forward", "batch_mean").values
        np.testing.assert_allclose(got, inputs[s].detach().mean(0).numpy(), rtol=1e-5, atol=1e-6)


def test_slots_keep_their_segments_and_later_slots_start_at_the_size_needed(tmp_path):
    """New shared memory is expensive for the training thread, so: the first recorded
    step, which does not know its size, overflows into more segments and its slot keeps
    them; the other slot starts with one segment as large as that step needed; nothing
    is reallocated afterwards, and every step's values come back intact."""
    from comgra_like.transport.shm import MIN_SEGMENT

    net = torch.nn.Linear(600, 600)  # 360,600 parameter values: more than MIN_SEGMENT
    assert sum(p.numel() for p in net.parameters()) > MIN_SEGMENT
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(8)))
    rec.track_module("net", net)
    writer = rec.writer
    inputs = record_steps(rec, net, [0], batch=4, width=600)
    [a] = [slot for slot in writer.slots.slots if slot.segments]  # the slot of step 0
    inputs.update(record_steps(rec, net, [1], batch=4, width=600))
    [b] = [slot for slot in writer.slots.slots if slot is not a]  # both slots in flight now
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
