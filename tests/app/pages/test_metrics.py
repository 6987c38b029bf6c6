"""The Metrics page's pure pieces (issue 16): which trials are drawn, the window typed
in, and where a clicked point leads."""

from __future__ import annotations

from comgra_like.app.pages import metrics
from comgra_like.app.pages.modules import PATH as MODULES_PATH
from comgra_like.app.pages.tensors import PATH as TENSORS_PATH


def test_the_selections_trial_first_then_the_overlaid_known_ones():
    selection = {"current": {"trial": "a"}}
    assert metrics.trials_of(selection, ["c", "a", "gone"], ["a", "b", "c"]) == ["a", "c"]
    assert metrics.trials_of(None, ["b"], ["a", "b"]) == ["b"]
    assert metrics.trials_of({"current": {"trial": "gone"}}, [], ["a"]) == []


def test_the_window_is_a_whole_number_of_steps_at_least_one():
    assert metrics.window_of("5") == 5
    assert metrics.window_of(0) == 1
    assert metrics.window_of(None) == metrics.window_of("x") == 1


def test_a_click_opens_the_step_and_module_on_the_chosen_page():
    point = {"trial": "a", "module": "model.fc1", "training_step": 15, "backward_pass": 0}
    assert metrics.where_clicked(point, MODULES_PATH) == {
        "trial": "a", "node": "model.fc1", "training_step": 15}
    assert metrics.where_clicked(point, TENSORS_PATH)["role"] == "output 0"
