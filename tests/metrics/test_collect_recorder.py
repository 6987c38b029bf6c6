"""Metrics of a ComgraRecorder's tracked modules (track_module(..., metrics=...)) and of
watch(model, recorder=..., metrics=...): the recorder's steps, on the metrics' own
schedule, whether or not the recorder records the step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comgra_like import open_group, watch
from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.recorder import ComgraRecorder


def _loop(rec, net, steps, out):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in steps:
        x = torch.randn(4, 3)
        rec.start_batch(step, 4)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        y = net(x)
        rec.register_tensor("y", y)
        loss = y.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_iteration()
        rec.finish_batch()
        out[step] = (x, net[0].weight.detach().clone())


def test_track_module_metrics_follow_the_recorders_steps(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(5))
    rec.track_module("net", net, metrics={"0": [["InputSndNorm", "linear(2, 1)"],
                                                ["WeightNorm", "linear(2, 1)"]]})
    seen: dict = {}
    _loop(rec, net, range(0, 14, 2), seen)  # the recorder's steps: 0, 2, ..., 12
    rec.finalize()
    group = open_group(tmp_path / "g")
    frame = group.read_metrics("t", module="net.0")
    # linear(2, 1) names odd steps only, and the loop has none: no metric rows
    assert frame.empty
    rec2 = ComgraRecorder(tmp_path, "g", "t2", DecisionMakerForRecordingsFrequencyPerType(5))
    rec2.track_module("net", net, metrics={"0": [["InputSndNorm", "linear(3, 1)"],
                                                 ["WeightNorm", "linear(3, 1)"]]})
    seen = {}
    _loop(rec2, net, range(10), seen)
    rec2.finalize()
    group.refresh()
    frame = group.read_metrics("t2", module="net.0")
    recorded = sorted(group.list_steps("t2")["training_step"].unique())
    assert recorded == [0, 5]  # the recorder records other steps than the metrics
    norms = frame[frame.metric == "InputSndNorm"]
    assert list(norms.training_step) == [1, 4, 7]
    for step, value in zip(norms.training_step, norms.value):
        assert value == pytest.approx(float(seen[step][0].double().norm()), rel=1e-12)
    weights = frame[frame.metric == "WeightNorm"]
    # read when the step ends: after the optimizer's update of that step
    for step, value in zip(weights.training_step, weights.value):
        assert value == pytest.approx(float(seen[step][1].double().norm()), rel=1e-12)


def test_watch_with_a_recorder_and_metrics(tmp_path):
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(4))
    rec.track_module("net", net)
    handle = watch(net, recorder=rec, verbose=False,
                   metrics={nn.Linear: [["OutputGradSndNorm", "linear(2, 0)"]]})
    seen: dict = {}
    _loop(rec, net, range(6), seen)
    handle.unwatch()
    rec.finalize()
    frame = open_group(tmp_path / "g").read_metrics("t")
    assert sorted(set(frame.module)) == ["net.0", "net.2"]
    assert sorted(set(frame.training_step)) == [0, 2, 4]
    assert len(frame) == 6 and (frame.value > 0).all()
