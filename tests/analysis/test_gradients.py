"""Vanishing and exploding gradients along the graph and over steps; update ratios."""

from __future__ import annotations

from comgra_like.analysis import ERROR, WARNING, at_least, find
from comgra_like.analysis import gradients as g


def test_a_deep_stack_of_sigmoids_vanishes(recorded):
    found = [f for f in find(recorded("sigmoid_stack", depth=12)) if f.kind == g.VANISHING]
    assert len(found) == 1
    f = found[0]
    assert f.severity == WARNING
    assert f.numbers["median_gain"] < 1e-6
    # The first layers are named (the last ones still get most of the gradient).
    assert {"layer_00", "layer_01", "layer_02"} <= set(f.numbers["nodes"])
    assert "layer_11" not in f.numbers["nodes"]
    assert f.recording_type == "gradient:gradients"


def test_a_shallow_stack_does_not(recorded):
    found = find(recorded("sigmoid_stack", depth=2))
    assert [f for f in found if f.kind in (g.VANISHING, g.EXPLODING)] == []


def test_an_exploding_learning_rate(recorded):
    # lr 0.005 until step 8, then 100: the update of step 8 is out of all proportion, the
    # gradients of the steps after it explode.
    found = find(recorded("exploding_lr", jump_at=8))
    updates = [f for f in found if f.kind == g.UPDATE_RATIO_HIGH]
    assert [f.severity for f in updates] == [ERROR]
    assert updates[0].numbers["first_step"] == 8 and updates[0].steps[0] == 8
    assert updates[0].numbers["update_ratio"] > 1
    assert updates[0].where["statistic"] == "update_ratio"
    grown = [f for f in found if f.kind == g.EXPLODING_OVER_STEPS]
    assert len(grown) == 1 and grown[0].numbers["first_step"] == 9
    assert grown[0].numbers["growth"] > g.GROWTH_WARNING


def test_a_steady_learning_rate_is_quiet(recorded):
    assert at_least(find(recorded("exploding_lr", jump_at=None)), WARNING) == []
