"""Dead ReLU units and saturated sigmoid units, with the fraction affected."""

from __future__ import annotations

from comgra_like.analysis import WARNING, find
from comgra_like.analysis import units as u


def test_a_relu_layer_that_dies(recorded):
    found = [f for f in find(recorded("dying_relu", kill_at=6)) if f.kind == u.DEAD]
    assert len(found) == 1
    f = found[0]
    assert (f.node, f.severity) == ("relu_out", WARNING)
    assert f.numbers["affected"] == 16 and f.numbers["units"] == 32
    assert f.numbers["fraction"] == 0.5
    assert f.numbers["unit_indices"] == list(range(16))
    assert f.steps == tuple(range(15, 20))  # the window: the last 5 recorded steps
    assert "16 of 32 units" in f.explanation


def test_a_living_relu_layer(recorded):
    assert [f for f in find(recorded("dying_relu", kill_at=None)) if f.kind == u.DEAD] == []


def test_a_saturated_sigmoid(recorded):
    found = [f for f in find(recorded("saturated_gate", pin_at=4)) if f.kind == u.SATURATED]
    assert len(found) == 1
    f = found[0]
    assert (f.node, f.severity, f.numbers["affected"]) == ("gate", WARNING, 4)
    assert f.numbers["unit_indices"] == [0, 1, 2, 3]


def test_an_unsaturated_sigmoid(recorded):
    found = find(recorded("saturated_gate", pin_at=None))
    assert [f for f in found if f.kind in (u.SATURATED, u.DEAD)] == []
