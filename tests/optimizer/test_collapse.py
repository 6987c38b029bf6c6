"""The finder's ``optimizer_second_moment_collapse`` (analysis/optimizer.py) on a real
training loop recorded with ``watch(model, optimizer=opt)``: an auxiliary head whose loss
is switched off after a few steps (its weight set to 0) keeps getting an all-zero
gradient, so Adam's second moment of that head decays by beta2 every step while the head
is still stepped. beta2 = 0.9 makes the collapse below 1e-6 of the peak take about 130
steps (0.9**131 < 1e-6) instead of about 13800 with the default 0.999. The same loop
with the auxiliary loss kept on raises nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import comgra_like
from comgra_like.analysis import TrialData, find
from comgra_like.analysis import optimizer as detector
from comgra_like.query import open_group

STEPS, SWITCH_OFF, LOG_FREQ = 161, 12, 10
AUX = {"model.aux.weight", "model.aux.bias"}


class WithAuxiliary(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)
        self.aux = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.head(h), self.aux(h)


def _train(tmp_path, aux_off: bool, amsgrad: bool = False):
    torch.manual_seed(0)
    net = WithAuxiliary()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.9), amsgrad=amsgrad)
    handle = comgra_like.watch(net, optimizer=opt, standalone_dir=str(tmp_path / "w"),
                               trial_id="t", verbose=False, log_freq=LOG_FREQ)
    g = torch.Generator().manual_seed(1)
    v_aux = []
    for step in range(STEPS):
        x = torch.randn(5, 6, generator=g)
        y, z = torch.randn(5, 3, generator=g), torch.randn(5, 1, generator=g)
        out, aux = net(x)
        weight = 0.0 if aux_off and step >= SWITCH_OFF else 1.0
        loss = nn.functional.mse_loss(out, y) + weight * nn.functional.mse_loss(aux, z)
        loss.backward()
        opt.step()
        opt.zero_grad()
        v_aux.append(float(opt.state[net.aux.weight]["exp_avg_sq"].mean()))
    handle.unwatch()
    return open_group(handle.group_path), net, np.array(v_aux)


def test_a_collapsing_second_moment_is_named(tmp_path):
    group, _, v_aux = _train(tmp_path, aux_off=True)
    recorded = list(range(0, STEPS, LOG_FREQ))
    # what the loop did: the head's gradient is 0 and Adam still steps it
    assert v_aux[-1] < 1e-6 * v_aux[:SWITCH_OFF].max()
    found = [f for f in find(group, "t") if f.kind == detector.COLLAPSE_KIND]
    assert {f.numbers["parameter"] for f in found} == AUX, [f.explanation for f in found]
    frame = group.read_optimizer_state("t", quantities="exp_avg_sq_mean")
    for f in found:
        rows = frame[frame.parameter == f.numbers["parameter"]].sort_values("training_step")
        assert rows.training_step.tolist() == recorded
        values = rows.value.to_numpy()
        assert f.numbers["peak_exp_avg_sq_mean"] == values.max()
        assert f.numbers["last_exp_avg_sq_mean"] == values[-1]
        assert values[-1] < detector.COLLAPSE * values.max()
        # the steps named are the recorded ones below the threshold: all after the switch
        below = rows.training_step[values < detector.COLLAPSE * values.max()].tolist()
        assert list(f.steps) == below and below and min(below) > SWITCH_OFF
        assert f.severity == "warning"
        assert (f.node, f.role) == ("model.aux", f.numbers["parameter"].rpartition(".")[2])
        assert f.where["statistic"] == "optimizer/exp_avg_sq_mean"
        assert "collapsed" in f.explanation and "towards lr / eps" in f.explanation
        # the step size it names grew (Adam divides by the collapsing moment)
        assert f.numbers["last_step_size_mean"] > 100 * f.numbers["step_size_mean_at_peak"]
    # the last recorded value is Adam's own state at that step
    weight = frame[(frame.parameter == "model.aux.weight")].sort_values("training_step")
    assert weight.value.iloc[-1] == pytest.approx(v_aux[recorded[-1]], rel=1e-5)


def test_with_amsgrad_the_finding_says_the_steps_did_not_grow(tmp_path):
    # amsgrad divides by the running maximum of the second moment: exp_avg_sq still
    # collapses, but the steps stay bounded, and the finding must not say otherwise
    group, _, _ = _train(tmp_path, aux_off=True, amsgrad=True)
    found = [f for f in find(group, "t") if f.kind == detector.COLLAPSE_KIND]
    assert {f.numbers["parameter"] for f in found} == AUX, [f.explanation for f in found]
    sizes = group.read_optimizer_state("t", quantities="step_size_mean")
    for f in found:
        assert "did not grow" in f.explanation and "towards" not in f.explanation, f.explanation
        rows = sizes[sizes.parameter == f.numbers["parameter"]].sort_values("training_step")
        assert f.numbers["last_step_size_mean"] == rows.value.iloc[-1]
        assert f.numbers["last_step_size_mean"] <= 2 * f.numbers["step_size_mean_at_peak"]


def test_the_same_loop_with_the_gradient_kept_raises_nothing(tmp_path):
    group, _, v_aux = _train(tmp_path, aux_off=False)
    assert v_aux[-1] > 1e-3 * v_aux.max()
    found = detector.detect(TrialData(group, "t"))
    assert found == [], [f.explanation for f in found]
