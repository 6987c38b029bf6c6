"""The Metrics page's pure builders (issue 16) on frames with ``Group.read_metrics``'s
columns: a line per module with markers on the computed steps only, broken across holes
in the schedule, trials overlaid, epoch bands, spectra, the click's target and the
empty state."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest
from comgra_like.app import metric_figures as mfig

COLUMNS = ["training_step", "type_of_execution", "module", "module_class", "metric",
           "backward_pass", "value", "vector", "wall_time"]


def rows(metric: str, module: str, steps, values, *, backward_pass: int = 0,
         vectors=None) -> pd.DataFrame:
    vectors = vectors if vectors is not None else [None] * len(steps)
    return pd.DataFrame({
        "training_step": np.asarray(steps, dtype=np.int64), "type_of_execution": "train",
        "module": module, "module_class": "Linear", "metric": metric,
        "backward_pass": backward_pass, "value": np.asarray(values, dtype=np.float64),
        "vector": vectors, "wall_time": 0.0}, columns=COLUMNS)


def lines(figure: dict) -> list[dict]:
    """The traces a user reads as lines (those with a legend entry)."""
    return [t for t in figure["data"] if t.get("showlegend", True) and t["type"] == "scatter"]


def test_a_line_per_module_with_markers_on_the_computed_steps_only():
    # linear(5, 0) on fc1, every step on fc2: markers exactly where computed
    frame = pd.concat([rows("WeightNorm", "model.fc1", range(0, 50, 5), np.arange(10.0)),
                       rows("WeightNorm", "model.fc2", range(12), np.arange(12.0) * 2),
                       rows("InputSndNorm", "model.fc1", [0, 1], [7.0, 8.0])])
    figure = mfig.metric_figure({"trial_a": frame}, "WeightNorm")
    drawn = lines(figure)
    assert [t["name"] for t in drawn] == ["model.fc1", "model.fc2"]
    assert drawn[0]["x"] == list(range(0, 50, 5)) and "markers" in drawn[0]["mode"]
    assert drawn[0]["y"] == list(np.arange(10.0))
    assert drawn[1]["x"] == list(range(12))
    assert drawn[0]["line"]["color"] != drawn[1]["line"]["color"]
    # the same module keeps its colour when the page passes the colours
    colours = mfig.module_colours(["model.fc2", "model.fc1"])
    again = lines(mfig.metric_figure({"trial_a": frame}, "WeightNorm", colours=colours))
    assert again[0]["line"]["color"] == colours["model.fc1"] == mfig.COLOURS[1]
    # a module filter
    only = lines(mfig.metric_figure({"trial_a": frame}, "WeightNorm", modules=["model.fc2"]))
    assert [t["name"] for t in only] == ["model.fc2"]
    # a trace says whose it is; no per-point data (a long run's figure stays x and y)
    assert drawn[0]["meta"] == ["trial_a", "model.fc1", 0, None, None]
    assert not any("customdata" in t for t in figure["data"])
    click = {"points": [{"curveNumber": 0, "pointNumber": 3, "pointIndex": 3, "x": 15,
                         "y": 3.0}]}
    assert mfig.point_of(click, mfig.trace_meta(figure)) == {
        "trial": "trial_a", "module": "model.fc1", "training_step": 15, "backward_pass": 0,
        "rank": None}
    pio.from_json(json.dumps(figure))


def test_a_hole_in_the_schedule_breaks_the_line_instead_of_bridging_it():
    steps = [0, 5, 10, 15, 60, 65, 70]  # linear(5, 0), then not computed from 20 to 55
    figure = mfig.metric_figure({"t": rows("WeightNorm", "m", steps, range(7))}, "WeightNorm")
    line = lines(figure)[0]
    assert line["x"] == [0, 5, 10, 15, None, 60, 65, 70]
    assert line["y"][4] is None
    assert line["connectgaps"] is False
    assert list(mfig.breaks(np.asarray(steps))) == [4]
    # a regular schedule is one unbroken line
    assert list(mfig.breaks(np.arange(0, 100, 7))) == []


def test_trials_are_overlaid_with_their_own_line_style_and_named():
    a = rows("WeightNorm", "m", [0, 1, 2], [1.0, 2.0, 3.0])
    b = rows("WeightNorm", "m", [0, 2, 4], [3.0, 2.0, 1.0])
    figure = mfig.metric_figure({"trial_a": a, "trial_b": b}, "WeightNorm")
    drawn = lines(figure)
    assert [t["name"] for t in drawn] == ["m · trial_a", "m · trial_b"]
    assert drawn[0]["line"]["color"] == drawn[1]["line"]["color"]  # the same module
    assert drawn[0]["line"]["dash"] != drawn[1]["line"]["dash"]
    assert drawn[1]["x"] == [0, 2, 4] and drawn[1]["meta"][0] == "trial_b"


def test_per_backward_pass_metrics_are_one_line_per_pass():
    frame = pd.concat([rows("OutputGradRMS", "m", [0, 1], [1.0, 2.0], backward_pass=0),
                       rows("OutputGradRMS", "m", [0, 1], [5.0, 6.0], backward_pass=1)])
    drawn = lines(mfig.metric_figure({"t": frame}, "OutputGradRMS"))
    assert [t["name"] for t in drawn] == ["m · pass 0", "m · pass 1"]
    assert drawn[1]["y"] == [5.0, 6.0] and drawn[1]["meta"][2] == 1


@pytest.mark.parametrize("how", ["std", "min-max", "q1-q3"])
def test_epoch_bands_are_the_mean_and_band_of_each_window(how):
    rng = np.random.default_rng(0)
    steps = np.arange(0, 40)
    values = rng.normal(size=40)
    values[7] = np.nan  # a failed computation is left out, not counted as a value
    figure = mfig.metric_figure({"t": rows("WeightNorm", "m", steps, values)}, "WeightNorm",
                                window=10, how=how)
    mean = next(t for t in figure["data"] if t["name"] == "m")
    fill = next(t for t in figure["data"] if t.get("fill") == "toself")
    faint = next(t for t in figure["data"] if t["name"] == "m points")
    assert faint["x"] == steps.tolist()  # the computed points stay visible
    for k in range(4):
        chunk = values[k * 10:(k + 1) * 10]
        chunk = chunk[np.isfinite(chunk)]
        assert mean["y"][k] == pytest.approx(chunk.mean())
        expected = {"std": (chunk.mean() - chunk.std(), chunk.mean() + chunk.std()),
                    "min-max": (chunk.min(), chunk.max()),
                    "q1-q3": (np.quantile(chunk, 0.25), np.quantile(chunk, 0.75))}[how]
        # the outline: upper edge forwards, lower edge backwards
        assert fill["y"][k] == pytest.approx(expected[1])
        assert fill["y"][7 - k] == pytest.approx(expected[0])
        # a click on a window's mean opens its last computed step
        curve = figure["data"].index(mean)
        click = {"points": [{"curveNumber": curve, "pointIndex": k, "x": mean["x"][k]}]}
        assert mfig.point_of(click, mfig.trace_meta(figure))["training_step"] == k * 10 + 9
    assert mean["x"][0] == pytest.approx(4.5)
    assert "mean per 10 steps" in figure["layout"]["title"]["text"]


def test_windows_without_computed_steps_break_the_mean_line_and_the_band():
    steps = [0, 1, 2, 3, 30, 31]  # windows 0 and 3 (window 5): nothing in 1 and 2
    w = mfig.aggregate_windows(np.asarray(steps), np.arange(6.0), 5, "min-max")
    assert w.index.tolist() == [0, 6] and w.count.tolist() == [4, 2]
    assert w.lo.tolist() == [0.0, 4.0] and w.hi.tolist() == [3.0, 5.0]
    figure = mfig.metric_figure({"t": rows("X", "m", steps, range(6))}, "X", window=5,
                                how="min-max")
    mean = next(t for t in figure["data"] if t["name"] == "m")
    assert mean["y"][1] is None
    with pytest.raises(ValueError, match="at least 1"):
        mfig.aggregate_windows(np.asarray(steps), np.arange(6.0), 0)


def test_a_spectrum_at_the_chosen_step_or_the_latest_before_it():
    vectors = [np.array([4.0, 2.0, 1.0]), np.array([8.0, 3.0, 0.5]), np.array([9.0, 1.0, 0.1])]
    frame = pd.concat([
        rows("InputCovSpectrum", "model.fc1", [0, 10, 20], [v[0] for v in vectors],
             vectors=vectors),
        rows("InputCovSpectrum", "model.fc2", [0, 20], [1.0, 2.0],
             vectors=[np.array([1.0, 0.5]), np.array([2.0, 0.25])]),
    ])
    assert mfig.is_vector(frame, "InputCovSpectrum")
    assert not mfig.is_vector(rows("WeightNorm", "m", [0], [1.0]), "WeightNorm")
    figure = mfig.spectrum_figure({"t": frame}, "InputCovSpectrum", 10)
    by_name = {t["name"]: t for t in figure["data"]}
    assert by_name["model.fc1"]["y"] == [8.0, 3.0, 0.5]
    assert by_name["model.fc1"]["x"] == [1, 2, 3]
    # fc2 was not computed at step 10: its vector of step 0, named so
    assert by_name["model.fc2 (step 0)"]["y"] == [1.0, 0.5]
    assert figure["layout"]["yaxis"]["type"] == "log"
    latest = mfig.spectrum_figure({"t": frame}, "InputCovSpectrum", None)
    assert {t["name"]: t["y"] for t in latest["data"]}["model.fc1"] == [9.0, 1.0, 0.1]
    before_any = mfig.spectrum_figure({"t": frame[frame["training_step"] > 0]},
                                      "InputCovSpectrum", 5)
    assert "No InputCovSpectrum vector at or before step 5" in json.dumps(before_any)
    pio.from_json(json.dumps(figure))


def test_ranks_side_by_side_are_a_line_each_in_the_modules_colour():
    a = rows("OutputNorm", "m", [0, 1, 2], [1.0, 1.1, 1.2]).assign(rank=0)
    b = rows("OutputNorm", "m", [0, 1, 2], [1.0, 1.5, 2.5]).assign(rank=1)
    figure = mfig.metric_figure({"t": pd.concat([a, b])}, "OutputNorm")
    drawn = lines(figure)
    assert [t["name"] for t in drawn] == ["m · rank 0", "m · rank 1"]
    assert drawn[1]["y"] == [1.0, 1.5, 2.5]
    assert drawn[0]["line"]["color"] == drawn[1]["line"]["color"]
    assert drawn[0]["line"]["dash"] != drawn[1]["line"]["dash"]
    click = {"points": [{"curveNumber": 1, "pointIndex": 2, "x": 2, "y": 2.5}]}
    assert mfig.point_of(click, mfig.trace_meta(figure))["rank"] == 1


def test_the_figure_of_a_long_series_carries_no_per_point_data():
    steps = np.arange(0, 50_000, 5)
    frame = pd.concat([rows("OutputNorm", m, steps, np.sin(steps / 100.0))
                       for m in ("a", "b")])
    figure = mfig.metric_figure({"t": frame}, "OutputNorm")
    size = len(json.dumps(figure))
    # x and y of 2 x 10,000 points: ~20 bytes a point; a per-point click payload of
    # [trial, module, step, pass] (as before) added ~25 more
    assert size < 2 * len(steps) * 30, size


def test_a_click_names_trial_module_and_step_and_the_empty_state_says_how():
    traces = [["trial_a", "model.fc1", 0, None, None], None]
    click = {"points": [{"curveNumber": 0, "pointIndex": 2, "x": 15, "y": 1.0}]}
    assert mfig.point_of(click, traces) == {"trial": "trial_a", "module": "model.fc1",
                                            "training_step": 15, "backward_pass": 0,
                                            "rank": None}
    # a band (no meta), a trace index the figure no longer has, no event
    assert mfig.point_of({"points": [{"curveNumber": 1, "pointIndex": 0, "x": 1}]},
                         traces) is None
    assert mfig.point_of({"points": [{"curveNumber": 5, "pointIndex": 0, "x": 1}]},
                         traces) is None
    assert mfig.point_of(None, traces) is None
    reason = mfig.empty_reason(["trial_a"], {"trial_a": pd.DataFrame()})
    assert "No metrics recorded in trial_a" in reason and "watch(model, metrics=" in reason
    assert mfig.empty_reason([], {}) == "No trial selected."
    listing = pd.DataFrame({"module": ["m", "m", "m"], "module_class": ["L"] * 3,
                            "metric": ["zzz_user", "InputSndNorm", "WeightNorm"],
                            "n_points": [1, 1, 1]})
    assert mfig.empty_reason(["t"], {"t": listing}) is None
    order = mfig.metric_order(listing)
    assert order[-1] == "zzz_user" and set(order) == {"zzz_user", "InputSndNorm", "WeightNorm"}
    empty = mfig.metric_figure({"t": pd.DataFrame(columns=COLUMNS)}, "WeightNorm")
    assert "No values of WeightNorm" in json.dumps(empty)
