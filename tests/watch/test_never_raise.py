"""watch() and the per-module metrics never raise into training: a failure injected
inside their hooks (an internal function that raises) is logged once, the step's
recording is dropped, and the loop finishes bitwise identical to the bare loop; the
steps before and after a single failure are recorded as usual."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

import comgra_like
from comgra_like.query import open_group
from comgra_like.record import hooks, watch_gradients, watch_output
from comgra_like.record import metric_collect as collect

STEPS = 6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.bn = nn.BatchNorm1d(16)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        h = self.act(self.bn(self.fc1(x)))
        comgra_like.attach(h, self, "hidden")
        return self.fc2(h)


METRICS = {"fc1": ["InputSndNorm", "OutputGradSndNorm", "WeightGradNorm"],
           "bn": ["MeanTID"]}


def _loop(model, handle=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        loss = model(torch.randn(8, 6, generator=gen)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if handle is not None:
            handle.log_loss(loss)
        opt.step()
        if step == 2:
            model.eval()
            with torch.no_grad():
                model(torch.randn(8, 6, generator=gen))
            model.train()
    if handle is not None:
        handle.unwatch()


def _fail_always(*args, **kwargs):
    raise RuntimeError("injected failure")


# (where, what): internal functions of every kind of hook, patched to raise
INJECTIONS = [
    (hooks, "_batch_size"),  # the root's forward pre-hook: a step starts
    (hooks.Watcher, "_register"),  # the modules' forward pre-hooks and hooks
    (watch_output, "edges_of"),  # the root's forward hook: the module graph
    (watch_gradients, "queue_after_backward"),  # the gradient hook on the root's output
    (hooks.Watcher, "_backward_done_work"),  # the end of the backward pass
    (hooks.Watcher, "_validation_recorder"),  # a validation pass starts
    (collect, "copy_of"),  # the metrics' forward and gradient hooks
    (collect, "batch_norm_stats"),  # the metrics' batch-norm hook (every step)
    (collect.Collector, "_keep_parameter_gradients"),  # metrics: end of backward
    (collect.Sender, "send"),  # metrics: a step is sent
]


def _watched(tmp_path, model):
    return comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                             log_freq=2, verbose=False, metrics=METRICS)


def _bare():
    torch.manual_seed(0)
    model = Net()
    watched = copy.deepcopy(model)
    _loop(model)
    return model, watched


def _same(a, b):
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


def _errors(caplog):
    return [r for r in caplog.records
            if r.name == "comgra_like" and "internal error" in r.getMessage()]


@pytest.mark.parametrize("owner, name", INJECTIONS,
                         ids=[f"{getattr(o, '__name__', o)}.{n}" for o, n in INJECTIONS])
def test_a_failing_hook_never_reaches_training(tmp_path, monkeypatch, caplog, owner, name):
    bare, model = _bare()
    monkeypatch.setattr(owner, name, _fail_always)
    handle = _watched(tmp_path, model)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        _loop(model, handle)
    _same(bare, model)
    errors = _errors(caplog)
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "injected failure" in errors[0].getMessage()
    if owner in (hooks, hooks.Watcher, watch_output, watch_gradients):
        report = open_group(handle.group_path).read_watch_report("t")
        assert report["internal_errors"]["count"] >= 1
        assert "injected failure" in report["internal_errors"]["first"]


def test_one_failure_drops_that_step_only(tmp_path, monkeypatch, caplog):
    bare, model = _bare()
    real = watch_output.edges_of
    calls = []

    def fail_once(invocations):
        calls.append(1)
        if len(calls) == 2:  # the second recorded forward: training step 2
            raise RuntimeError("injected failure")
        return real(invocations)

    monkeypatch.setattr(watch_output, "edges_of", fail_once)
    handle = _watched(tmp_path, model)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        _loop(model, handle)
    _same(bare, model)
    assert len(_errors(caplog)) == 1
    group = open_group(handle.group_path)
    assert sorted(set(group.list_steps("t").training_step)) == [0, 4]
    assert sorted(set(group.read_histograms("t").training_step)) == [0, 4]
    assert sorted(set(group.list_steps("t.validation").training_step)) == [2]
    assert group.read_watch_report("t")["internal_errors"]["count"] == 1
    # the metrics go on regardless (their own schedule)
    assert set(group.read_metrics("t").training_step) >= {0, 1, 2, 3, 4, 5}
