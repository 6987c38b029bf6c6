"""The Flight page's views (app/pages/flight/views.py) on a real triggered group, as its
thin callbacks call them: what each shows, and that a view sends nothing (or only a
patch) when the browser shows it already."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app.data import AppData
from dash import Patch, no_update

from tests.app.test_flight_data import NAN, SPIKE, TRIAL, make_triggered_group


@pytest.fixture(scope="module")
def triggered(tmp_path_factory) -> Path:
    return make_triggered_group(tmp_path_factory.mktemp("flight_views"))


@pytest.fixture()
def data(triggered) -> AppData:
    return AppData(triggered)


SELECTION = {"current": {"trial": TRIAL}}


def test_triggers_view_picks_the_latest_a_click_or_the_url_and_sends_nothing_twice(data):
    from comgra_like.app import ids
    from comgra_like.app.pages import flight
    from comgra_like.app.pages.flight import views

    shown = views.triggers_view(data, SELECTION, "", None, False, None, None)
    title, empty, style, table, options, name, key = shown
    assert title == f"Flight recorder · {TRIAL}" and empty is None and style == {}
    assert [o["value"] for o in options] == [SPIKE, NAN] and name == NAN
    assert "flight-trigger-row table-active" in str(table)
    assert key == [TRIAL, [SPIKE, NAN], NAN]
    # the same key comes back from the browser: nothing is sent
    assert views.triggers_view(data, SELECTION, "", None, False, NAN, key) == (no_update,) * 7
    # a click on the first row (a real one) picks it; a row that appeared does not
    row = flight.trigger_row_id(0)
    assert views.triggers_view(data, SELECTION, "", row, True, NAN, key)[5] == SPIKE
    assert views.triggers_view(data, SELECTION, "", row, False, NAN, key) == (no_update,) * 7
    # a link to a trigger
    search = "?" + flight.link(TRIAL, SPIKE).split("?", 1)[1]
    assert views.triggers_view(data, SELECTION, search, ids.URL, False, NAN, key)[5] == SPIKE
    # a trial without windows: the empty state, the body hidden
    empty = views.triggers_view(data, {"current": {"trial": "nothing"}}, "", None, False,
                                None, None)
    assert empty[2] == {"display": "none"} and "flight-empty" in str(empty[1])


def test_trigger_tensor_and_player(data):
    from comgra_like.app.pages import flight
    from comgra_like.app.pages.flight import views

    options, role, first, last, marks, start, movers = views.trigger_view(
        data, NAN, SELECTION, None)
    assert (first, last, start) == (40, 55, 55) and role == "value"
    assert "⚑" in marks[55]["label"]
    assert "value" in [o["value"] for o in options] and "First non-finite" in str(movers)
    assert views.trigger_view(data, None, SELECTION, None)[0] == []
    names, tensor = views.tensor_view(data, NAN, "value", SELECTION, None, True)
    assert tensor == "layer1" and {"label": "layer1", "value": "layer1"} in names
    # a tensor of the window is kept when only the role fired
    assert views.tensor_view(data, NAN, "value", SELECTION, "input", False)[1] == "input"
    # the player: play from the start, a tick, the end, a click on the chart
    assert views.play_step(flight.PLAY, None, True, 55, 40, 55) == (40, False,
                                                                    flight.PAUSE_LABEL)
    assert views.play_step(flight.PLAY, None, False, 44, 40, 55) == (no_update, True,
                                                                     flight.PLAY_LABEL)
    assert views.play_step(flight.PLAY_TICK, None, False, 44, 40, 55) == (45, no_update,
                                                                          no_update)
    assert views.play_step(flight.PLAY_TICK, None, False, 55, 40, 55) == (no_update, True,
                                                                          flight.PLAY_LABEL)
    click = {"points": [{"x": 47}]}
    assert views.play_step(flight.CHART, click, False, 44, 40, 55) == (47, True,
                                                                       flight.PLAY_LABEL)


def test_chart_and_graph_patch_or_send_nothing_when_shown(data):
    from comgra_like.app.pages.flight import views

    figure, key = views.chart_view(data, NAN, "value", "layer1", "norm", 50, SELECTION, None)
    assert not isinstance(figure, Patch) and key == {
        "what": [TRIAL, NAN, "value", "layer1", "norm"], "step": 50}
    patch, moved = views.chart_view(data, NAN, "value", "layer1", "norm", 51, SELECTION, key)
    assert isinstance(patch, Patch) and moved["step"] == 51
    figure, note, text, summary, key = views.graph_view(data, NAN, "value", "norm", 50,
                                                        SELECTION, None)
    assert not isinstance(figure, Patch) and "painted" in note and text == "step 50"
    assert key["step"] == 50
    same = views.graph_view(data, NAN, "value", "norm", 50, SELECTION, key)
    assert same == (no_update, no_update, "step 50", summary, no_update)
    patch, note, text, _summary, moved = views.graph_view(data, NAN, "value", "norm", 55,
                                                          SELECTION, key)
    assert isinstance(patch, Patch) and note is no_update
    assert text == "step 55 · the trigger" and moved == {**key, "step": 55}


def test_a_link_selects_its_trial(data):
    from comgra_like.app.pages import flight
    from comgra_like.app.pages.flight import views

    search = "?" + flight.link(TRIAL).split("?", 1)[1]
    chosen = views.selection_from_url(data, search, flight.PATH, None)
    assert views.current_trial(chosen) == TRIAL
    assert views.selection_from_url(data, search, flight.PATH, SELECTION) is no_update
    assert views.selection_from_url(data, search, "/", None) is no_update
    assert views.selection_from_url(data, "?trial=gone", flight.PATH, None) is no_update
