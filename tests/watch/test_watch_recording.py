"""What watch() records: histograms equal numpy's, per-sample gradient norms equal a
direct computation, torchexplorer's sampling and outlier rejection, validation passes,
several backward passes per step, a hand-driven recorder, attach(), the watch report,
the backends and the errors."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
import torch
from torch import nn

import comgra_like
from comgra_like import (
    ComgraRecorder,
    ConfigurationError,
    DecisionMakerForRecordingsFrequencyPerType,
)
from comgra_like.query import open_group
from comgra_like.writer.histograms import sample_values

from .models import MLP, all_hooks


def _watch(model, tmp_path, **kw):
    kw.setdefault("verbose", False)
    return comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t", **kw)


def _row(h, node, role, what):
    rows = h[(h.module == node) & (h.role == role) & (h.what == what)]
    assert len(rows) == 1, (node, role, what, len(rows))
    return rows.iloc[0]


def test_histograms_equal_numpy_and_gradient_norms_a_direct_computation(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    reference = copy.deepcopy(model)
    x = torch.randn(9, 6)
    target = torch.randn(9, 2)
    bins = 7
    handle = _watch(model, tmp_path, log_freq=10, bins=bins, sample_n=None,
                    reject_outlier_proportion=0.0)
    loss = nn.functional.mse_loss(model(x), target)
    loss.backward()
    handle.unwatch()

    hidden = reference.net[0](x)
    hidden.retain_grad()
    out = reference.net[1:](hidden)
    nn.functional.mse_loss(out, target).backward()

    h = open_group(handle.group_path).read_histograms("t", steps=0)
    for what, values in (
        ("io", hidden.detach().numpy().ravel()),
        ("params", reference.net[0].weight.detach().numpy().ravel()),
        ("params_grad", reference.net[0].weight.grad.numpy().ravel()),
    ):
        role = "output 0" if what == "io" else "weight"
        row = _row(h, "model.net.0", role, what)
        counts, edges = np.histogram(values, bins=bins, range=(values.min(), values.max()))
        np.testing.assert_array_equal(row.counts, counts)
        assert (row.lo, row.hi) == (edges[0], edges[-1])
        assert (row.vmin, row.vmax, row.n) == (values.min(), values.max(), values.size)
        assert row.recording_type == ("gradient:backward" if what == "params_grad" else "forward")

    norms = torch.linalg.vector_norm(hidden.grad.double().flatten(1), dim=1).numpy()
    row = _row(h, "model.net.0", "output 0", "io_grad")
    assert row.n == 9
    np.testing.assert_allclose([row.vmin, row.vmax], [norms.min(), norms.max()], rtol=1e-12)
    counts, _ = np.histogram(norms, bins=bins, range=(row.lo, row.hi))
    np.testing.assert_array_equal(row.counts, counts)


def test_sampling_and_outlier_rejection_follow_torchexplorer(tmp_path):
    # reject: the values farthest from the (lower) median go first
    values = np.array([0, 1, 2, 3, 4, 5, 6, 7, 100, -50], dtype=np.float32)
    kept = sample_values(values, None, 0.2, np.random.default_rng(0))
    assert sorted(kept.tolist()) == [0, 1, 2, 3, 4, 5, 6, 7]
    # sample_n values drawn (with replacement) only when the tensor has more
    drawn = sample_values(np.arange(1000, dtype=np.float32), 50, 0.0, np.random.default_rng(0))
    assert drawn.size == 50 and set(drawn.tolist()) <= set(range(1000))
    assert sample_values(values, 50, 0.0, np.random.default_rng(0)).size == values.size

    torch.manual_seed(0)
    model = MLP((6, 16, 2))  # net.0's output: 8 x 16 = 128 values
    handle = _watch(model, tmp_path, log_freq=1, sample_n=40, reject_outlier_proportion=0.25)
    model(torch.randn(8, 6)).sum().backward()
    handle.unwatch()
    h = open_group(handle.group_path).read_histograms("t")
    row = _row(h, "model.net.0", "output 0", "io")
    assert row.n == 30 and row.counts.sum() == 30  # 40 drawn, a quarter rejected
    assert row.vmin <= row.lo and row.hi <= row.vmax  # extremes before sampling
    assert _row(h, "model.net.0", "bias", "params").n == 12  # 16 < 40: all, 4 rejected


def test_validation_passes_are_recorded_as_their_own_type(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = _watch(model, tmp_path / "a", log_freq=2)
    for step in range(5):
        model.train()
        loss = model(torch.randn(4, 6)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad() if step % 4 == 0 else torch.inference_mode():
            for _ in range(3):  # three validation batches: the first is recorded
                model(torch.randn(4, 6))
    handle.unwatch()
    group = open_group(handle.group_path)
    steps = group.list_steps("t")
    assert list(zip(steps.training_step, steps.type_of_execution)) == [
        (0, "training"), (2, "training"), (4, "training")]
    # their own trial, numbered with the training step they followed (tests/watch/
    # test_validation.py: the rhythms)
    steps = group.list_steps("t.validation")
    assert list(zip(steps.training_step, steps.type_of_execution)) == [
        (0, "validation"), (2, "validation"), (4, "validation")]
    h = group.read_histograms("t.validation", types_of_execution="validation")
    assert set(h.what) == {"io", "params"}  # no gradients in a validation pass
    assert group.read_watch_report("t")["skipped"] == []
    assert group.read_watch_report("t.validation") == group.read_watch_report("t")


@pytest.mark.parametrize("kwargs, detail", [({"eval_mode": "skip", "log_freq": 2}, "skip"),
                                             ({"eval_mode": "skip", "log_freq": 1}, "skip")])
def test_skipped_validation_passes_are_reported(tmp_path, kwargs, detail):
    model = MLP()
    handle = _watch(model, tmp_path, **kwargs)
    model(torch.randn(4, 6)).sum().backward()
    model.eval()
    model(torch.randn(4, 6))
    handle.unwatch()
    group = open_group(handle.group_path)
    assert set(group.list_steps("t").type_of_execution) == {"training"}
    skipped = group.read_watch_report("t")["skipped"]
    assert [s["reason"] for s in skipped] == ["eval mode"] and detail in skipped[0]["detail"]


def test_several_backward_passes_in_one_step(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    handle = _watch(model, tmp_path, log_freq=1)
    out = model(torch.randn(4, 6))
    out[:, 0].sum().backward(retain_graph=True)
    first = model.net[0].weight.grad.clone()
    out[:, 1].sum().backward()
    handle.unwatch()
    h = open_group(handle.group_path).read_histograms("t", what="params_grad",
                                                       modules="model.net.0", roles="weight")
    assert list(h.recording_type) == ["gradient:backward", "gradient:backward_2"]
    assert h.iloc[0].vmax == first.max().item()  # the gradient after the first backward


class Branches(nn.Module):
    """A module never called, one without tensor output, one whose output is detached."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.act = nn.Tanh()
        self.unused = nn.Linear(4, 4)
        self.probe = Probe()
        self.frozen = nn.Linear(4, 4)

    def forward(self, x):
        y = self.act(self.body(x))
        self.probe(y)
        return y + self.frozen(x).detach()


class Probe(nn.Module):
    def forward(self, x):
        return None


def test_the_watch_report_says_why_a_module_has_no_data(tmp_path, caplog):
    model = Branches()
    with (caplog.at_level(logging.INFO, logger="comgra_like"),
          _watch(model, tmp_path, log_freq=1, ignore_io_grad_classes=[nn.Tanh]) as handle):
        model(torch.randn(3, 4)).sum().backward()
    assert all_hooks(model) == [] and not handle.watching
    report = handle.report()
    stored = open_group(handle.group_path).read_watch_report("t")
    assert stored == report
    reasons = {(s["module"], s["reason"]) for s in stored["skipped"]}
    assert reasons == {("model.act", "ignored class"), ("model.unused", "never called"),
                       ("model.probe", "no tensor output"),
                       ("model.frozen", "no gradient reached it")}
    assert len(stored["hooked"]) == 6
    logged = [r.getMessage() for r in caplog.records if "modules of model hooked" in r.getMessage()]
    assert len(logged) == 1 and "1 never called" in logged[0]
    h = open_group(handle.group_path).read_histograms("t")
    assert not ((h.module == "model.act") & (h.what == "io_grad")).any()
    assert ((h.module == "model.act") & (h.what == "io")).any()


class WithAttach(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        y = comgra_like.attach(self.a(x) * 3, self, "scaled")
        return self.b(y)


def test_attach_records_an_intermediate_tensor(tmp_path):
    model = WithAttach()
    handle = _watch(model, tmp_path, log_freq=1)
    model(torch.randn(5, 4)).sum().backward()
    handle.unwatch()
    group = open_group(handle.group_path)
    h = group.read_histograms("t", modules="model.scaled")
    assert set(zip(h.role, h.what)) == {("output 0", "io"), ("output 0", "io_grad")}
    edges = {tuple(e) for e in group.read_module_graph("t", 0)["edges"]}
    assert ("model.a", "output 0", "model.scaled", "input 0") in edges
    assert ("model.scaled", "output 0", "model.b", "input 0") in edges
    assert group.read_watch_report("t")["attached"] == ["model.scaled"]


def test_watch_into_an_existing_recorder(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = ComgraRecorder(tmp_path, "g", "mine", DecisionMakerForRecordingsFrequencyPerType(2),
                         max_num_batch_size_to_record=2)
    rec.track_module("net", model)
    handle = comgra_like.watch(model, recorder=rec, verbose=False)
    for step in range(4):
        x = torch.randn(4, 6)
        rec.start_batch(step, 4, "train")
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        loss = model(x).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        rec.finish_iteration()
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_batch()
    handle.unwatch()
    assert all_hooks(model) == []
    rec.finalize()
    group = open_group(tmp_path / "g")
    assert [t.trial_id for t in group.list_trials()] == ["mine"]
    h = group.read_histograms("mine")
    assert sorted(set(h.training_step)) == [0, 2]
    assert {"net", "net.net.0"} <= set(h.module)
    assert set(h[h.what == "io_grad"].recording_type) == {"gradient:loss"}
    stats = group.read_statistics("mine")
    assert {"x", "loss", "net.net.0"} <= set(stats.node)  # by hand and watched, one trial
    assert group.read_module_graph("mine", 2) is not None


def test_backend_none_records_the_structure_only(tmp_path):
    model = MLP()
    handle = _watch(model, tmp_path, log_freq=1, backend="none")
    model(torch.randn(4, 6)).sum().backward()
    handle.unwatch()
    group = open_group(handle.group_path)
    assert group.read_histograms("t").empty
    assert group.list_steps("t").empty
    assert len(group.read_module_graph("t", 0)["invocations"]) == 7  # model, net, 5 layers
    assert group.read_watch_report("t")["steps_recorded"] == 1


def test_wrong_arguments_are_refused_with_the_fix(tmp_path):
    model = MLP()
    with pytest.raises(ConfigurationError, match="backend='standalone'"):
        _watch(model, tmp_path, backend="wandb")
    with pytest.raises(ConfigurationError, match="log may hold"):
        _watch(model, tmp_path, log=["io", "weights"])
    with pytest.raises(ConfigurationError, match="log_freq"):
        _watch(model, tmp_path, log_freq=0)
    assert not (tmp_path / "w").exists() and all_hooks(model) == []
    handle = _watch(model, tmp_path)
    with pytest.raises(ConfigurationError, match="watched already"):
        _watch(model, tmp_path)
    handle.unwatch()
    assert all_hooks(model) == []


class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)
        self.fail = False

    def forward(self, x):
        h = self.a(x)
        if self.fail:
            raise ValueError("bad batch")
        return self.b(h)


def test_a_forward_that_raises_does_not_stop_the_recording(tmp_path):
    model = Flaky()
    handle = _watch(model, tmp_path, log_freq=2)
    for step in range(5):
        model.fail = step == 2
        try:
            model(torch.randn(3, 4)).sum().backward()
        except ValueError:
            continue
    handle.unwatch()
    assert all_hooks(model) == []
    group = open_group(handle.group_path)
    h = group.read_histograms("t", what="io")
    assert sorted(set(h.training_step)) == [0, 2, 4]
    assert "model.b" not in set(h[h.training_step == 2].module)  # never reached in step 2
    assert {"model.a", "model.b"} <= set(h[h.training_step == 4].module)


@pytest.mark.parametrize("delay", [True, False])
def test_a_root_called_twice_before_backward(tmp_path, delay):
    """delay_log_multi_backward=True: one step per backward (two forwards = two
    iterations of it); without it every forward of the root starts a step."""
    model = MLP()
    handle = _watch(model, tmp_path, log_freq=2, delay_log_multi_backward=delay)
    for _ in range(4):
        (model(torch.randn(4, 6)).sum() + model(torch.randn(4, 6)).sum()).backward()
    handle.unwatch()
    h = open_group(handle.group_path).read_histograms("t", what="io", modules="model",
                                                       roles="input 0")
    steps = list(zip(h.training_step, h.iteration))
    assert steps == ([(0, 0), (0, 1), (2, 0), (2, 1)] if delay
                     else [(0, 0), (2, 0), (4, 0), (6, 0)])
