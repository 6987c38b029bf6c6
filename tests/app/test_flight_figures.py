"""The Flight page's pure builders (app/flight_figures.py) on a real triggered group
(tests/app/test_flight_data.py), and the page's pure pieces (links, the trigger table,
the empty state, the Findings page's link to a trigger)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from comgra_like.app import flight_data as fd
from comgra_like.app import flight_figures as ff
from comgra_like.app.data import AppData
from comgra_like.app.graph_figure import NON_FINITE_COLOR, build_graph_figure, node_style

from .test_flight_data import NAN, SPIKE, TRIAL, make_triggered_group


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> AppData:
    return AppData(make_triggered_group(tmp_path_factory.mktemp("flight_figures")))


def test_window_figure_puts_the_dense_window_beside_the_recorded_steps(data):
    rows = fd.window_rows(data, TRIAL, NAN)
    trigger = fd.pick_trigger(fd.triggers(data, TRIAL), NAN)
    window = fd.window_series(rows, "layer1", "value", "norm")
    recorded, aggregation = fd.recorded_series(data, TRIAL, rows, "layer1", "value", "norm")
    figure = ff.window_figure(window, recorded, statistic="norm", tensor="layer1",
                              role="value", window=trigger.window, trigger_step=55,
                              current_step=47, aggregation=aggregation)
    traces = {t["name"]: t for t in figure["data"]}
    dense = traces[ff.FLIGHT_TRACE_NAME]
    assert dense["x"] == list(range(40, 56))
    assert dense["y"][-1] is None and all(v is not None for v in dense["y"][:-1])  # NaN: a hole
    assert traces[ff.NON_FINITE_TRACE_NAME]["x"] == [55]  # ... and a red cross
    assert traces[ff.NON_FINITE_TRACE_NAME]["y"] == [dense["y"][-2]]
    sparse = traces["recorded steps (batch mean)"]
    assert sparse["x"] == [0, 10, 20, 30, 31, 32, 42, 52, 56, 57, 67]
    # the view: the window and the nearest recorded step on each side
    low, high = figure["layout"]["xaxis"]["range"]
    assert low < 32 and 56 < high < 57  # recorded steps 32 and 56: the nearest
    assert figure["layout"]["meta"] == {"flight_steps": 16, "recorded_in_view": 4}
    title = figure["layout"]["title"]["text"]
    assert "16 steps in the flight window, 4 recorded steps in view" in title
    assert "not the whole tensor's number" in title  # per-sample norms, aggregated
    rect, trigger_line, player = figure["layout"]["shapes"]
    assert (rect["x0"], rect["x1"]) == (39.5, 55.5)
    assert trigger_line["x0"] == 55 and player["x0"] == 47
    # a parameter: the same number, nothing to say
    p_window = fd.window_series(rows, "net.0.weight", "value", "norm")
    p_recorded, p_agg = fd.recorded_series(data, TRIAL, rows, "net.0.weight", "value", "norm")
    title = ff.window_figure(p_window, p_recorded, statistic="norm", tensor="net.0.weight",
                             role="value", window=(40, 55), trigger_step=55, current_step=None,
                             aggregation=p_agg)["layout"]["title"]["text"]
    assert "not the whole" not in title
    empty = ff.window_figure(window.iloc[:0], recorded, statistic="norm", tensor="x",
                             role="value", window=(40, 55), trigger_step=55, current_step=None)
    assert empty["data"] == []


def test_window_paint_shows_each_step_on_one_scale(data):
    rows = fd.window_rows(data, TRIAL, NAN)
    trigger = fd.pick_trigger(fd.triggers(data, TRIAL), NAN)
    _, model = fd.window_graph(data, TRIAL, trigger)
    scale = ff.window_scale(rows, "norm", "value")
    finite = rows.loc[rows["role"] == "value", "l2_norm"].to_numpy()
    finite = finite[np.isfinite(finite)]
    assert (scale.low, scale.high) == (pytest.approx(finite.min()), pytest.approx(finite.max()))
    at = {s: ff.window_paint(rows, s, "norm", "value", scale) for s in (40, 50, 55)}
    # every node of the graph has its value (the registered tensors and parameters)
    assert set(at[40].values) == set(model.nodes)
    assert at[40].values["layer1"].value == pytest.approx(fd.window_series(
        rows, "layer1", "value", "norm")["value"].iloc[0])
    colours = {s: {n: node_style(p, n, False)[:2] for n in model.nodes} for s, p in at.items()}
    assert colours[40] != colours[50]  # the player's steps look different
    assert colours[55]["layer1"] == (NON_FINITE_COLOR, NON_FINITE_COLOR)  # NaN: red
    assert colours[50]["layer1"][1] != NON_FINITE_COLOR
    assert not at[55].values["net.0.weight"].non_finite  # a parameter before the NaN
    # gradients: the NaN step's gradients are non-finite from the loss back
    grads = ff.window_paint(rows, 55, "norm", "gradient", ff.window_scale(rows, "norm",
                                                                          "gradient"))
    assert grads.values["output"].non_finite and not grads.values["loss"].non_finite
    figure = build_graph_figure(model, paint=at[40])
    assert "L2 norm of the value" in str(figure.to_dict()["data"])


def test_flight_trace_and_the_player_steps():
    trace = ff.flight_trace([3, 4, 5], [1.0, math.inf, 2.0], "mean")
    assert trace["name"] == "flight window" and trace["y"] == [1.0, None, 2.0]
    assert ff.non_finite_trace([3, 4], [1.0, 2.0], "mean") is None
    assert ff.next_step([3, 4, 5], 3) == 4
    assert ff.next_step([3, 4, 5], 5) is None
    assert ff.next_step([3, 4, 5], None) == 3
    assert ff.next_step([], 1) is None
    assert ff.when_text(None) == "" and ff.when_text(0.0) == "1970-01-01 00:00:00 UTC"
    assert ff.kind_label("non_finite") == "NaN / Inf"
    assert ff.samples_text(list(range(880, 896))) == "samples 880–895"
    assert ff.samples_text([5]) == "sample 5" and ff.samples_text(None) == ""
    assert ff.samples_text(["a", "b"]) == "2 samples: a, b"
    assert ff.samples_text(list(range(10, 0, -1))) == "10 samples: 10, 9, 8, 7, 6, 5, …"
    assert ff.value_text(float("nan")) == "nan" and ff.value_text(13840.84) == "1.384e+04"


def test_page_links_table_and_empty_state(data):
    from comgra_like.app.pages import findings, flight

    assert flight.link("a b", "0001-r0-step55") == "/flight?trial=a+b&trigger=0001-r0-step55"
    assert flight.url_wish("?trial=a+b&trigger=x") == ("a b", "x")
    assert flight.url_wish(None) == (None, None)
    rows = fd.triggers(data, TRIAL)
    table = flight.triggers_table(rows, NAN)
    body = table.children[1].children
    assert [r.className for r in body] == ["flight-trigger-row",
                                           "flight-trigger-row table-active"]
    assert "gradient-norm spike" in str(body[0].children[0].children)  # the other triggers
    empty = str(flight.empty_state("clean", [TRIAL]))
    assert "FlightRecorder" in empty and "docs/FLIGHT.md" in empty
    assert flight.link(TRIAL) in empty
    # the Findings page: a flight finding opens the Flight page at its trigger
    found = data.findings(TRIAL)
    spike = next(f for f in found if f["kind"] == "flight_loss_spike")
    assert findings.flight_window(spike) == SPIKE
    assert findings.place_of(spike)["flight_window"] == SPIKE
    assert findings.place_of(spike)["trial"] == TRIAL
    other = {"kind": "first_non_finite", "trial_id": TRIAL, "where": {"trial": TRIAL}}
    assert findings.flight_window(other) is None and "flight_window" not in findings.place_of(
        other)
    html = str(findings.findings_table([spike, {**other, "severity": "error",
                                                "explanation": "x", "steps": [1]}]))
    assert html.count("finding-flight-link") == 1
    assert flight.link(TRIAL, SPIKE) in html
    assert flight.start_step(rows[1], data.findings(TRIAL) and fd.trigger_finding(
        data, TRIAL, NAN)) == 55


def test_an_unreadable_window_paints_nothing():
    empty = pd.DataFrame()
    assert ff.window_scale(empty, "norm", "value") is None
    paint = ff.window_paint(empty, 3, "norm", "value", None)
    assert paint.values == {} and paint.step == 3
    assert fd.window_tensors(empty, "value") == [] and fd.window_roles(empty) == []
    assert fd.tensor_node(empty, "x") is None


def test_the_tensors_page_chart_gets_the_dense_windows(data):
    from comgra_like.app import figures

    current = {"trial": TRIAL, "node": "layer1", "role": "layer1", "recording_type": "forward",
               "aggregation": "batch_mean", "training_step": 56, "iteration": 0,
               "type_of_execution": "main_execution_type"}
    frame = fd.tensors_page_series(data, current, "norm")
    assert frame["training_step"].tolist() == list(range(15, 31)) + list(range(40, 56))
    assert set(frame["trigger"]) == {SPIKE, NAN}
    figure = figures.series_figure(data.read_series(current, "norm"), "norm", 56)
    recorded = list(figure["data"])
    ff.add_flight_window(figure, frame, "norm", "batch_mean")
    assert figure["data"][:-1] == recorded  # the recorded steps' traces stay as they were
    dense = figure["data"][-1]
    assert dense["name"] == "flight window (whole tensor)"  # per-sample chart, whole tensor
    assert dense["x"] == list(range(15, 31)) + [None] + list(range(40, 56))  # two windows
    assert dense["y"][16] is None and dense["y"][-1] is None  # the gap, the NaN
    assert "customdata" not in dense  # a click selects recorded steps only
    assert figure["layout"]["showlegend"]
    # each window shaded, after the step marker
    marker, *bands = figure["layout"]["shapes"]
    assert marker == figures.step_marker_shapes(56)[0]
    assert [(b["type"], b["x0"], b["x1"], b["layer"]) for b in bands] == [
        ("rect", 14.5, 30.5, "below"), ("rect", 39.5, 55.5, "below")]
    # a parameter's chart: the same number (no batch), its gradient too
    param = {**current, "node": "net.0.weight", "role": "net.0.weight", "aggregation": "none"}
    frame = fd.tensors_page_series(data, param, "norm")
    assert len(frame) == 32
    named = ff.add_flight_window(figures.series_figure(data.read_series(param, "norm"), "norm",
                                                       56), frame, "norm", "none")
    assert named["data"][-1]["name"] == "flight window"
    grads = fd.tensors_page_series(data, {**param, "recording_type": "gradient:default"}, "mean")
    assert len(grads) == 32 and grads["value"].iloc[:-1].notna().all()  # NaN at step 55
    # nothing to add: one sample, a statistic no window row has, a trial without windows
    assert fd.tensors_page_series(data, {**current, "aggregation": "sample:0"}, "norm") is None
    assert fd.tensors_page_series(data, param, "update_ratio") is None
    assert fd.tensors_page_series(data, {**current, "trial": "none"}, "norm") is None
    assert ff.add_flight_window(recorded_figure := {"data": [1]}, None, "norm") is recorded_figure


def test_a_step_change_moves_the_marker_and_keeps_the_shaded_windows(data, monkeypatch):
    from comgra_like.app.pages.tensors import views
    from comgra_like.app.pages.tensors.views import series_view
    from comgra_like.app.timings import Timings

    current = {"trial": TRIAL, "node": "layer1", "role": "layer1", "recording_type": "forward",
               "aggregation": "batch_mean", "training_step": 56, "iteration": 0,
               "type_of_execution": "main_execution_type"}
    selection = {"current": current, "statistic": "norm"}
    figure, key = series_view(data, Timings(), 0.0, selection, None, None)
    bands = [s for s in figure["layout"]["shapes"] if s["type"] == "rect"]
    assert len(bands) == 2
    moved = {**selection, "current": {**current, "training_step": 20}}

    def no_read(*args, **kwargs):
        raise AssertionError("a step change read the flight windows again")

    monkeypatch.setattr(views.flight_data, "tensors_page_series", no_read)
    patch, moved_key = series_view(data, Timings(), 0.0, moved, key, None)
    assert moved_key["bands"] == bands  # carried on to the next step change
    # the same step again: nothing to send
    assert series_view(data, Timings(), 0.0, moved, moved_key, None) == (
        views.no_update, views.no_update)
    shapes = patch.to_plotly_json()["operations"][0]["params"]["value"]
    assert shapes[0]["x0"] == 20 and shapes[1:] == bands


def test_step_summary_names_what_the_painted_graph_shows(data):
    rows = fd.window_rows(data, TRIAL, NAN)
    text = ff.step_summary(rows, 55, "norm", "value")
    assert text.startswith("NaN/Inf in 6: layer1, relu1, layer2, relu2 and 2 more")
    assert "changed most since step 54" in text
    assert "NaN" not in ff.step_summary(rows, 50, "norm", "value")
    assert ff.step_summary(rows, 40, "norm", "value") == ""  # the window's first step
    spike = ff.step_summary(fd.window_rows(data, TRIAL, SPIKE), 30, "norm", "gradient")
    assert spike.startswith("L2 norm changed most since step 29: ")
    factors = [float(p.rsplit("×", 1)[1]) for p in spike.split(": ", 1)[1].split(", ")]
    assert len(factors) == 4 and min(factors) > 10  # the bad batch: gradients ×10 and more
    assert ff.step_summary(rows, 99, "norm", "value") == "step 99: no value rows"
