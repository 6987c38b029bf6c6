"""The flight recorder armed through the Lightning callback, on a real Trainer run (CPU,
a tiny module): a NaN made at one training step fires at that step (validation passes
and the sanity check are no steps), the window is in the trial, the finder names the
module, and keep_state keeps the optimizer Lightning configured, for the replay."""

from __future__ import annotations

import torch

from comgra_like import FlightRecorder
from comgra_like.analysis import find
from comgra_like.integrations.lightning import ComgraCallback
from comgra_like.query.flight import list_flight_triggers

from .lightning_models import Tiny, data, trainer

BAD_STEP = 7


class Poisoned(Tiny):
    """Tiny whose first layer's output gets a NaN at training step BAD_STEP."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step == BAD_STEP:
            x = x.clone()
            x[0, 0] = float("nan")
        return torch.nn.functional.cross_entropy(self(x), y)


def test_a_nan_at_one_step_fires_there_through_the_lightning_callback(tmp_path):
    torch.manual_seed(0)
    model = Poisoned()
    flight = FlightRecorder(window=8, after=2, keep_state=True)
    callback = ComgraCallback(log_freq=1000, flight_recorder=flight)
    trainer(tmp_path, [callback], max_steps=10).fit(model, data(48, 1), data(16, 2))

    assert [(f["kind"], f["step"]) for f in flight.fired] == [("non_finite", BAD_STEP)]
    assert flight.fired[0]["tensor"] == "model.first output 0"
    assert [type(o).__name__ for o in flight.state.optimizers] == ["AdamW"]
    group, trial = callback.handle.group_path, callback.handle.trial_id
    (trigger,) = list_flight_triggers(group, trial)
    assert trigger.step == BAD_STEP and trigger.window[1] == BAD_STEP
    assert trigger.window[1] - trigger.window[0] + 1 == 8  # every step, none recorded
    finding = next(f for f in find(group, trial) if f.kind == "flight_non_finite")
    assert finding.node == "model.first" and finding.steps[0] == BAD_STEP


class Spiking(Tiny):
    """Tiny whose loss is 50 times as large at training step SPIKE_STEP (one bad batch)."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss * 50 if self.global_step == SPIKE_STEP else loss


SPIKE_STEP = 9


def test_the_training_steps_loss_reaches_the_loss_spike_trigger(tmp_path):
    torch.manual_seed(0)
    flight = FlightRecorder(window=8, after=0, warmup=4, triggers=("loss_spike",))
    callback = ComgraCallback(log_freq=1000, flight_recorder=flight)
    trainer(tmp_path, [callback], max_steps=12).fit(Spiking(), data(48, 1), data(16, 2))
    assert [(f["kind"], f["step"]) for f in flight.fired] == [("loss_spike", SPIKE_STEP)]
    assert flight.fired[0]["value"] > 10 * flight.fired[0]["median"]
