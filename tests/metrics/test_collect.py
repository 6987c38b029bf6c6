"""watch(model, metrics=...) in real training loops: the stored numbers equal the
quantities' math (comgra_like.metrics.quantities) applied to tensors the test captures
with hooks of its own, and torch's own formulas; schedules, several backward passes,
eval-mode passes, unwatch and bitwise-identical training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like import open_group, watch
from comgra_like.metrics.quantities import QUANTITIES, ModuleData


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.bn = nn.BatchNorm2d(5)
        self.act = nn.ReLU(inplace=True)  # changes the BN output in place
        self.fc = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc(self.act(self.bn(self.conv(x))).mean(dim=(2, 3)))


class Spy:
    """The test's own capture: inputs, outputs, output gradients per backward pass of
    the modules it is given, in training-mode forwards of one step at a time."""

    def __init__(self, modules: dict[str, nn.Module]):
        self.handles = []
        self.step: dict[str, dict] = {}
        self.bn: dict[str, list] = {}
        for name, m in modules.items():
            self.handles.append(m.register_forward_pre_hook(self._pre(name)))
            self.handles.append(m.register_forward_hook(self._post(name)))

    def new_step(self) -> None:
        self.step = {}

    def _pre(self, name):
        def pre(module, args):
            if module.training:
                x = args[0].detach().clone()
                self.step.setdefault(name, {"grads": []})["input"] = x
                if isinstance(module, nn.BatchNorm2d):
                    self.bn.setdefault(name, []).append(
                        (x.mean(dim=[0, 2, 3]), x.var(dim=[0, 2, 3], unbiased=True)))
        return pre

    def _post(self, name):
        def post(module, args, output):
            if module.training:
                entry = self.step[name]
                entry["output"] = output.detach().clone()
                if output.requires_grad:
                    output.register_hook(lambda g: entry["grads"].append(g.detach().clone()))
        return post

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _stored(group_dir, trial="t"):
    frame = open_group(group_dir).read_metrics(trial)
    return {(r.module, r.metric, int(r.training_step), int(r.backward_pass)): r.value
            for r in frame.itertuples()}


@pytest.mark.parametrize("transport", ["process", "thread"])
def test_mlp_values_equal_the_math_on_independent_captures(tmp_path, monkeypatch, transport):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", transport)
    torch.manual_seed(0)
    net = MLP()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    config = {"fc1": ["InputSndNorm", "InputCovMaxEig", "InputCovCondition50", "RankMe",
                      ["WeightNorm", "linear(3, 1)"], "WeightParamJump"],
              "Linear": ["OutputGradSndNorm", "WeightGradNorm", "LinearDeadNeuronNum"],
              "fc2": ["InputCovSpectrum", "OutputGradCorrelation"]}
    handle = watch(net, log_freq=4, standalone_dir=str(tmp_path / "g"), trial_id="t",
                   verbose=False, metrics=config)
    spy = Spy({"model.fc1": net.fc1, "model.fc2": net.fc2})
    expected: dict = {}
    states: dict = {}

    def expect(module, cls, name, step, data, backward=0):
        q = QUANTITIES[name]
        value = q.compute(data, states.setdefault((module, name), {}))
        expected[(module, name, step, backward)] = float(np.ravel(value)[0])

    for step in range(7):
        spy.new_step()
        x = torch.randn(32, 6)
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        loss.backward()
        grads = {n: m.weight.grad.detach().clone() for n, m in
                 (("model.fc1", net.fc1), ("model.fc2", net.fc2))}
        opt.step()
        if step % 2 == 0:  # eval-mode passes: neither a step nor a capture
            net.eval()
            with torch.no_grad():
                net(torch.randn(5, 6) * 100)
            net.train()
        for module, m in (("model.fc1", net.fc1), ("model.fc2", net.fc2)):
            s = spy.step[module]
            data = ModuleData("Linear", input=_np(s["input"]), output=_np(s["output"]),
                              weight=_np(m.weight), weight_grad=_np(grads[module]))
            names = ["WeightGradNorm", "LinearDeadNeuronNum"]
            if module == "model.fc1":
                names += ["InputSndNorm", "InputCovMaxEig", "InputCovCondition50", "RankMe",
                          "WeightParamJump"]
                if step % 3 == 1:
                    names.append("WeightNorm")
            else:
                names.append("InputCovSpectrum")
            for name in names:
                expect(module, "Linear", name, step, data)
            assert len(s["grads"]) == 1
            for name in ["OutputGradSndNorm"] + (
                    ["OutputGradCorrelation"] if module == "model.fc2" else []):
                data.output_grad = _np(s["grads"][0])
                expect(module, "Linear", name, step, data)
        # torch's own formulas for two of them
        assert expected[("model.fc1", "InputSndNorm", step, 0)] == pytest.approx(
            float(torch.linalg.vector_norm(spy.step["model.fc1"]["input"].double())), rel=1e-12)
        assert expected[("model.fc1", "InputCovMaxEig", step, 0)] == pytest.approx(
            float(torch.linalg.eigvalsh(torch.cov(spy.step["model.fc1"]["input"].double().T))
                  [-1]), rel=1e-9)
    handle.unwatch()
    spy.remove()
    stored = _stored(tmp_path / "g")
    assert set(stored) == set(expected)
    for key, value in expected.items():
        if np.isnan(value):
            assert np.isnan(stored[key]), key
        else:
            assert stored[key] == pytest.approx(value, rel=1e-12, abs=1e-300), key
    # the schedule linear(3, 1): steps 1, 4 only (of 0..6)
    assert sorted(k[2] for k in stored if k[1] == "WeightNorm") == [1, 4]
    vectors = open_group(tmp_path / "g").read_metrics("t", metric="InputCovSpectrum")
    assert all(isinstance(v, np.ndarray) and v.size >= 1 for v in vectors.vector)


def test_cnn_with_batchnorm_tid_and_conv_covariance(tmp_path):
    torch.manual_seed(1)
    net = CNN()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    config = {"Conv2d": [["InputCovMaxEig", "linear(2, 0)"], "WeightNorm", "OutputRMS"],
              nn.BatchNorm2d: [["MeanTID", "linear(3, 0)"], ["VarTID", "linear(3, 0)"],
                               "InputSndNorm", "OutputNorm"]}
    handle = watch(net, log_freq=1000, standalone_dir=str(tmp_path / "g"), trial_id="t",
                   verbose=False, metrics=config)
    spy = Spy({"model.conv": net.conv, "model.bn": net.bn})
    expected: dict = {}
    states: dict = {}
    bn_since = 0
    for step in range(7):
        spy.new_step()
        x = torch.randn(8, 3, 6, 6)
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
        conv, bn = spy.step["model.conv"], spy.step["model.bn"]
        cdata = ModuleData("Conv2d", input=_np(conv["input"]), output=_np(conv["output"]),
                           weight=_np(net.conv.weight))
        names = ["WeightNorm", "OutputRMS"] + (["InputCovMaxEig"] if step % 2 == 0 else [])
        for name in names:
            expected[("model.conv", name, step)] = float(
                QUANTITIES[name].compute(cdata, states.setdefault(("conv", name), {})))
        rows = spy.bn["model.bn"][bn_since:]
        bdata = ModuleData(
            "BatchNorm2d", input=_np(bn["input"]), output=_np(bn["output"]),
            extra={"bn_running_mean": _np(net.bn.running_mean),
                   "bn_running_var": _np(net.bn.running_var),
                   "bn_batch_mean": _np(torch.stack([r[0] for r in rows])),
                   "bn_batch_var": _np(torch.stack([r[1] for r in rows]))})
        names = ["InputSndNorm", "OutputNorm"] + (["MeanTID", "VarTID"] if step % 3 == 0
                                                  else [])
        if step % 3 == 0:
            bn_since = len(spy.bn["model.bn"])
        for name in names:
            expected[("model.bn", name, step)] = float(
                QUANTITIES[name].compute(bdata, states.setdefault(("bn", name), {})))
    handle.unwatch()
    spy.remove()
    stored = {k[:3]: v for k, v in _stored(tmp_path / "g").items()}
    assert set(stored) == set(expected)
    for key, value in expected.items():
        # the BN statistics come from the batch norm's own autograd node (float32 mean
        # and 1/sqrt(var + eps)), the test's from torch's mean and var of the input
        rel = 1e-5 if key[1] in ("MeanTID", "VarTID") else 1e-12
        assert stored[key] == pytest.approx(value, rel=rel), key
    assert sorted(k[2] for k in stored if k[1] == "MeanTID") == [0, 3, 6]
    # the BN output was captured before ReLU(inplace=True) changed it: it has negatives
    assert expected[("model.bn", "OutputNorm", 0)] > 0


def test_several_backward_passes_per_step(tmp_path):
    torch.manual_seed(2)
    net = MLP()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    handle = watch(net, log_freq=1000, standalone_dir=str(tmp_path / "g"), trial_id="t",
                   verbose=False, metrics={"fc2": ["OutputGradSndNorm", "WeightGradNorm"]})
    spy = Spy({"model.fc2": net.fc2})
    grads_after = []
    for _step in range(3):
        spy.new_step()
        opt.zero_grad()
        out = net(torch.randn(16, 6))
        out.pow(2).mean().backward(retain_graph=True)  # two losses, two backward passes
        out.abs().sum().backward()
        grads_after.append(net.fc2.weight.grad.detach().clone())
        opt.step()
        spy.step["model.fc2"]["passes"] = list(spy.step["model.fc2"]["grads"])
        assert len(spy.step["model.fc2"]["grads"]) == 2
        if _step == 0:
            first = spy.step["model.fc2"]["grads"]
    handle.unwatch()
    spy.remove()
    stored = _stored(tmp_path / "g")
    assert sorted(k[2:] for k in stored if k[1] == "OutputGradSndNorm") == [
        (s, b) for s in range(3) for b in (0, 1)]
    for b in (0, 1):
        assert stored[("model.fc2", "OutputGradSndNorm", 0, b)] == pytest.approx(
            float(torch.linalg.vector_norm(first[b].double())), rel=1e-12)
    # the weight gradient after the last pass (accumulated over both)
    for s in range(3):
        assert stored[("model.fc2", "WeightGradNorm", s, 0)] == pytest.approx(
            float(torch.linalg.vector_norm(grads_after[s].double())), rel=1e-12)


def _train(net, steps, seed, metrics=None, tmp=None):
    torch.manual_seed(seed)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    handle = None
    if metrics is not None:
        handle = watch(net, log_freq=3, standalone_dir=str(tmp / "g"), trial_id="t",
                       verbose=False, metrics=metrics)
    for _ in range(steps):
        opt.zero_grad()
        loss = net(torch.randn(8, 3, 6, 6)).pow(2).mean()
        loss.backward()
        if handle is not None:
            handle.log_loss(loss)
        opt.step()
    if handle is not None:
        handle.unwatch()
    return [p.detach().clone() for p in net.parameters()] + [
        b.detach().clone() for b in net.buffers()]


def test_training_is_bitwise_identical_and_unwatch_removes_every_hook(tmp_path):
    torch.manual_seed(5)
    a = CNN()
    b = CNN()
    b.load_state_dict(a.state_dict())
    before = {n: (len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in
              b.named_modules()}
    config = {nn.Module: ["InputSndNorm", "OutputNorm"],
              "Conv2d": ["InputCovCondition", "OutputGradCovMaxEig", "WeightGradNorm"],
              "bn": [["MeanTID", "linear(2, 0)"], "WeightUpdateNorm"]}
    plain = _train(a, 6, seed=9)
    watched = _train(b, 6, seed=9, metrics=config, tmp=tmp_path)
    for x, y in zip(plain, watched):
        assert torch.equal(x, y)
    after = {n: (len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in
             b.named_modules()}
    assert after == before
    stored = _stored(tmp_path / "g")
    assert sorted(k[2] for k in stored if k[1] == "loss") == list(range(6))
    assert sorted(k[2] for k in stored if k[1] == "MeanTID") == [0, 2, 4]


def test_metric_data_inline_arrays_survive_the_json_line(tmp_path):
    """Without a shared-memory file (thread transport, or a full /dev/shm) the arrays go
    in the message itself: base64 on the wire."""
    from comgra_like import protocol
    from comgra_like.format.layout import METRICS
    from comgra_like.writer.metrics import Metrics

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = protocol.MetricData(7, "training", 1.5, [
        ["model.fc", "Linear", ["InputSndNorm", "InputCovSpectrum"],
         {"input": ["<f4", [3, 4], memoryview(x).cast("B")]}]],
        [[7, "model", "Net", "loss", 0, None, 1.25]])
    line = msg.encode()
    decoded = protocol.decode(line)
    assert isinstance(decoded, protocol.MetricData) and decoded.path is None
    table = Metrics("t").table(decoded)[METRICS].to_pylist()
    by_metric = {r["metric"]: r for r in table}
    assert by_metric["InputSndNorm"]["value"] == pytest.approx(float(np.linalg.norm(x)))
    assert by_metric["InputSndNorm"]["training_step"] == 7
    assert len(by_metric["InputCovSpectrum"]["vector"]) >= 1
    assert np.isnan(by_metric["loss"]["value"]) and by_metric["loss"]["wall_time"] == 1.25
