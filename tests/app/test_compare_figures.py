"""The Compare page's pure builders: alignment by step, smoothing, groups by a config
value with their mean and band, the overlay figure and the trials table's rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from comgra_like.app import compare_figures as cf
from comgra_like.app.typed_figures import typed_values


def test_as_series_sorts_by_step_and_keeps_the_last_of_a_repeated_step():
    s, v = cf.as_series([4, 0, 2, 2], [40.0, 0.0, 20.0, 21.0])
    assert s.tolist() == [0, 2, 4] and v.tolist() == [0.0, 21.0, 40.0]
    with pytest.raises(ValueError):
        cf.as_series([1, 2], [1.0])


def test_smoothing_is_a_bias_corrected_ema_that_skips_nan():
    values = np.array([1.0, 3.0, np.nan, 5.0, 2.0])
    assert np.array_equal(cf.smooth(values, 0.0), values, equal_nan=True)
    w = 0.6
    out = cf.smooth(values, w)
    # by hand: ema_t = w ema + (1-w) x over the finite points, divided by 1 - w^n
    finite = [1.0, 3.0, 5.0, 2.0]
    ema, expected = 0.0, []
    for n, x in enumerate(finite, start=1):
        ema = w * ema + (1 - w) * x
        expected.append(ema / (1 - w ** n))
    assert np.isnan(out[2])
    assert np.allclose(out[[0, 1, 3, 4]], expected)
    assert out[0] == 1.0  # the first point is not pulled towards 0
    # smoothing narrows a noisy series' spread
    noisy = np.random.default_rng(0).normal(size=500)
    assert cf.smooth(noisy, 0.9).std() < 0.5 * noisy.std()
    with pytest.raises(ValueError):
        cf.smooth(values, 1.0)


def test_align_puts_trials_of_different_recorded_steps_on_the_union_of_steps():
    series = {"a": cf.as_series([0, 10, 20], [1.0, 2.0, 3.0]),
              "b": cf.as_series([5, 10, 30], [7.0, 8.0, 9.0])}
    steps, matrix = cf.align(series)
    assert steps.tolist() == [0, 5, 10, 20, 30]
    nan = np.nan
    assert np.array_equal(matrix, [[1, nan, 2, 3, nan], [nan, 7, 8, nan, 9]], equal_nan=True)
    # filled within a trial's own range only
    assert np.array_equal(cf.fill_within(steps, matrix[0]), [1, 1.5, 2, 3, nan],
                          equal_nan=True)
    assert np.array_equal(cf.fill_within(steps, matrix[1]), [nan, 7, 8, 8.5, 9],
                          equal_nan=True)


def test_group_mean_and_bands_equal_numpy_over_the_group():
    rng = np.random.default_rng(1)
    steps = np.arange(0, 100, 5)
    matrix = rng.normal(size=(4, len(steps)))
    stats = cf.group_stats(steps, matrix, cf.BAND_STD)
    assert np.allclose(stats["mean"], matrix.mean(axis=0))
    assert np.allclose(stats["upper"] - stats["mean"], matrix.std(axis=0))
    assert np.allclose(stats["mean"] - stats["lower"], matrix.std(axis=0))
    assert stats["count"].tolist() == [4] * len(steps)
    stats = cf.group_stats(steps, matrix, cf.BAND_MINMAX)
    assert np.allclose(stats["lower"], matrix.min(axis=0))
    assert np.allclose(stats["upper"], matrix.max(axis=0))
    with pytest.raises(ValueError):
        cf.group_stats(steps, matrix, "iqr")


def test_a_group_of_trials_with_other_steps_averages_what_each_trial_covers():
    series = {"a": cf.as_series([0, 10, 20], [0.0, 10.0, 20.0]),
              "b": cf.as_series([0, 5, 10], [2.0, 2.0, 2.0])}
    steps, matrix = cf.align(series)
    stats = cf.group_stats(steps, matrix, cf.BAND_MINMAX)
    assert steps.tolist() == [0, 5, 10, 20]
    # step 5: a interpolated to 5, b recorded 2; step 20: only a (b ended at 10)
    assert stats["mean"].tolist() == [1.0, 3.5, 6.0, 20.0]
    assert stats["count"].tolist() == [2, 2, 2, 1]
    assert stats["lower"].tolist() == [0.0, 2.0, 2.0, 20.0]


def test_group_trials_by_a_config_value_in_natural_order():
    config = {"t1": 0.1, "t2": 0.01, "t3": 0.1, "t4": None, "t5": 1}
    groups = cf.group_trials(["t1", "t2", "t3", "t4", "t5"], config)
    assert groups == {"0.01": ["t2"], "0.1": ["t1", "t3"], "1": ["t5"],
                      cf.MISSING_GROUP: ["t4"]}


def test_overlay_has_one_line_per_trial_or_per_group_with_its_band():
    series = {f"t{i}": cf.as_series(np.arange(10), np.arange(10) * (i + 1.0)) for i in range(4)}
    series["empty"] = cf.as_series([], [])
    fig = cf.overlay_figure(series, "loss")
    assert [t["name"] for t in fig["data"]] == ["t0", "t1", "t2", "t3"]
    assert list(typed_values(fig["data"][2]["y"])) == list(np.arange(10) * 3.0)
    assert list(typed_values(fig["data"][2]["x"])) == list(range(10))
    smoothed = cf.overlay_figure(series, "loss", weight=0.5)
    assert list(typed_values(smoothed["data"][1]["y"])) == list(cf.smooth(np.arange(10) * 2.0,
                                                                          0.5))
    groups = {"0.1": ["t0", "t1"], "0.3": ["t2", "t3"]}
    fig = cf.overlay_figure(series, "loss", groups=groups, group_key="lr")
    names = [t["name"] for t in fig["data"]]
    assert names == ["lr=0.1 (2) band", "lr=0.1 (2)", "lr=0.3 (2) band", "lr=0.3 (2)"]
    assert np.allclose(typed_values(fig["data"][1]["y"]), np.arange(10) * 1.5)
    upper = typed_values(fig["data"][0]["y"])[:10]
    assert np.allclose(upper, np.arange(10) * 1.5 + np.arange(10) * 0.5)
    fig = cf.overlay_figure(series, "loss", groups=groups, band=cf.BAND_NONE)
    assert len(fig["data"]) == 2
    assert cf.overlay_figure({"e": cf.as_series([], [])}, "x")["layout"]["annotations"]


def test_overlay_figure_shows_names_as_text_and_is_json():
    series = {"<b>lr</b>%{x}": cf.as_series([0, 1], [1.0, 2.0])}
    fig = cf.overlay_figure(series, "mean of <i>x</i>")
    trace = fig["data"][0]
    assert trace["name"] == "&lt;b&gt;lr&lt;/b&gt;&#37;{x}"
    assert trace["hovertemplate"].startswith("&lt;b&gt;lr&lt;/b&gt;&#37;{x}<br>")
    assert fig["layout"]["title"]["text"] == "mean of &lt;i&gt;x&lt;/i&gt;"
    json.dumps(fig)  # plain JSON: what Dash sends


def test_table_rows_carry_the_trial_id_and_search_every_column():
    frame = pd.DataFrame({"trial_id": ["a", "b", "c"], "status": ["finished"] * 3,
                          "created": [0.0, 60.0, 120.0], "config.lr": [0.1, 0.01, None],
                          "config.opt": ["sgd", "adam", "sgd"],
                          "kpi.loss": [1.5, float("nan"), 0.5]})
    rows = cf.table_rows(frame)
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    assert rows[2]["config.lr"] is None and rows[1]["kpi.loss"] is None
    assert rows[1]["created"] == "1970-01-01 00:01"
    assert [r["id"] for r in cf.table_rows(frame, "SGD")] == ["a", "c"]
    assert [r["id"] for r in cf.table_rows(frame, "sgd -lr=0.1")] == ["c"]
    columns = {c["id"]: c for c in cf.table_columns(frame)}
    assert columns["config.lr"]["type"] == "numeric"
    assert columns["config.opt"]["type"] == "text"
    assert columns["kpi.loss"]["name"] == "kpi loss"


def test_the_graph_is_painted_by_the_relative_difference_of_two_trials():
    assert cf.relative_difference(2.0, 1.0) == 0.5
    assert cf.relative_difference(-1.0, 1.0) == 2.0
    assert cf.relative_difference(0.0, 0.0) == 0.0
    assert cf.relative_difference(None, 1.0) is None
    assert cf.relative_difference(float("nan"), 1.0) == float("inf")
    a = {"x": (1.0, "x", False), "w": (4.0, "w", False), "out": (3.0, "out", True),
         "only_a": (1.0, "only_a", False)}
    b = {"x": (1.0, "x", False), "w": (2.0, "w", False), "out": (3.3, "out", False)}
    paint = cf.difference_paint(a, b, "relative difference of mean", step=3)
    values = {k: v.value for k, v in paint.values.items()}
    assert values["x"] == 0.0 and values["w"] == 0.5 and values["only_a"] is None
    assert values["out"] == pytest.approx(0.3 / 3.3)
    assert paint.values["out"].non_finite and paint.step == 3
    assert paint.scale is not None and paint.scale.high == 0.5


def test_relative_differences_of_arrays_match_the_scalar_rule():
    a = np.array([2.0, -1.0, 0.0, np.nan, np.nan, np.inf, 3.0])
    b = np.array([1.0, 1.0, 0.0, 1.0, np.nan, np.inf, 3.0])
    expected = [cf.relative_difference(x, y) for x, y in zip(a, b)]
    assert cf.relative_differences(a, b).tolist() == expected


def test_the_difference_scale_keeps_the_painted_graphs_rules_and_starts_equal_at_zero():
    # differences that all are 0 (equal trials): 0 is the lowest colour
    scale = cf.difference_scale([0.0, 0.0, np.nan])
    assert (scale.low, scale.high, scale.log) == (0.0, 1.0, False)
    assert scale.position(0.0) == 0
    # else color_scale's: a log scale for a span of 100 or more, NaN and inf left out
    assert cf.difference_scale([0.0, 1e-6, 0.5, np.inf]).log
    assert cf.difference_scale([0.1, 0.5]) == cf.color_scale([0.1, 0.5])
    assert cf.difference_scale([np.nan]) is None
    # a paint given a scale keeps it (the page's spans every step both recorded)
    a = {"x": (1.0, "x", False)}
    paint = cf.difference_paint(a, {"x": (1.0, "x", False)}, "d", 0, scale=scale)
    assert paint.scale is scale and cf.compared_nodes(paint) == (1, 0)
