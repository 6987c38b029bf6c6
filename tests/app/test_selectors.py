"""The selection callback's logic (comgra_like.app.selectors) on a real recording."""

from __future__ import annotations

from comgra_like.app import selectors
from comgra_like.app.data import AppData


def test_apply_event_for_each_kind_of_user_action(tiny_group):
    data = AppData(tiny_group)
    store = selectors.apply_event(data, None, None)
    assert store["current"]["trial"] == "trial_a"
    store = selectors.apply_event(
        data, store, ("node-click", {"points": [{"customdata": "memory"}]})
    )
    assert store["current"]["node"] == "memory"
    store = selectors.apply_event(data, store, ("nudge", ("training_step", 1)))
    assert store["current"]["training_step"] == 1
    store = selectors.apply_event(data, store, ("step-typed", 6.4))
    assert store["current"]["training_step"] == 5
    store = selectors.apply_event(data, store, ("step-index", 0))
    assert store["current"]["training_step"] == 0
    store = selectors.apply_event(data, store, ("step-click", {"points": [{"customdata": 9}]}))
    assert store["current"]["training_step"] == 9
    store = selectors.apply_event(data, store, ("choose", ("iteration", 2)))
    store = selectors.apply_event(data, store, ("key", {"direction": "right"}))
    assert store["current"]["node"] in {"output", "outer"}
    store = selectors.apply_event(data, store, ("choose", ("statistic", "abs_max")))
    assert store["statistic"] == "abs_max"
    controls = selectors.control_values(data, store)
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
