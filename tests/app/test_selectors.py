"""The selection callback's logic (comgra_like.app.selectors) on a real recording."""

from __future__ import annotations

from comgra_like.app import selectors
from comgra_like.app.data import AppData


def test_apply_event_for_each_kind_of_user_action(tiny_group):
    data = AppData(tiny_group)
    selection = selectors.apply_event(data, None, None)
    assert selection["current"]["trial"] == "trial_a"
    selection = selectors.apply_event(
        data, selection, ("node-click", {"points": [{"customdata": "memory"}]})
    )
    assert selection["current"]["node"] == "memory"
    selection = selectors.apply_event(data, selection, ("nudge", ("training_step", 1)))
    assert selection["current"]["training_step"] == 1
    selection = selectors.apply_event(data, selection, ("step-typed", 6.4))
    assert selection["current"]["training_step"] == 5
    selection = selectors.apply_event(data, selection, ("step-index", 0))
    assert selection["current"]["training_step"] == 0
    click = {"points": [{"customdata": 9}]}
    selection = selectors.apply_event(data, selection, ("step-click", click))
    assert selection["current"]["training_step"] == 9
    selection = selectors.apply_event(data, selection, ("choose", ("iteration", 2)))
    selection = selectors.apply_event(data, selection, ("key", {"direction": "right"}))
    assert selection["current"]["node"] in {"output", "outer"}
    selection = selectors.apply_event(data, selection, ("choose", ("statistic", "abs_max")))
    assert selection["statistic"] == "abs_max"
    controls = selectors.control_values(data, selection)
    assert controls["steps"] == [0, 1, 4, 5, 8, 9, 10]
    assert controls["options"]["aggregation"][3]["label"] == "Sample 0"
    # the step has no dropdown: its (possibly thousands of) options get no labels
    assert "training_step" not in controls["options"]
    assert set(controls["options"]) == set(selectors.DROPDOWN_FIELDS) | {"statistic"}


def test_step_marks_are_few():
    assert selectors.step_marks([]) == {}
    assert selectors.step_marks([3, 7]) == {0: "3", 1: "7"}
    marks = selectors.step_marks(list(range(0, 1000, 10)))
    assert len(marks) <= 6 and marks[0] == "0" and marks[99] == "990"
