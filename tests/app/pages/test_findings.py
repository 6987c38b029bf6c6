"""The Findings page (issue 17): the list of what the detectors found, its filters, the
place a click opens on the Tensors page, and new data scanned again. On real training
loops recorded with faults at known places (tests/analysis/loops.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from comgra_like.app import selection as sel
from comgra_like.app.data import AppData
from comgra_like.app.pages import findings as page
from comgra_like.app.pages import tensors

from comgra_like.vocabulary import ANY_TYPE, FORWARD, UPDATE

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> Path:
    """One group, three trials: a NaN from log(0) at step 7, a ReLU layer that dies at
    step 6, and a stack of 12 sigmoids (vanishing gradients, parameters that barely
    learn: a finding about the whole run, without steps)."""
    from tests.analysis import loops

    root = tmp_path_factory.mktemp("findings_page")
    loops.log_of_zero(root, group="faulty")
    loops.dying_relu(root, group="faulty")
    return loops.sigmoid_stack(root, group="faulty")


def _components(component: Any) -> list[Any]:
    found = [component]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if child is not None and not isinstance(child, (str, int, float)):
            found += _components(child)
    return found


def rows(table: Any) -> list[Any]:
    return [c for c in _components(table) if getattr(c, "className", "") == "finding-row"]


def by_kind(found: list[dict], kind: str, trial: str) -> dict:
    return next(f for f in found if f["kind"] == kind and f["trial_id"] == trial)


def test_the_list_names_the_injected_faults(faulty):
    data = AppData(faulty)
    found = page.sort_findings(f for t in data.trial_ids() for f in data.findings(t))
    nan = by_kind(found, "first_non_finite", "log_of_zero")
    assert (nan["severity"], nan["steps"], nan["node"]) == ("error", [7], "z_log_positive")
    dead = by_kind(found, "dead_units", "dying_relu")
    assert dead["node"] == "relu_out"
    assert any(f["kind"] == "vanishing_gradient" and f["trial_id"] == "sigmoid_stack"
               for f in found)
    assert found[0] is nan  # the only error comes first

    table = page.findings_table(found)
    listed = rows(table)
    assert len(listed) == len(found)
    assert [r.id for r in listed] == [page.finding_id(i) for i in range(len(found))]
    first = [str(getattr(c, "children", "")) for c in listed[0].children]
    assert first[1:5] == ["first non finite", "log_of_zero", "7", "z_log_positive · forward"]
    assert "step 7" in first[5] and "z_log_positive" in first[5]
    assert page.summary_text(found, len(found), 3).endswith("in 3 trials")


def test_filters_by_severity_kind_and_trial(faulty):
    data = AppData(faulty)
    found = page.sort_findings(f for t in data.trial_ids() for f in data.findings(t))
    errors = page.filter_findings(found, ["error"], [], page.ALL_TRIALS)
    assert [(f["kind"], f["trial_id"]) for f in errors] == [("first_non_finite", "log_of_zero")]
    dead = page.filter_findings(found, ["error", "warning", "info"], ["dead_units"], None)
    assert {f["trial_id"] for f in dead} == {"dying_relu"}
    one_trial = page.filter_findings(found, ["error", "warning", "info"], [], "sigmoid_stack")
    assert one_trial and {f["trial_id"] for f in one_trial} == {"sigmoid_stack"}
    assert page.filter_findings(found, [], [], None) == []


def test_a_click_opens_the_place_of_the_finding(faulty):
    data = AppData(faulty)
    source = data.option_source()
    nan = by_kind(data.findings("log_of_zero"), "first_non_finite", "log_of_zero")
    # the user was looking at another trial, at a sample of it
    before = sel.choose(sel.refresh(None, source), "trial", "dying_relu", source)
    opened = sel.open_where(before, nan["where"], source)
    assert opened["current"] == {
        "trial": "log_of_zero", "type_of_execution": nan["where"]["type_of_execution"],
        "training_step": 7, "iteration": 0, "node": "z_log_positive",
        "role": "z_log_positive", "recording_type": FORWARD,
        "aggregation": nan["where"]["aggregation"],
    }
    assert opened["statistic"] == nan["where"]["statistic"] == "inf_count"
    # what the Tensors page shows there: the Inf
    record = data.read_tensor(opened["current"])
    assert record.stats["inf_count"] >= 1


def test_a_finding_about_the_whole_run_opens_a_valid_selection(faulty):
    data = AppData(faulty)
    source = data.option_source()
    low = next(f for f in data.findings("sigmoid_stack") if f["recording_type"] == UPDATE)
    assert not low["steps"] and low["where"]["iteration"] == -1  # step level, no step
    opened = sel.open_where(None, low["where"], source)
    current = opened["current"]
    assert current["trial"] == "sigmoid_stack" and current["node"] == low["node"]
    assert current["recording_type"] == UPDATE
    assert current["type_of_execution"] == ANY_TYPE
    assert all(current[f] is not None for f in sel.CHAIN)  # the Tensors page shows it
    assert data.read_tensor(current).stats["update_ratio"] < 1e-7  # it barely learns


def test_new_data_is_scanned_again(tmp_path):
    from tests.analysis import loops

    data = AppData(tmp_path / "live")  # nothing recorded yet
    assert data.findings("log_of_zero") == []
    loops.dying_relu(tmp_path, group="live", kill_at=None)  # healthy
    data.refresh(force=True)
    healthy = data.findings("dying_relu")
    assert not [f for f in healthy if f["severity"] != "info"]
    assert data.findings("dying_relu") is healthy  # cached while nothing changes
    loops.log_of_zero(tmp_path, group="live")  # a new trial with a NaN arrives
    data.refresh(force=True)
    found = data.findings("log_of_zero")
    assert [f["steps"] for f in found if f["kind"] == "first_non_finite"] == [[7]]


def test_the_paint_bar_is_off_by_default():
    bar = tensors.paint_bar()
    statistic = next(c for c in _components(bar) if getattr(c, "id", None)
                     == tensors.PAINT_STATISTIC)
    assert statistic.value == tensors.PAINT_OFF and not tensors.is_painting(statistic.value)
    play = next(c for c in _components(bar) if getattr(c, "id", None) == tensors.PLAY_TICK)
    assert play.disabled
    assert tensors.next_play_index(3, 5) == (4, True)
    assert tensors.next_play_index(4, 5) == (5, False)  # the last step: it stops


def test_a_running_trial_is_scanned_again_after_a_pause(tmp_path, tiny_run_class):
    run = tiny_run_class(tmp_path, "live", "trial_live", record_steps=range(12))
    run.run(range(3))
    run.recorder.flush()
    data = AppData(tmp_path / "live")
    assert data.trial_info("trial_live").status == "running"
    data.findings_pause = 1e9  # the next scan of a running trial is never due
    first = data.findings("trial_live")
    scanned = data.findings_version("trial_live")
    assert scanned == data.trial_version("trial_live") > 0

    run.run(range(3, 6))
    run.recorder.flush()
    data.refresh(force=True)
    assert data.trial_version("trial_live") > scanned
    assert data.findings("trial_live") is first  # paused: the last scan's findings
    assert data.findings_version("trial_live") == scanned

    data.findings_pause = 0.0  # due at once
    data.findings("trial_live")
    assert data.findings_version("trial_live") == data.trial_version("trial_live")

    run.finalize()
    data.refresh(force=True)
    data.findings_pause = 1e9
    data.findings("trial_live")  # a finished trial is scanned at its newest version
    assert data.trial_info("trial_live").status == "finished"
    assert data.findings_version("trial_live") == data.trial_version("trial_live")
