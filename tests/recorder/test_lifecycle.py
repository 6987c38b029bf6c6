"""The recorder's lifecycle, published (record/lifecycle.py): the stage and step as
read-only properties, the step events in order, request_recording() for the steps a
driver wants in full, and watch() following a request on its own steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import comgra_like
from comgra_like.errors import CallOrderError, ConfigurationError
from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.query import open_group
from comgra_like.record.lifecycle import Stage, StepEvent, StepListener
from comgra_like.recorder import ComgraRecorder


class Events(StepListener):
    def __init__(self):
        self.seen: list[tuple] = []

    def on_step_start(self, event: StepEvent) -> None:
        self.seen.append(("start", event.training_step, event.recording))

    def on_step_end(self, event: StepEvent) -> None:
        self.seen.append(("end", event.training_step, event.recording))

    def on_step_dropped(self, event: StepEvent) -> None:
        self.seen.append(("dropped", event.training_step, event.recording))

    def on_finalize(self) -> None:
        self.seen.append(("finalize",))


def recorder(tmp_path, every: int = 3) -> ComgraRecorder:
    return ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(every))


def one_step(rec: ComgraRecorder, model: nn.Module, step: int, seen: list | None = None):
    rec.start_batch(step, 4)
    if seen is not None:
        seen.append((rec.stage, rec.is_recording, rec.current_batch_size,
                     rec.current_step is not None))
    rec.start_iteration()
    assert rec.stage == Stage.ITERATION
    x = torch.randn(4, 3)
    rec.register_tensor("x", x, is_input=True)
    loss = model(x).pow(2).mean()
    rec.register_tensor("loss", loss, is_loss=True)
    loss.backward()
    rec.record_current_gradients("g")
    rec.finish_iteration()
    rec.finish_batch()


def test_events_and_properties_follow_the_steps(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    rec = recorder(tmp_path)
    rec.track_module("m", model)
    assert rec.tracked_name(model) == "m" and rec.tracked_name(nn.Linear(1, 1)) is None
    events = Events()
    unsubscribe = rec.subscribe(events)
    inside: list = []
    assert rec.stage == Stage.IDLE and rec.stage == "idle" and not rec.is_recording
    for step in range(4):
        one_step(rec, model, step, inside)
    # steps 0 and 3 are recorded (every 3rd): the events say so
    assert events.seen == [("start", 0, True), ("end", 0, True), ("start", 1, False),
                           ("end", 1, False), ("start", 2, False), ("end", 2, False),
                           ("start", 3, True), ("end", 3, True)]
    assert inside == [(Stage.BATCH, True, 4, True), (Stage.BATCH, False, 0, False),
                      (Stage.BATCH, False, 0, False), (Stage.BATCH, True, 4, True)]
    assert rec.recorded_steps == 2 and rec.stage == Stage.IDLE
    rec.start_batch(4, 4)
    assert rec.abort_batch()
    assert events.seen[-2:] == [("start", 4, False), ("dropped", 4, False)]
    unsubscribe()
    one_step(rec, model, 5)
    assert len(events.seen) == 10  # no more events after unsubscribing
    rec.subscribe(events)
    rec.finalize()
    assert events.seen[-1] == ("finalize",) and rec.finalized


def test_request_recording_records_the_next_steps(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    rec = recorder(tmp_path, every=1000)
    rec.track_module("m", model)
    one_step(rec, model, 0)  # recorded: the decision maker records the first step
    rec.request_recording(2)
    for step in range(1, 6):
        one_step(rec, model, step)
    rec.finalize()
    steps = sorted(open_group(tmp_path / "g").read_statistics("t")["training_step"].unique())
    assert steps == [0, 1, 2]
    with pytest.raises(ConfigurationError, match="non-negative int"):
        rec.request_recording(-1)


def test_a_listener_must_subclass_step_listener(tmp_path):
    rec = recorder(tmp_path)
    with pytest.raises(ConfigurationError, match="StepListener"):
        rec.subscribe(object())
    rec.finalize()


def test_watch_records_a_requested_step_between_its_own(tmp_path):
    """watch() decides its steps itself (log_freq); a request is honoured there too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = comgra_like.watch(model, log_freq=100, standalone_dir=tmp_path, trial_id="w",
                               verbose=False)
    for step in range(6):
        if step == 2:
            handle.recorder.request_recording(1)
        loss = model(torch.randn(8, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    handle.unwatch()
    handle.recorder.finalize()
    steps = sorted(open_group(tmp_path).read_statistics("w")["training_step"].unique())
    # step 0 by log_freq; the request made before step 2's forward records step 2
    assert steps == [0, 2]


def test_the_stage_reads_in_error_messages_as_before(tmp_path):
    rec = recorder(tmp_path)
    rec.track_module("m", nn.Linear(3, 1))
    with pytest.raises(CallOrderError, match=r"stage 'idle'"):
        rec.finish_iteration()
    rec.finalize()
