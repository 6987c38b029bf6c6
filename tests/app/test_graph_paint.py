"""The dependency graph painted by a recorded statistic (issue 17): pure builders of
app/graph_figure.py and the reads behind them (app/data.py, app/pages/tensors.py), on a
real training loop recorded with a fault at a known node and step (tests/analysis/loops.py:
``log`` of a value that reaches 0 at step 7)."""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
import pytest
from comgra_like.app import views
from comgra_like.app.data import AppData
from comgra_like.app.graph_figure import (
    FIRST_NODE_TRACE,
    KIND_COLORS,
    NO_DATA_COLOR,
    NON_FINITE_COLOR,
    ColorScale,
    NodeValue,
    Paint,
    build_graph_figure,
    color_scale,
    node_style,
    paint_patch,
    paint_trace_index,
)
from comgra_like.app.pages import tensors

from comgra_like.errors import NotFoundError
from comgra_like.query import open_group
from comgra_like.vocabulary import BATCH_MEAN, FORWARD, NO_BATCH, UPDATE

pytest.importorskip("torch")

TRIAL = "log_of_zero"
VIRIDIS_LOW, VIRIDIS_HIGH = "#440154", "#fde725"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> Path:
    from tests.analysis import loops

    return loops.log_of_zero(tmp_path_factory.mktemp("paint"), group="paint")


def current_at(step: int, aggregation: str = BATCH_MEAN) -> dict:
    return {"trial": TRIAL, "type_of_execution": "any", "training_step": step, "iteration": 0,
            "node": "hidden", "role": "hidden", "recording_type": FORWARD,
            "aggregation": aggregation}


def figure_styles(figure: go.Figure) -> dict[str, tuple[str, str, float]]:
    """Node name -> (fill, outline colour, outline width) as the figure draws it."""
    out = {}
    for trace in figure.data[FIRST_NODE_TRACE:]:
        names = trace.customdata
        if not names or not isinstance(trace.marker.color, (list, tuple)):
            continue
        for i, name in enumerate(names):
            out[name] = (trace.marker.color[i], trace.marker.line.color[i],
                         trace.marker.line.width[i])
    return out


def independent_value(group, step: int, node, role: str, recording_type: str,
                      statistic: str) -> float | None:
    """The statistic of a graph node's tensor read on its own through the query API."""
    for aggregation in (BATCH_MEAN, NO_BATCH):
        try:
            record = group.read_tensor(TRIAL, step, node.iteration, node.node, role,
                                       recording_type, aggregation)
        except NotFoundError:
            continue
        return float(record.stats[statistic])
    return None


@pytest.mark.parametrize("statistic", ["abs_max", "norm", "nan_count", "mean"])
@pytest.mark.parametrize("step", [3, 6, 7, 8])
def test_each_node_has_the_colour_of_its_statistic_at_the_step(faulty, statistic, step):
    data = AppData(faulty)
    group = open_group(faulty)
    paint = tensors.build_paint(data, current_at(step), statistic, FORWARD)
    model = views.graph_model(data, TRIAL, step, 0)
    figure = build_graph_figure(model, paint=paint)
    go.Figure(figure.to_dict())  # the unvalidated build is a valid figure
    styles = figure_styles(figure)
    graph = group.read_graph(TRIAL, step, 0)
    assert set(styles) == {n.name for n in graph.nodes}
    all_values = group.read_statistics(TRIAL, recording_types=FORWARD,
                                       aggregations=[BATCH_MEAN, NO_BATCH],
                                       statistics=[statistic])[statistic]
    finite = all_values[all_values.map(math.isfinite)]
    for node in graph.nodes:
        role = node.roles[0]
        value = independent_value(group, step, node, role, FORWARD, statistic)
        fill, _, _ = styles[node.name]
        if value is None:
            assert fill == NO_DATA_COLOR, node.name
        elif not math.isfinite(value):
            assert fill == NON_FINITE_COLOR, node.name
        else:
            # the scale spans every recorded step: a colour means one value at all steps
            assert paint.scale.high == pytest.approx(finite.max(), rel=1e-6)
            assert fill == paint.scale.color(value), (node.name, value)


def test_the_fault_is_marked_where_and_when_it_happens(faulty):
    data = AppData(faulty)
    before = tensors.build_paint(data, current_at(6), "abs_max", FORWARD)
    at = tensors.build_paint(data, current_at(7), "abs_max", FORWARD)
    after = tensors.build_paint(data, current_at(8), "abs_max", FORWARD)
    model = views.graph_model(data, TRIAL, 7, 0)
    red = {name for name, node in model.nodes.items()
           if node_style(at, name, node.is_import)[1] == NON_FINITE_COLOR}
    # log(0) = -inf at z_log_positive, and the loss after it; their inputs are finite
    assert red == {"z_log_positive", "loss"}
    assert node_style(at, "z_log_positive", False)[0] == NON_FINITE_COLOR
    assert at.values["positive"].value == 0.0 and not at.values["positive"].non_finite
    assert not any(v.non_finite for v in before.values.values())
    # a step later the NaN has spread backwards into the weights and forwards again
    spread = {n for n, v in after.values.items() if v.non_finite}
    assert {"hidden", "positive", "net.body.weight", "net.head.weight"} <= spread
    assert "input" not in spread


def test_nodes_without_the_statistic_are_grey(faulty):
    data = AppData(faulty)
    paint = tensors.build_paint(data, current_at(3), "update_ratio", UPDATE)
    model = views.graph_model(data, TRIAL, 3, 0)
    for name, node in model.nodes.items():
        fill = node_style(paint, name, node.is_import)[0]
        if node.kind == "parameter":
            assert fill != NO_DATA_COLOR and paint.values[name].value > 0
        else:
            assert fill == NO_DATA_COLOR and paint.values[name].value is None


def test_a_step_change_is_a_patch_of_colours_and_hover_values(faulty):
    data = AppData(faulty)
    model = views.graph_model(data, TRIAL, 6, 0)
    at_6 = tensors.build_paint(data, current_at(6), "abs_max", FORWARD)
    at_7 = tensors.build_paint(data, current_at(7), "abs_max", FORWARD)
    figure = build_graph_figure(model, paint=at_6).to_plotly_json()
    patch = paint_patch(model, at_7).to_plotly_json()
    touched = {(op["location"][1], tuple(op["location"][2:])) for op in patch["operations"]}
    node_traces = range(FIRST_NODE_TRACE, FIRST_NODE_TRACE + len(model.node_traces))
    assert {t for t, _ in touched} == {*node_traces, paint_trace_index(model)}
    assert {path for _, path in touched} == {
        ("marker", "color"), ("marker", "line", "color"), ("marker", "line", "width"),
        ("hovertemplate",), ("marker",)}
    # applied to the figure of step 6, the patch gives the figure of step 7
    for op in patch["operations"]:
        target = figure["data"][op["location"][1]]
        for key in op["location"][2:-1]:
            target = target[key]
        target[op["location"][-1]] = op["params"]["value"]
    direct = build_graph_figure(model, paint=at_7).to_plotly_json()
    for t in node_traces:
        assert figure["data"][t]["marker"] == direct["data"][t]["marker"]
        assert figure["data"][t]["hovertemplate"] == direct["data"][t]["hovertemplate"]
    z = model.point_of["z_log_positive"]
    assert "inf" in direct["data"][z[0]]["hovertemplate"][z[1]]


def test_painting_off_keeps_the_kind_colours(faulty):
    data = AppData(faulty)
    model = views.graph_model(data, TRIAL, 7, 0)
    plain = build_graph_figure(model)
    for t, (kind, _) in enumerate(model.node_traces):
        assert plain.data[FIRST_NODE_TRACE + t].marker.color == KIND_COLORS[kind]
    assert len(plain.data) == paint_trace_index(model)  # no colour bar, no paint legend


def test_color_scale_log_where_values_span_decades():
    scale = color_scale([1e-6, 1e-3, 0.0, 2.0, float("nan"), float("inf"), None])
    assert scale == ColorScale(1e-6, 2.0, log=True)
    assert scale.color(1e-6) == VIRIDIS_LOW and scale.color(2.0) == VIRIDIS_HIGH
    assert scale.color(0.0) == VIRIDIS_LOW  # zero: the lowest colour on a log scale
    # the middle of the decades, not of the values
    assert scale.position(math.sqrt(1e-6 * 2.0)) == pytest.approx(0.5)
    ticks, labels = scale.ticks()
    assert labels[0] == "1e-6" and labels[-1] == "1e1" and len(ticks) <= 8


def test_color_scale_linear_for_signed_or_narrow_values():
    assert color_scale([-3.0, 1.0, 5.0]) == ColorScale(-3.0, 5.0)
    assert color_scale([1.0, 50.0]).log is False
    narrow = color_scale([4.0, 4.0])
    assert narrow.low < 4.0 < narrow.high and narrow.color(4.0) != VIRIDIS_LOW
    assert color_scale([float("nan"), None]) is None
    assert ColorScale(0.0, 10.0).color(-5) == VIRIDIS_LOW  # clamped
    assert ColorScale(0.0, 10.0).ticks() is None


def test_non_finite_marking():
    scale = ColorScale(0.0, 1.0)
    paint = Paint("x", {
        "nan_value": NodeValue(float("nan"), "r", True),
        "holds_inf": NodeValue(0.5, "r", True),
        "fine": NodeValue(0.5, "r", False),
        "fine_import": NodeValue(0.5, "r", False),
        "nothing": NodeValue(None, None, False),
    }, scale)
    assert node_style(paint, "nan_value", False) == (NON_FINITE_COLOR, NON_FINITE_COLOR, 3.5)
    assert node_style(paint, "holds_inf", False) == (scale.color(0.5), NON_FINITE_COLOR, 3.5)
    assert node_style(paint, "fine", False) == (scale.color(0.5), "white", 1.0)
    # a hollow import node shows its colour in the outline
    assert node_style(paint, "fine_import", True) == (scale.color(0.5), scale.color(0.5), 2.0)
    assert node_style(paint, "nothing", False)[0] == NO_DATA_COLOR
    assert node_style(paint, "not_in_values", False)[0] == NO_DATA_COLOR


def test_one_statistics_query_per_trial_and_statistic(faulty):
    data = AppData(faulty)
    table = data.statistic_table(TRIAL, "norm")
    for step in range(12):
        tensors.build_paint(data, current_at(step), "norm", FORWARD)
        tensors.build_paint(data, current_at(step), "norm", "gradient:gradients")
    assert data.statistic_table(TRIAL, "norm") is table  # cached, not read again
    assert set(table.recording_types()) == {FORWARD, "gradient:gradients", UPDATE}


EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"


def tensors_page_value(data, current: dict, node, statistic: str):
    """(role, value) the Tensors page shows for the first role of ``node`` recorded
    forward with the batch mean (or no batch dimension); (None, None) if none is."""
    source = data.option_source()
    for role in node.roles:
        selected = dict(current, node=node.name, role=role, recording_type=FORWARD)
        aggregations = source.options("aggregation", selected)
        for aggregation in (BATCH_MEAN, NO_BATCH):
            if aggregation in aggregations:
                selected["aggregation"] = aggregation
                return role, float(data.read_tensor(selected).stats[statistic])
    return None, None


@pytest.mark.parametrize("where", ["tiny", "example"])
def test_recurrent_graph_nodes_show_what_the_tensors_page_shows(where, tiny_group):
    """Nodes of later iterations, imports of earlier ones (aliases of another node in the
    tutorial's graph: memory/new is stored as subnet_mem__out) and step-level parameters
    are painted with the data the Tensors page reads for them."""
    path, trial = ((tiny_group, "trial_a") if where == "tiny"
                   else (EXAMPLE_RUN, "trial_bugged_original_version"))
    data = AppData(path)
    checked = imports = aliases = 0
    for step in list(data.steps(trial))[:3]:
        for iteration in data.steps(trial)[step].graph_hashes:
            current = {"trial": trial, "type_of_execution": "any", "training_step": step,
                       "iteration": iteration, "aggregation": BATCH_MEAN}
            paint = tensors.build_paint(data, current, "abs_mean", FORWARD)
            for node in data.graph(trial, step, iteration).nodes:
                shown = paint.values[node.name]
                role, value = tensors_page_value(data, current, node, "abs_mean")
                assert shown.role == role, (step, iteration, node.name)
                if value is None:
                    assert shown.value is None
                    continue
                assert shown.value == pytest.approx(value, rel=1e-6), (step, node.name)
                checked += 1
                imports += node.is_import
                aliases += bool(node.alias_of)
    assert checked > 20 and imports > 3
    assert aliases > 0 or where == "tiny"
