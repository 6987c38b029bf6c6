"""The flight recorder armed through the Hugging Face Trainer callback (a tiny BERT from a
configuration, CPU): with gradient accumulation its steps are the Trainer's optimizer
steps, the trial's steps; the model's own loss is judged; a healthy run fires nothing;
training stays bitwise the same."""

from __future__ import annotations

import torch

from comgra_like import FlightRecorder
from comgra_like.integrations.huggingface import ComgraCallback
from comgra_like.query import open_group

from .hf_models import train


def test_accumulating_trainer_steps_are_the_flight_recorders_and_a_healthy_run_is_silent(
        tmp_path):
    settings = {"max_steps": 6, "gradient_accumulation_steps": 2}
    plain, _ = train(tmp_path / "plain", **settings)
    losses: list = []
    flight = FlightRecorder(window=16, warmup=2, predicate=lambda s: losses.append(s.loss))
    callback = ComgraCallback(log_freq=2, flight_recorder=flight)
    watched, trainer = train(tmp_path / "watched", [callback], **settings)
    assert trainer.state.global_step == 6
    for (name, a), b in zip(plain.state_dict().items(), watched.state_dict().values()):
        assert torch.equal(a, b), name
    assert flight.steps_kept() == list(range(6))  # 12 micro-batches, 6 steps
    g = open_group(callback.handle.group_path)
    recorded = sorted(set(g.read_statistics(callback.handle.trial_id)["training_step"]))
    assert recorded == [0, 2, 4]
    assert flight.fired == []  # spikes judged from the third step on: none
    # the model's own loss (its ModelOutput's) is the flight recorder's loss: the mean of
    # the step's two micro-batches
    assert len(losses) == 6 and all(0 < v < 10 for v in losses)
