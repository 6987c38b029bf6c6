"""Validation passes under watch(): recorded as type of execution ``validation`` in the
trial ``<trial>.validation``, numbered with the training step they followed, whatever
the loop's rhythm; training is bitwise the same as the bare loop's, and nothing breaks
(issue 27.1: a validation after an unrecorded step used the number of the next recorded
training step, and that step died with "training_step must strictly increase")."""

from __future__ import annotations

import copy

import pytest
import torch

import comgra_like
from comgra_like.query import open_group

from .models import MLP

STEPS = 8


def _run(model, events, handle=None):
    """``events`` per training step k: what follows it (and "before": what precedes the
    first): "v" a validation batch (eval mode, no_grad), "i" one under
    torch.inference_mode(), "g" one in eval mode with gradients and a backward (its
    gradients zeroed after)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    held_out = torch.Generator().manual_seed(2)

    def validate(kind):
        model.eval()
        x = torch.randn(4, 6, generator=held_out)
        if kind in "vi":
            with torch.no_grad() if kind == "v" else torch.inference_mode():
                model(x)
        else:
            model(x).pow(2).mean().backward()
            opt.zero_grad()
        model.train()

    for kind in events.get("before", ""):
        validate(kind)
    for step in range(STEPS):
        loss = model(torch.randn(4, 6, generator=gen)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        for kind in events.get(step, ""):
            validate(kind)
    if handle is not None:
        handle.unwatch()


RHYTHMS = {
    # the loop: validation after the unrecorded steps 3 and 7
    "after unrecorded steps": (2, {3: "v", 7: "v"}, [3, 7]),
    "after every step": (2, {k: "v" for k in range(STEPS)}, [0, 2, 4, 6]),
    "several batches in a row": (2, {1: "vvv", 4: "vv", 5: "vvvv"}, [1, 4]),
    "before the first training step": (2, {"before": "vv", 2: "v"}, [-1, 2]),
    # the first validation under inference_mode, the next ones not (the recorder's
    # buffers made in inference mode could not be written outside it)
    "inference_mode, then no_grad": (2, {0: "i", 2: "v", 4: "ii", 6: "v"}, [0, 2, 4, 6]),
    "grad enabled in eval mode": (2, {k: "g" for k in range(STEPS)}, [0, 2, 4, 6]),
    "every step recorded": (1, {k: "v" for k in range(STEPS)}, list(range(STEPS))),
    "rarely recorded": (3, {k: "v" for k in (1, 2, 4, 7)}, [1, 4, 7]),
}


@pytest.mark.parametrize("rhythm", list(RHYTHMS))
def test_validation_rhythms(tmp_path, rhythm):
    log_freq, events, expected = RHYTHMS[rhythm]
    torch.manual_seed(0)
    model = MLP()
    bare = copy.deepcopy(model)
    _run(bare, events)

    handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                               log_freq=log_freq, verbose=False)
    _run(model, events, handle)
    for k, v in bare.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k

    group = open_group(handle.group_path)
    assert handle.validation_trial_id == "t.validation"
    assert sorted(t.trial_id for t in group.list_trials()) == ["t", "t.validation"]
    training = group.list_steps("t")
    assert set(training.type_of_execution) == {"training"}
    assert sorted(set(training.training_step)) == list(range(0, STEPS, log_freq))
    validation = group.list_steps("t.validation")
    assert set(validation.type_of_execution) == {"validation"}
    assert sorted(set(validation.training_step)) == expected
    h = group.read_histograms("t.validation")
    assert sorted(set(h.training_step)) == expected
    assert set(h.what) == {"io", "params"}  # no gradients recorded in a validation pass
    assert set(h.type_of_execution) == {"validation"}
    assert group.read_module_graph("t.validation", expected[-1]) is not None
    report = group.read_watch_report("t")
    assert report["skipped"] == [] and "internal_errors" not in report
    assert report["validation_trial"] == "t.validation"


def test_no_validation_no_second_trial(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                               log_freq=2, verbose=False)
    _run(model, {}, handle)
    assert handle.validation_trial_id is None
    assert [t.trial_id for t in open_group(handle.group_path).list_trials()] == ["t"]
