"""The output-range detector (comgra_like/analysis/outputs.py) on real recorded loops:
the tutorial's bug in several forms names the tensor to look at; the fixed versions,
the healthy loops of the other detectors and the tutorial's fixed trial raise nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from comgra_like.analysis import DETECTORS, find_in_trial
from comgra_like.analysis.outputs import FLOORED_OUTPUT, KIND, SQUASHED_INPUT, STUCK
from comgra_like.query import open_group

from . import output_loops
from .conftest import EXAMPLE_RUN, FIXED_TRIAL


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("output_range")
    done: dict[tuple, Path] = {}

    def get(name: str, **kwargs) -> list:
        key = (name, tuple(sorted(kwargs.items())))
        if key not in done:
            done[key] = getattr(output_loops, name)(root, group=f"{name}_{len(done)}",
                                                    **kwargs)
        return find_in_trial(open_group(done[key]), name, ["outputs"])

    return get


def test_registered():
    assert "outputs" in DETECTORS


@pytest.mark.parametrize("last", ["leaky_relu", "relu"])
def test_a_relu_like_activation_before_the_sigmoid_is_named(run, last):
    [finding] = run("sigmoid_classifier", last=last)
    assert finding.kind == KIND and finding.severity == "warning"
    assert finding.numbers["cause"] == SQUASHED_INPUT and finding.numbers["side"] == "low"
    assert finding.node == "output"
    # the page opens the squashed tensor, the value in front of the sigmoid
    assert finding.where["node"] == "logits" and finding.where["statistic"] == "min"
    assert finding.numbers["output_low"] > 0.3 and finding.numbers["output_high"] > 0.9
    low, high = finding.numbers["input_low"], finding.numbers["input_high"]
    assert high > 3 and -0.3 < low < 0.1 * high  # hardly below 0, far above
    assert "'logits' is squashed on the negative side" in finding.explanation
    assert finding.steps[-1] == 100  # the last recorded step


def test_the_fixed_classifier_raises_nothing(run):
    assert run("sigmoid_classifier", last=None) == []


@pytest.mark.parametrize("register_pre", [True, False])
def test_a_relu_output_for_targets_that_go_negative_is_named(run, register_pre):
    [finding] = run("relu_regression", register_pre=register_pre)
    assert finding.numbers["cause"] == FLOORED_OUTPUT and finding.numbers["side"] == "low"
    assert finding.node == "prediction" and finding.where["node"] == "prediction"
    assert 0 <= finding.numbers["output_low"] < 0.1 * finding.numbers["output_high"]
    assert finding.numbers["target_low"] < -0.5
    assert "stop at about 0" in finding.explanation


def test_the_fixed_regression_raises_nothing(run):
    assert run("relu_regression", last=None) == []


def test_outputs_stuck_below_every_target_are_named(run):
    [finding] = run("stuck_offset", learns=False)
    assert finding.numbers["cause"] == STUCK and finding.numbers["side"] == "high"
    assert finding.numbers["output_high"] < finding.numbers["target_low"]
    assert finding.numbers["flagged_steps"] == finding.numbers["window_steps"] == 2
    assert finding.numbers["recorded_steps"] == 6


def test_the_network_that_learns_the_offset_raises_nothing(run):
    assert run("stuck_offset", learns=True) == []


@pytest.mark.parametrize("loop, control", [
    ("log_of_zero", {"zero_at": None}), ("dying_relu", {"kill_at": None}),
    ("saturated_gate", {"pin_at": None}), ("exploding_lr", {"jump_at": None}),
    ("bad_batches", {"spike_at": None, "outlier_at": None}), ("sigmoid_stack", {}),
    ("dying_relu", {}), ("saturated_gate", {}),
])
def test_the_other_detectors_loops_raise_nothing(recorded, loop, control):
    assert find_in_trial(open_group(recorded(loop, **control)), loop, ["outputs"]) == []


def test_the_tutorial_bug_is_named_and_the_fix_is_not():
    group = open_group(EXAMPLE_RUN)
    [finding] = find_in_trial(group, "trial_bugged_original_version", ["outputs"])
    assert finding.numbers["cause"] == SQUASHED_INPUT
    assert finding.where["node"] == "root_module.subnet_out__out"
    assert -0.5 < finding.numbers["input_low"] < 0
    assert finding.numbers["input_high"] > 4
    assert finding.steps == (590, 592)  # not step 4: the network had not learnt yet
    assert find_in_trial(group, FIXED_TRIAL, ["outputs"]) == []


def test_a_tiny_bert_that_predicts_the_label_frequencies_raises_nothing(run):
    # After 60 steps its probabilities sit near the labels' frequency (about 0.65 for
    # labels that are 1 in two thirds of the sequences): the low end is unreached, but
    # by uncertainty, not by a squashed value (its logits are all positive, unclipped).
    pytest.importorskip("transformers")
    assert run("bert_multilabel") == []
