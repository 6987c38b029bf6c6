"""Server-side data access (comgra_like.app.state) and the selection callback's logic, on
data written by the real recorder."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
from comgra_like.app import create_app, selectors
from comgra_like.app import selection as sel
from comgra_like.app import state as state_module
from comgra_like.app.page_tensors import is_complete
from comgra_like.app.state import AppState, ByteLRU, estimate_bytes


def test_byte_lru_is_bounded():
    cache = ByteLRU(100)
    for i in range(10):
        cache.put(i, np.zeros(4, dtype=np.float64), 40)
    assert cache.bytes <= 100 and len(cache) == 2
    assert cache.get(9) is not None and cache.get(0) is None
    cache.put("huge", b"x", 1000)  # larger than the cache: not stored, nothing evicted
    assert cache.get("huge") is None and len(cache) == 2
    assert estimate_bytes(np.zeros(10)) >= 80


def test_options_follow_the_recording(tiny_group):
    state = AppState(tiny_group)
    source = state.option_source()
    assert source.options("trial", {}) == ["trial_a", "trial_b"]
    up = {"trial": "trial_a"}
    assert source.options("type_of_execution", up) == ["any", "long", "short"]
    up["type_of_execution"] = "long"
    assert source.options("training_step", up) == [1, 5, 9]
    up["training_step"] = 5
    assert source.options("iteration", up) == [0, 1, 2]
    up["iteration"] = 2
    nodes = source.options("node", up)
    assert {"input", "memory", "memory@1", "loss", "net.cell.weight", "outer"} <= set(nodes)
    up["node"] = "net.cell.weight"
    assert source.options("role", up) == ["net.cell.weight"]
    up["role"] = "net.cell.weight"
    assert source.options("recording_type", up) == ["forward", "gradient:main_loss", "update"]
    up["recording_type"] = "update"
    assert source.options("aggregation", up) == ["none"]
    up |= {"node": "memory", "role": "new", "recording_type": "forward"}
    aggregations = source.options("aggregation", up)
    assert aggregations[:3] == ["batch_mean", "batch_abs_max", "batch_std"]
    assert aggregations[3:] == [f"sample:{i}" for i in range(12)]


def test_import_nodes_read_the_earlier_iteration(tiny_group):
    state = AppState(tiny_group)
    current = {
        "trial": "trial_a",
        "type_of_execution": "any",
        "training_step": 5,
        "iteration": 2,
        "node": "memory@1",
        "role": "new",
        "recording_type": "forward",
        "aggregation": "sample:3",
    }
    imported = state.read_tensor(current)
    assert imported.iteration == 1 and imported.node == "memory"
    at_one = state.read_tensor(current | {"iteration": 1, "node": "memory"})
    np.testing.assert_array_equal(imported.values, at_one.values)
    assert imported.values.shape == (3,)


def test_series_and_tensor_reads(tiny_group):
    state = AppState(tiny_group)
    current = sel.refresh(None, state.option_source())["current"]
    assert is_complete(current)
    record = state.read_tensor(current)
    assert set(record.stats) >= {"mean", "std", "abs_max"}
    series = state.read_series(current, "mean")
    assert list(series["training_step"]) == [0, 1, 4, 5, 8, 9, 10]
    assert series.loc[series.training_step == current["training_step"], "value"].iloc[
        0
    ] == pytest.approx(record.stats["mean"])


def test_apply_event_for_each_kind_of_user_action(tiny_group):
    state = AppState(tiny_group)
    store = selectors.apply_event(state, None, None)
    assert store["current"]["trial"] == "trial_a"
    store = selectors.apply_event(
        state, store, ("node-click", {"points": [{"customdata": "memory"}]})
    )
    assert store["current"]["node"] == "memory"
    store = selectors.apply_event(state, store, ("nudge", ("training_step", 1)))
    assert store["current"]["training_step"] == 1
    store = selectors.apply_event(state, store, ("step-typed", 6.4))
    assert store["current"]["training_step"] == 5
    store = selectors.apply_event(state, store, ("step-index", 0))
    assert store["current"]["training_step"] == 0
    store = selectors.apply_event(state, store, ("step-click", {"points": [{"customdata": 9}]}))
    assert store["current"]["training_step"] == 9
    store = selectors.apply_event(state, store, ("choose", ("iteration", 2)))
    store = selectors.apply_event(state, store, ("key", {"direction": "right"}))
    assert store["current"]["node"] in {"output", "outer"}
    store = selectors.apply_event(state, store, ("choose", ("statistic", "abs_max")))
    assert store["statistic"] == "abs_max"
    controls = selectors.control_values(state, store)
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


def test_a_missing_group_is_waited_for(tmp_path, tiny_group):
    target = tmp_path / "later"
    app = create_app(target)
    state = app.comgra_state
    status = state.refresh(force=True)
    assert status.problem and "does not exist" in status.problem
    assert state.option_source().options("trial", {}) == []
    shutil.copytree(tiny_group, target)
    status = state.refresh(force=True)
    assert status.problem is None and dict(status.trial_statuses) == {
        "trial_a": "finished",
        "trial_b": "finished",
    }
    assert state.trial_version("trial_a") >= 1


def test_an_empty_group_says_so(tmp_path):
    (tmp_path / "trials").mkdir()
    status = AppState(tmp_path).status()
    assert "No trials" in status.problem


def test_create_app_builds_independent_apps(tiny_group):
    first, second = create_app(tiny_group), create_app(tiny_group)
    assert first.comgra_state is not second.comgra_state
    assert len(first.callback_map) == len(second.callback_map) > 5


def _indexed_steps(state: AppState, trial: str) -> set[int]:
    return {
        step
        for step in state.steps(trial)
        if state.cache.get(("tensor_index", trial, step, state.trial_version(trial)))
        is not None
    }


def _wait_for(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_prefetch_waits_until_the_callbacks_are_done(tiny_group, monkeypatch):
    monkeypatch.setattr(state_module, "PREFETCH_QUIET_SECONDS", 0.2)
    state = AppState(tiny_group)
    steps = list(state.steps("trial_a"))  # [0, 1, 4, 5, 8, 9, 10]
    state.callback_started()  # the views of step 4 are being computed
    state.prefetch_neighbours("trial_a", 4, steps)
    time.sleep(0.3)
    assert _indexed_steps(state, "trial_a") == set()  # nothing read beside the callback
    state.callback_finished()
    started = time.monotonic()
    assert _wait_for(lambda: _indexed_steps(state, "trial_a") == {1, 5})
    assert time.monotonic() - started >= 0.15  # and only after a quiet moment


def test_a_newer_prefetch_replaces_an_older_one(tiny_group, monkeypatch):
    monkeypatch.setattr(state_module, "PREFETCH_QUIET_SECONDS", 0.2)
    state = AppState(tiny_group)
    steps = list(state.steps("trial_a"))
    state.callback_started()
    state.prefetch_neighbours("trial_a", 1, steps)  # a step the user went past
    state.prefetch_neighbours("trial_a", 9, steps)
    state.callback_finished()
    assert _wait_for(lambda: _indexed_steps(state, "trial_a") >= {8, 10})
    time.sleep(0.3)
    assert _indexed_steps(state, "trial_a") == {8, 10}
    # without any callback running (an AppState outside an app) it starts after the delay
    state.prefetch_neighbours("trial_a", 0, steps)
    assert _wait_for(lambda: 1 in _indexed_steps(state, "trial_a"))


def test_the_app_tells_its_state_when_callbacks_run(tiny_group):
    app = create_app(tiny_group)
    state = app.comgra_state
    seen = []
    original = state.callback_started

    def started() -> None:
        seen.append(state._callbacks_running)
        original()

    state.callback_started = started
    client = app.server.test_client()
    assert client.get("/").status_code == 200  # not a callback
    assert seen == []
    client.post("/_dash-update-component", json={})  # a (malformed) callback request
    assert seen == [0] and state._callbacks_running == 0
