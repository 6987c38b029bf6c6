"""A page with nothing to show for the selected trial names the trials that have it: on
the committed example the tutorial's trials have no watch() data, the watched trial has
module graphs, metrics and flows."""

from __future__ import annotations

from pathlib import Path

from comgra_like.app import other_trials
from comgra_like.app.data import AppData

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
WATCHED = "trial_watched_classifier"
BUGGED = "trial_bugged_original_version"


def test_the_example_names_its_watched_trial_for_modules_metrics_and_flow():
    data = AppData(EXAMPLE)
    data.refresh(force=True)
    assert other_trials.with_module_graphs(data) == [WATCHED]
    assert other_trials.with_metrics(data) == [WATCHED]
    assert other_trials.with_flows(data) == [WATCHED]
    text = other_trials.hint(other_trials.with_flows(data), BUGGED, "flows")
    assert text == f" Trials with flows: {WATCHED} (pick one in the trial selector)."
    # The trial that has them needs no hint; nor does a group where no trial has them.
    assert other_trials.hint([WATCHED], WATCHED, "flows") == ""
    assert other_trials.hint([], BUGGED, "flows") == ""


def test_at_most_five_trials_are_named():
    names = [f"t{i}" for i in range(8)]
    text = other_trials.hint(names, "t0", "metrics")
    assert "t1, t2, t3, t4, t5 …" in text and "t6" not in text
