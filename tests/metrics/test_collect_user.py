"""User metrics (a class with name, needs and compute, passed in the config): computed in
the training process on real training, stored with the other metrics."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comgra_like import open_group, watch
from comgra_like.errors import ConfigurationError
from comgra_like.metrics import UserMetric


class OutputKurtosis(UserMetric):
    name = "OutputKurtosis"
    needs = ("output",)

    def compute(self, data):
        y = data["output"].flatten().double()
        z = (y - y.mean()) / y.std()
        return float((z ** 4).mean())


class UpdateToWeight(UserMetric):
    """A stateful one: counts its calls on self, and uses the update."""

    name = "UpdateToWeight"
    needs = ("update", "weight")

    def __init__(self):
        self.calls = 0

    def compute(self, data):
        self.calls += 1
        return float(data["update"].norm() / data["weight"].norm()) + 1000 * self.calls


class LossPerPass(UserMetric):
    name = "GradAbsMeanPerPass"
    needs = ("output_grad", "loss")

    def compute(self, data):
        return data["output_grad"].abs().mean() * 0 + data["loss"]  # a one-element tensor


def test_user_metrics_in_a_training_loop(tmp_path):
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    handle = watch(net, log_freq=100, standalone_dir=str(tmp_path / "g"), trial_id="t",
                   verbose=False,
                   metrics={"0": [OutputKurtosis, [UpdateToWeight, "linear(2, 0)"]],
                            "2": [LossPerPass]})
    outputs, weights, losses = {}, {}, {}
    h = net[0].register_forward_hook(
        lambda m, a, out: outputs.__setitem__(len(outputs), out.detach().clone()))
    for step in range(6):
        opt.zero_grad()
        out = net(torch.randn(32, 4))
        loss = out.pow(2).mean()
        loss.backward(retain_graph=True)
        out.sum().backward()  # a second backward pass
        handle.log_loss(loss)
        losses[step] = loss.item()
        opt.step()
        weights[step] = net[0].weight.detach().clone()
    handle.unwatch()
    h.remove()
    frame = open_group(tmp_path / "g").read_metrics("t")
    kurt = frame[frame.metric == "OutputKurtosis"]
    assert list(kurt.training_step) == list(range(6))
    for step, value in zip(kurt.training_step, kurt.value):
        y = outputs[step].flatten().double()
        z = (y - y.mean()) / y.std()
        assert value == pytest.approx(float((z ** 4).mean()), rel=1e-12)
    upd = frame[frame.metric == "UpdateToWeight"]
    # the first computation (step 0) has no earlier weight: no update, no row
    assert list(upd.training_step) == [2, 4]
    for calls, (step, value) in enumerate(zip(upd.training_step, upd.value), start=1):
        expected = float((weights[step] - weights[step - 2]).norm() / weights[step].norm())
        assert value == pytest.approx(expected + 1000 * calls, rel=1e-9)
    per_pass = frame[frame.metric == "GradAbsMeanPerPass"]
    assert len(per_pass) == 12 and set(per_pass.backward_pass) == {0, 1}
    for step, value in zip(per_pass.training_step, per_pass.value):
        assert value == pytest.approx(losses[step], rel=1e-6)
    loss_rows = frame[frame.metric == "loss"]
    assert list(loss_rows.module) == ["model"] * 6 and list(loss_rows.module_class) == [
        "Sequential"] * 6


class Wrong(UserMetric):
    name = "Wrong"
    needs = ("output",)

    def compute(self, data):
        return data["output"]  # a whole tensor, not a number


def test_a_user_metric_returning_no_number_is_a_clear_error(tmp_path, caplog):
    net = nn.Sequential(nn.Linear(2, 3))
    handle = watch(net, log_freq=100, standalone_dir=str(tmp_path / "g"), trial_id="t",
                   verbose=False, metrics={"0": [Wrong]})
    net(torch.randn(4, 2)).sum().backward()
    # the next step sends the first: compute() runs then; inside the training forward
    # the error is logged once (with the hooks' other failures) and training goes on
    with caplog.at_level("WARNING", logger="comgra_like"):
        net(torch.randn(4, 2))
        net(torch.randn(4, 2))
    handle.unwatch()
    errors = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(errors) == 1
    assert "'Wrong' returned a tensor of shape (4, 3)" in errors[0].getMessage()
    assert isinstance(errors[0].exc_info[1], ConfigurationError)
