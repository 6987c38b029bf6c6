"""No false alarms on the committed example run of the tutorial."""

from __future__ import annotations

from comgra_like.analysis import DETECTORS, WARNING, at_least, find_in_trial
from comgra_like.query import open_group

from .conftest import EXAMPLE_RUN, FIXED_TRIAL


def test_the_fixed_tutorial_trial_raises_nothing_at_warning_or_above():
    group = open_group(EXAMPLE_RUN)
    for name in DETECTORS:
        assert at_least(find_in_trial(group, FIXED_TRIAL, [name]), WARNING) == [], name


def test_the_bugged_trial_only_has_its_bug_named():
    # Its bug (a LeakyReLU after the output layer) does not make values non-finite,
    # units dead or gradients vanish in three recorded steps; the output-range detector
    # names it (tests/analysis/test_outputs.py).
    group = open_group(EXAMPLE_RUN)
    found = at_least(find_in_trial(group, "trial_bugged_original_version"), WARNING)
    assert [f.kind for f in found] == ["output_range"]


def test_a_trial_without_steps_has_no_findings(recorded):
    from comgra_like.analysis import find

    assert find(recorded("nothing_recorded")) == []
