"""Pure figure and table builders (comgra_like.app.figures)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io.json
import pytest
from comgra_like.app import figures
from hypothesis import given, settings


def test_format_number_and_statistics_rows():
    assert figures.format_number(0.000123456789) == "0.000123457"
    assert figures.format_number(12345.0, "numel") == "12,345"
    assert figures.format_number(float("nan")) == "NaN"
    assert figures.format_number(float("-inf")) == "-inf"
    stats = {
        "mean": 0.5,
        "std": 1.0,
        "svd_top": float("nan"),
        "update_ratio": 0.01,
        "nan_count": 3.0,
        "future_statistic": 2.0,
    }
    rows = figures.statistics_rows(stats)
    names = [r[0] for r in rows]
    assert names == ["mean", "std", "nan_count", "update_ratio", "future_statistic"]
    assert ("nan_count", "NaN count", "3") in rows


def test_format_shape():
    assert figures.format_shape(()) == "scalar"
    assert figures.format_shape((3, 4)) == "3 × 4"
    assert figures.format_shape(None) == "–"


def test_neuron_figure_small_vector_is_a_bar_with_exact_hover():
    fig = figures.neuron_figure(np.array([0.1, -2.0, 3.5], dtype=np.float32))
    bar = fig["data"][0]
    assert bar["type"] == "bar"
    assert list(bar["y"]) == pytest.approx([0.1, -2.0, 3.5])
    assert "%{y:.7g}" in bar["hovertemplate"]


def test_neuron_figure_scalar_and_none():
    assert figures.neuron_figure(np.float32(2.5))["data"][0]["type"] == "bar"
    empty = figures.neuron_figure(None)
    assert not empty["data"] and "only statistics" in empty["layout"]["annotations"][0]["text"]


def test_neuron_figure_matrix_is_the_matrix():
    values = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    fig = figures.neuron_figure(values)
    heatmap = fig["data"][0]
    assert heatmap["type"] == "heatmap"
    assert np.asarray(heatmap["z"]).shape == (3, 4)
    assert heatmap["zmid"] == 0 and heatmap["zmin"] == -heatmap["zmax"]
    assert "%{z:.7g}" in heatmap["hovertemplate"]


def test_neuron_figure_rank3_rows_are_leading_indices():
    values = np.random.default_rng(0).normal(size=(2, 3, 4))
    fig = figures.neuron_figure(values)
    heatmap = fig["data"][0]
    assert np.asarray(heatmap["z"]).shape == (6, 4)
    custom = np.asarray(heatmap["customdata"])
    assert custom[4, 0] == "1,1"  # row 4 of the (2*3, 4) view is index [1, 1, :]
    assert np.asarray(heatmap["z"])[4, 2] == pytest.approx(values[1, 1, 2])


def test_neuron_figure_long_vector_wraps_with_flat_index_on_hover():
    values = np.arange(1000, dtype=np.float32)
    fig = figures.neuron_figure(values)
    heatmap = fig["data"][0]
    z = np.asarray(heatmap["z"], dtype=float)
    width = z.shape[1]
    assert width == math.ceil(math.sqrt(1000))
    assert np.asarray(heatmap["customdata"])[3, 5] == 3 * width + 5
    assert z[3, 5] == 3 * width + 5
    assert np.isnan(z[-1, -1])  # padding


def test_neuron_figure_marks_non_finite_values():
    fig = figures.neuron_figure(np.array([[1.0, np.nan], [np.inf, 2.0]]))
    assert "2 NaN/inf values left blank" in fig["layout"]["title"]["text"]
    z = np.asarray(fig["data"][0]["z"], dtype=float)
    assert np.isnan(z[1, 0])


def test_neuron_figure_thins_huge_matrices():
    fig = figures.neuron_figure(np.zeros((1000, 1000), dtype=np.float32))
    z = np.asarray(fig["data"][0]["z"])
    assert z.size <= figures.MAX_HEATMAP_CELLS
    assert "1 of every 2 rows and 2 columns shown" in fig["layout"]["title"]["text"]


def _series():
    return pd.DataFrame(
        {
            "training_step": [0, 1, 4, 5],
            "type_of_execution": ["short", "long", "short", "long"],
            "iteration": [0, 0, 0, 0],
            "value": [1.0, 2.0, 3.0, 4.0],
        }
    )


def test_series_figure_one_line_per_type_and_step_marker():
    fig = figures.series_figure(_series(), "mean", current_step=4)
    assert [t["name"] for t in fig["data"]] == ["long", "short"]
    assert fig["data"][1]["customdata"] == [0, 4]
    assert fig["layout"]["shapes"][0]["x0"] == 4
    assert fig["layout"]["showlegend"]
    assert figures.step_marker_shapes(None) == []
    single = figures.series_figure(_series()[_series().type_of_execution == "short"], "mean", 0)
    assert not single["layout"]["showlegend"]


def test_series_of_100000_steps_draws_a_bounded_number_of_points_with_every_spike():
    rng = np.random.default_rng(0)
    steps = np.arange(100_000)
    values = rng.normal(size=steps.size)
    values[[12_345, 87_654]] = [40.0, -40.0]  # one spike each way
    frame = pd.DataFrame({"training_step": steps, "type_of_execution": "train",
                          "iteration": 0, "value": values})
    fig = figures.series_figure(frame, "mean", current_step=5)
    trace = fig["data"][0]
    x, y = figures.typed_values(trace["x"]), figures.typed_values(trace["y"])
    assert len(x) <= figures.MAX_SERIES_POINTS + 2  # a screen's worth, not 100,000
    assert {12_345, 87_654, 0, 99_999} <= set(x.tolist())
    assert trace["customdata"] == x.tolist() and (np.diff(x) > 0).all()
    assert y.max() == 40.0 and y.min() == -40.0
    assert (y == values[x]).all()  # each point is the value of its own step
    small = figures.series_figure(frame.iloc[:1000], "mean", current_step=5)["data"][0]
    assert figures.typed_values(small["x"]).tolist() == list(range(1000))
    assert "markers" in small["mode"]


def test_series_goes_to_the_browser_as_typed_arrays():
    frame = pd.DataFrame({"training_step": np.arange(10_000) * 3, "type_of_execution": "t",
                          "iteration": 0, "value": np.linspace(-1, 1, 10_000)})
    trace = figures.series_figure(frame, "mean", current_step=0)["data"][0]
    assert trace["type"] == "scatter"
    assert trace["x"]["dtype"] == "i4" and trace["y"]["dtype"] == "f8"
    assert isinstance(trace["x"]["bdata"], str) and isinstance(trace["y"]["bdata"], str)
    # what Dash sends: base64, no list of numbers
    sent = plotly.io.json.to_json_plotly({"data": [trace]})
    assert '"x":{"dtype":"i4","bdata":' in sent and '"y":{"dtype":"f8","bdata":' in sent
    as_numbers = plotly.io.json.to_json_plotly({"data": [{
        **trace, "x": figures.typed_values(trace["x"]).tolist(),
        "y": figures.typed_values(trace["y"]).tolist()}]})
    assert len(sent) < 0.8 * len(as_numbers)


@pytest.mark.parametrize(("values", "dtype"), [
    (np.array([0, 5, 2**31 - 1], np.int64), "i4"),
    (np.array([-(2**31), 7], np.int64), "i4"),
    (np.array([0, 2**40], np.int64), "f8"),  # beyond int32: exact as float64
    (np.array([1.5, np.nan, -np.inf], np.float64), "f8"),
    (np.array([1.5, 2.25], np.float32), "f4"),
    (np.array([], np.int64), "i4"),
])
def test_typed_array_round_trips(values, dtype):
    spec = figures.typed_array(values)
    assert spec["dtype"] == dtype
    back = figures.typed_values(spec)
    np.testing.assert_array_equal(back, values.astype(back.dtype))
    assert back.astype(values.dtype).tolist() == values.tolist() or np.isnan(values).any()


def _run_bounds(n: int, max_points: int) -> list[tuple[int, int]]:
    runs = max_points // 2
    starts = np.linspace(0, n, runs + 1).astype(np.int64)
    return list(zip(starts[:-1].tolist(), starts[1:].tolist()))


@settings(max_examples=200, deadline=None)
@given(
    values=hnp.arrays(np.float64, st.integers(0, 400),
                      elements=st.one_of(st.floats(-1e6, 1e6), st.sampled_from(
                          [np.nan, np.inf, -np.inf, 0.0, 1.0]))),
    max_points=st.integers(2, 60),
)
def test_thinning_keeps_each_runs_extremes_holes_and_the_first_and_last_step(values, max_points):
    shown = figures.extremes_per_run(values, max_points)
    n = len(values)
    if n <= max_points:
        assert shown.tolist() == list(range(n))
        return
    assert shown[0] == 0 and shown[-1] == n - 1 and (np.diff(shown) > 0).all()
    kept = set(shown.tolist())
    for lo, hi in _run_bounds(n, max_points):
        run = values[lo:hi]
        finite = np.isfinite(run)
        if finite.any():
            # numpy's own answer: the first place of the run's smallest and largest value
            masked = np.where(finite, run, np.nan)
            assert lo + int(np.nanargmin(masked)) in kept
            assert lo + int(np.nanargmax(masked)) in kept
        if not finite.all():
            assert lo + int(np.flatnonzero(~finite)[0]) in kept  # the line breaks here
        inside = [i for i in kept if lo <= i < hi and i not in (0, n - 1)]
        assert len(inside) <= 3  # nothing else of the run is drawn
    assert len(shown) <= 3 * (max_points // 2) + 2


def test_series_figure_breaks_the_line_at_holes():
    values = np.arange(20_000, dtype=np.float64)
    values[[5, 10_000, 10_001]] = [np.nan, np.inf, np.nan]
    frame = pd.DataFrame({"training_step": np.arange(20_000), "type_of_execution": "t",
                          "iteration": 0, "value": values})
    for part in (frame.iloc[:100], frame):  # drawn whole, and thinned
        trace = figures.series_figure(part, "max", current_step=0)["data"][0]
        x, y = figures.typed_values(trace["x"]), figures.typed_values(trace["y"])
        holes = set(x[np.isnan(y)].tolist())
        assert 5 in holes and (len(part) < 10_000 or holes & {10_000, 10_001})
        assert np.isfinite(y[~np.isnan(y)]).all()  # inf is a hole too, never drawn
        assert trace.get("connectgaps") is not True


def test_figures_are_valid_plotly_figures():
    for fig in [
        figures.neuron_figure(np.ones((3, 4))),
        figures.neuron_figure(np.ones(5)),
        figures.series_figure(_series(), "mean", 1),
        figures.empty_figure("x"),
        figures.neuron_figure(np.ones((2, 3, 4))),
    ]:
        go.Figure(fig)  # raises on any invalid property


def test_series_figure_empty():
    assert figures.series_figure(_series().iloc[0:0], "mean", 0)["layout"]["annotations"]


def test_kpi_figures_one_per_group_one_trace_per_type_and_name():
    frame = pd.DataFrame(
        {
            "kpi_group": ["loss", "loss", "loss", "acc"],
            "kpi_name": ["mse", "mse", "mse", "top1"],
            "type_of_execution": ["train", "train", "test", "train"],
            "timepoint": [2, 1, 1, 1],
            "value": [0.5, 0.7, 0.9, 0.3],
            "wall_time": [0.0, 0.0, 0.0, 0.0],
        }
    )
    pairs = figures.kpi_figures(frame)
    assert [g for g, _ in pairs] == ["acc", "loss"]
    loss = pairs[1][1]
    assert [t["name"] for t in loss["data"]] == ["mse (test)", "mse (train)"]
    assert list(loss["data"][1]["x"]) == [1, 2]  # sorted by timepoint
    assert figures.kpi_figures(frame.iloc[0:0]) == []


def _kpis(rows: list[tuple[str, str, str, int, float]]) -> pd.DataFrame:
    """A KPI frame as ``Group.read_kpis`` returns it: (group, name, type, step, value)."""
    group, name, toe, step, value = zip(*rows)
    return pd.DataFrame({"kpi_group": group, "kpi_name": name, "type_of_execution": toe,
                         "timepoint": step, "value": value, "wall_time": [0.0] * len(rows)})


def test_kpi_lines_with_few_points_show_their_points():
    frame = _kpis(
        [("loss", "mse", "once", 5, 0.5)]
        + [("loss", "mse", "few", s, 0.1 * s) for s in range(3)]
        + [("loss", "mse", "many", s, 0.1 * s) for s in range(200)]
    )
    (_, loss), = figures.kpi_figures(frame)
    traces = {t["name"]: t for t in loss["data"]}
    # a one-point line draws nothing: that point must be a marker
    assert traces["mse (once)"]["mode"] == "markers"
    assert traces["mse (few)"]["mode"] == "lines+markers"
    assert traces["mse (many)"]["mode"] == "lines"
    assert figures.kpi_mode(figures.MAX_KPI_POINTS_WITH_MARKERS) == "lines+markers"
    assert figures.kpi_mode(figures.MAX_KPI_POINTS_WITH_MARKERS + 1) == "lines"


def test_kpi_every_batch_its_own_type_of_execution_is_one_line_per_kpi():
    # the shape a real comgra script records (start_batch(i, type_of_execution=f"batch_{i}"),
    # record_kpi_in_graph("loss", "", ...)): every type has one point, the loss no name
    rows = []
    for i in range(300):
        rows += [("loss", "", f"batch_{i}", i, 1.0 / (i + 1)), ("acc", "train", f"batch_{i}", i, i)]
    pairs = figures.kpi_figures(_kpis(rows))
    assert [g for g, _ in pairs] == ["acc", "loss"]
    acc, loss = pairs[0][1], pairs[1][1]
    (line,) = loss["data"]
    assert line["name"] == "batch_*"  # no "(batch_0)" with nothing before it, no 300 entries
    assert list(line["x"]) == list(range(300))  # in step order, not in name order
    assert line["mode"] == "lines"
    assert line["text"][:2] == ["batch_0", "batch_1"] and "%{text}" in line["hovertemplate"]
    assert [t["name"] for t in acc["data"]] == ["train (batch_*)"]
    assert "300 types of execution in 1 line" in loss["layout"]["title"]["text"]
    for _, fig in pairs:
        assert all("()" not in t["name"] and not t["name"].startswith("(") for t in fig["data"])
        go.Figure(fig)  # a valid figure


def test_kpi_type_lines_coarsen_names_only_as_far_as_needed():
    tutorial = [f"{n:02d}_iterations" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20)]
    assert figures.kpi_type_lines(tutorial) == {t: t for t in tutorial}
    batches = [f"batch_{i}" for i in range(30)]
    lines = figures.kpi_type_lines([*batches, "validation", "test_3"])
    assert {lines[t] for t in batches} == {"batch_*"}
    # a pattern only one type has keeps the type's own name
    assert lines["validation"] == "validation" and lines["test_3"] == "test_3"
    nested = [f"epoch_{e}_batch_{b}" for e in range(30) for b in range(3)]
    assert set(figures.kpi_type_lines(nested).values()) == {"epoch_*_batch_*"}
    # one epoch a line while that keeps the legend short
    few_epochs = [f"epoch_{e}_batch_{b}" for e in range(3) for b in range(30)]
    assert set(figures.kpi_type_lines(few_epochs).values()) == {
        "epoch_0_batch_*", "epoch_1_batch_*", "epoch_2_batch_*"}
    # names without a pattern: one line rather than a legend of hundreds
    unrelated = [f"run-{chr(97 + i % 26)}{chr(97 + i // 26)}x" for i in range(100)]
    assert set(figures.kpi_type_lines(unrelated).values()) == {figures.ALL_TYPES}
    assert figures.kpi_type_lines(["b", "a"], max_types=1) == {"a": "all types", "b": "all types"}


def test_kpi_label_never_shows_empty_parts():
    assert figures.kpi_label("mse", "train") == "mse (train)"
    assert figures.kpi_label("", "batch_0") == "batch_0"
    assert figures.kpi_label("mse", "") == "mse"
    assert figures.kpi_label("", "") == "unnamed"


def _module(name, parent, params, total):
    return SimpleNamespace(
        name=name,
        parent=parent,
        num_parameters_total=total,
        parameters=[
            SimpleNamespace(name=n, full_name=f"{name}.{n}", shape=s, numel=int(np.prod(s)))
            for n, s in params
        ],
    )


def test_module_rows_depth_first_with_parameters_and_totals():
    modules = [
        _module("net.b", "net", [("weight", (2, 3))], 6),
        _module("net", None, [], 10),
        _module("net.a", "net", [("weight", (2,)), ("bias", (2,))], 4),
    ]
    rows = figures.module_rows(modules)
    assert [(r["kind"], r["depth"], r["name"]) for r in rows] == [
        ("module", 0, "net"),
        ("module", 1, "net.a"),
        ("parameter", 2, "weight"),
        ("parameter", 2, "bias"),
        ("module", 1, "net.b"),
        ("parameter", 2, "weight"),
    ]
    assert rows[0]["count"] == 10 and rows[1]["own"] == 4
    assert rows[5]["shape"] == "2 × 3"


def test_filter_notes_every_word_case_insensitive():
    notes = [SimpleNamespace(text="Step 1 loss 0.5"), SimpleNamespace(text="step 2 NaN found")]
    assert figures.filter_notes(notes, "") == notes
    assert figures.filter_notes(notes, "nan STEP") == [notes[1]]
    assert figures.filter_notes(notes, "missing") == []


def test_series_figure_leaves_out_types_without_a_value_and_legend_of_many_types():
    frame = _series().assign(value=[1.0, float("nan"), 3.0, float("nan")])
    fig = figures.series_figure(frame, "svd_top", 0)
    assert [t["name"] for t in fig["data"]] == ["short"]
    nothing = figures.series_figure(frame.assign(value=float("nan")), "svd_top", 0)
    assert "does not apply" in nothing["layout"]["annotations"][0]["text"]
    many = pd.DataFrame(
        {
            "training_step": range(10),
            "type_of_execution": [f"t{i}" for i in range(10)],
            "iteration": 0,
            "value": 1.0,
        }
    )
    assert not figures.series_figure(many, "mean", 0)["layout"]["showlegend"]
