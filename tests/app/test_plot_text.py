"""Names from a recording show as text in every figure, never as plotly markup (issue 20,
item 11): plotly renders <a>, <b>, ... in trace names, legends, hover text and templates,
titles and labels, and fills %{...} in hover templates."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from comgra_like.app import figures
from comgra_like.app.graph_figure import build_graph_figure, build_graph_model
from comgra_like.app.plot_text import plot_text

from comgra_like.query import Graph, GraphEdge, GraphNode

LINK = '<a href="https://evil.example/phish">click me</a>'
HOSTILE = [LINK, "<b>bold</b>", "100%{y}", "&lt;i&gt;", "x<br>y"]

# Keys whose strings plotly never renders: data for clicks, ids, state.
NOT_SHOWN = {"customdata", "meta", "uirevision", "legendgroup", "ids", "type", "mode"}


def shown_strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) of every string of a figure that plotly may render."""
    if key in NOT_SHOWN:
        return
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from shown_strings(v, k)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from shown_strings(v, key)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        for v in value.ravel():
            yield from shown_strings(v, key)


def markup(figure: Any, line_breaks_in: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Every tag and every template placeholder the figure's text holds, per key (but the
    ``<br>`` of keys in ``line_breaks_in``: text the figure wraps onto lines itself)."""
    if hasattr(figure, "to_plotly_json"):
        figure = figure.to_plotly_json()
    found = []
    for key, text in shown_strings(figure):
        found += [(key, m) for m in re.findall(r"</?[a-zA-Z][^>]*>|%\{[^}]*\}", text)
                  if not (m == "<br>" and key in line_breaks_in)]
    return sorted(found)


def assert_text_only(hostile_figure: Any, plain_figure: Any,
                     line_breaks_in: tuple[str, ...] = ()) -> None:
    """The hostile names add no tag and no placeholder: all of them are the figure's own."""
    assert markup(hostile_figure, line_breaks_in) == markup(plain_figure, line_breaks_in)
    for _, text in shown_strings(
        hostile_figure.to_plotly_json() if hasattr(hostile_figure, "to_plotly_json")
        else hostile_figure
    ):
        assert LINK not in text and "<b>bold" not in text and "100%{" not in text


def test_plot_text_escapes_markup_entities_and_placeholders():
    assert plot_text(LINK) == (
        '&lt;a href="https://evil.example/phish"&gt;click me&lt;/a&gt;'
    )
    assert plot_text("&lt;") == "&amp;lt;"  # shown as typed, not as "<"
    assert plot_text("100%{y}") == "100&#37;{y}"
    assert plot_text(3) == "3"


@pytest.mark.parametrize("name", HOSTILE)
def test_kpi_figures_show_names_as_text(name):
    def frame(group: str, kpi: str, toe: str) -> pd.DataFrame:
        return pd.DataFrame({
            "kpi_group": [group] * 2, "kpi_name": [kpi] * 2, "type_of_execution": [toe] * 2,
            "timepoint": [1, 2], "value": [0.5, 0.25], "wall_time": [0.0, 0.0],
        })

    (_, hostile), = figures.kpi_figures(frame(name, name, name))
    (_, plain), = figures.kpi_figures(frame("group", "kpi", "train"))
    assert_text_only(hostile, plain)
    assert hostile["data"][0]["name"] == plot_text(f"{name} ({name})")
    assert hostile["layout"]["title"]["text"] == plot_text(name)


@pytest.mark.parametrize("name", HOSTILE)
def test_series_figure_shows_the_type_of_execution_as_text(name):
    def frame(toe: str) -> pd.DataFrame:
        return pd.DataFrame({"training_step": [0, 1], "type_of_execution": [toe, "other"],
                             "iteration": [0, 0], "value": [1.0, 2.0]})

    hostile = figures.series_figure(frame(name), "mean", 0)
    plain = figures.series_figure(frame("train"), "mean", 0)
    assert_text_only(hostile, plain)
    assert plot_text(name) in [t["name"] for t in hostile["data"]]


@pytest.mark.parametrize("name", HOSTILE)
def test_messages_in_empty_figures_are_text(name):
    # error messages name tensors and files, and the value views show them in a figure
    assert_text_only(figures.empty_figure(f"nothing recorded for {name}"),
                     figures.empty_figure("nothing recorded for x"))


def hostile_graph(name: str) -> Graph:
    def node(key: str, kind: str, **extra: Any) -> GraphNode:
        return GraphNode(
            name=key, node=key, kind=kind, roles=(name, "main"),
            tensor_names={name: name, "main": key}, shapes={name: (-1, 3), "main": (3,)},
            iteration=0, is_import=False, module_group=extra.get("module_group"),
        )

    nodes = [
        node(f"in {name}", "input"),
        node(f"hidden {name}", name, module_group=name),  # even the kind comes from the file
        node(f"loss {name}", "loss"),
    ]
    edges = [GraphEdge(nodes[0].name, nodes[1].name, name, name),
             GraphEdge(nodes[1].name, nodes[2].name, "main", "main")]
    return Graph("hash", 0, nodes, edges)


@pytest.mark.parametrize("name", HOSTILE)
def test_dependency_graph_shows_node_role_kind_and_module_names_as_text(name):
    graph = hostile_graph(name)
    plain = hostile_graph("plain")
    hostile_figure = build_graph_figure(
        build_graph_model(graph), selected_node=graph.nodes[1].name
    )
    plain_figure = build_graph_figure(build_graph_model(plain), selected_node=plain.nodes[1].name)
    # node labels are wrapped onto lines (<br>) where they are long, as these names are
    assert_text_only(hostile_figure, plain_figure, line_breaks_in=("text",))
    data = hostile_figure.to_plotly_json()["data"]
    nodes = [t for t in data if t.get("customdata")]
    # clicks still select by the stored name
    assert {n for t in nodes for n in t["customdata"]} == {n.name for n in graph.nodes}
    hover = " ".join(h for t in nodes for h in t["hovertext"])
    assert plot_text(name) in hover
    assert plot_text(name) in [t["name"] for t in data]  # the kind's legend entry
    labels = [label for t in nodes for label in t["text"]]
    lines = [line for label in labels for line in label.split("<br>")]
    assert len(labels) == 3 and all("<" not in line and ">" not in line for line in lines)
