"""Taiyi's entry point: Monitor(model, config), track(step) after backward(),
get_output() -> {module_name: {quantity: {step: value}}}, recorded into a group folder
the GUI and the query API open."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like import Monitor, open_group
from comgra_like.errors import ConfigurationError


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc2(torch.relu(self.fc1(x)))


def test_monitor_like_taiyi(tmp_path):
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    config = {"fc1": ["InputSndNorm", "OutputGradSndNorm"],
              "Conv2d": [["WeightNorm", "linear(5, 0)"]],
              nn.BatchNorm2d: [["MeanTID", "linear(5,0)"], "InputSndNorm"],
              "fc2": [["InputCovSpectrum", "linear(3, 2)"]]}
    monitor = Monitor(model, config, path=str(tmp_path / "taiyi"), trial_id="run")
    inputs, conv_weights = {}, {}
    hook = model.fc1.register_forward_pre_hook(
        lambda m, a: inputs.__setitem__(len(inputs), a[0].detach().clone()) if m.training
        else None)
    for step in range(11):
        y = model(torch.randn(16, 1, 6, 6))
        loss = y.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        conv_weights[step] = model.conv.weight.detach().clone()
        monitor.track(step, loss=loss)
        opt.step()
        if step == 4:  # an eval pass between steps changes nothing
            model.eval()
            model(torch.randn(3, 1, 6, 6))
            model.train()
    hook.remove()
    out = monitor.get_output()
    assert set(out) == {"fc1", "conv", "bn", "fc2", ""}
    assert set(out["fc1"]) == {"InputSndNorm", "OutputGradSndNorm"}
    assert sorted(out["conv"]["WeightNorm"]) == [0, 5, 10]
    assert sorted(out["bn"]["MeanTID"]) == [0, 5, 10]
    assert sorted(out["fc2"]["InputCovSpectrum"]) == [2, 5, 8]
    assert isinstance(out["fc2"]["InputCovSpectrum"][2], np.ndarray)
    assert sorted(out[""]["loss"]) == list(range(11))
    for step in range(11):
        assert out["fc1"]["InputSndNorm"][step] == pytest.approx(
            float(inputs[step].double().norm()), rel=1e-12)
    # weights are read at track(), before the optimizer's step (as Taiyi reads them)
    for step in (0, 5, 10):
        assert out["conv"]["WeightNorm"][step] == pytest.approx(
            float(conv_weights[step].double().norm()), rel=1e-12)
    monitor.close()
    # the same numbers from the store, in a finished trial the GUI opens
    group = open_group(tmp_path / "taiyi")
    assert [t.trial_id for t in group.list_trials()] == ["run"]
    status = json.loads((tmp_path / "taiyi" / "trials" / "run" / "trial.json").read_text())
    assert status["status"] == "finished"
    frame = group.read_metrics("run", module="model.fc1", metric="InputSndNorm")
    assert list(frame.value) == [out["fc1"]["InputSndNorm"][s] for s in range(11)]
    assert monitor.get_output()["conv"] == out["conv"]  # readable after close
    # no hook left
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_monitor_steps_that_skip_numbers_and_bad_input(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(ConfigurationError, match="matches no module"):
        Monitor(model, {"fc9": ["WeightNorm"]}, path=str(tmp_path / "m"))
    monitor = Monitor(model, {"0": ["InputSndNorm", "WeightGradNorm"]},
                      path=str(tmp_path / "m"), trial_id="skip")
    x = torch.randn(5, 3)
    for step in (0, 10, 20):  # Taiyi users may track every 10th global step
        model(x).sum().backward()
        monitor.track(step)
        model.zero_grad()
    with pytest.raises(ConfigurationError, match="must be an integer"):
        monitor.track("3")
    out = monitor.get_output()
    # step 0 as expected; 10 and 20 were not the step the hooks expected (1, 11): their
    # input was not this step's, so only what track() can read is computed
    assert sorted(out["0"]["InputSndNorm"]) == [0]
    assert sorted(out["0"]["WeightGradNorm"]) == [0, 10, 20]
    monitor.close()
