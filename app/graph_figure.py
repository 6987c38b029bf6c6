"""Plotly figure of a dependency graph, its highlight patches and keyboard navigation.

Pure functions; no Dash callbacks, no file access. The input is a ``Graph`` of the query
API (docs/QUERY_API.md): any object with ``graph_hash``, ``nodes`` (objects with
``name, kind, roles, tensor_names, shapes, iteration, is_import, module_group``) and
``edges`` (objects with ``source, target, source_role, target_role``) works.

Use::

    model = build_graph_model(graph)                  # layout + indexes, once per graph
    figure = build_graph_figure(model)                # go.Figure for dcc.Graph
    patch = highlight_patch(model, "hidden", "main")  # dash.Patch for a click
    name = neighbor_in_direction(model, "hidden", "left")
    data = client_highlight_data(model)               # in the figure: layout.meta.highlight

Figure structure (trace indices are fixed, see the ``*_TRACE`` constants):

0. all edges, ONE line trace (polylines through the layout's dummy points, ``None``
   between edges);
1. overlay: edges that only another role of the selected node carries (thin, dotted);
2. overlay: edges of the selection (thick);
3. arrowheads: one ``arrow`` marker per edge on its last segment, oriented in screen
   space by plotly (``angleref="previous"`` from an invisible point just before it); in
   a graph of more than ``MAX_ARROWS`` drawn edges only on the edges that run right to
   left (``GraphFigureModel.arrow_edges``): every other edge runs left to right;
4. … one marker trace per node kind present, in ``KIND_ORDER`` (import nodes are in
   their kind's trace with a hollow symbol), ``customdata`` = node name, with a text label
   per node only where labels can be read (see :func:`build_graph_figure`);
then a ring around the selected node (``GraphFigureModel.selection_trace``), and, when the
graph has import nodes, a legend-only entry explaining the hollow symbol.

Highlighting only touches ``selectedpoints`` of the node and arrow traces (the dimmed
style is the trace's static ``unselected`` style), the colour of the edge trace and the
coordinates of the two overlays and the ring. No per-node colour arrays are sent.

Painted (``build_graph_figure(model, paint=Paint(...))``), the node traces carry one fill
and outline colour per node (a recorded statistic on a :class:`ColorScale`, red for
NaN/Inf, grey for no data) and a hover line with the value; a colour-bar trace and legend
entries follow the traces above, so no highlight index moves. Another step is a
:func:`paint_patch` (colours, hover values and the colour bar only).

The browser applies the highlight of a click itself (``highlightUpdates`` in
assets/comgra.js, from :func:`client_highlight_data`, which the figure carries in
``layout.meta.highlight``): the same updates as :func:`highlight_updates`, without waiting
for the server. The server's patch still follows when the selection it makes differs.

This module builds the figure; its parts live beside it: ``graph_model.py`` (the model,
the trace numbering, the edges' polylines), ``graph_highlight.py`` (highlight, the
browser's copy of it, navigation), ``graph_labels.py`` (labels, label sizes, hover text)
and ``graph_paint.py`` (colour scale and painting). Every name is importable from here
too, as before the split.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from .graph_highlight import (
    DIRECTIONS,
    EDGE_COLOR,
    EDGE_COLOR_DIMMED,
    HIGHLIGHT_EDGE_COLOR,
    Highlight,
    client_highlight_data,
    compute_highlight,
    highlight_patch,
    highlight_updates,
    neighbor_in_direction,
)
from .graph_labels import (
    MAX_LABELED_NODES,
    X_PADDING,
    Y_PADDING,
    LabelStyle,
    hover_text,
    label_style,
    node_labels,
)
from .graph_model import (
    ARROW_TRACE,
    EDGE_TRACE,
    FIRST_NODE_TRACE,
    KIND_COLORS,
    KIND_ORDER,
    KIND_SYMBOLS,
    MAX_ARROWS,
    OTHER_ROLE_EDGE_TRACE,
    SELECTED_EDGE_TRACE,
    UNKNOWN_KIND_COLOR,
    GraphEdgeLike,
    GraphFigureModel,
    GraphLike,
    GraphNodeLike,
    Update,
    build_graph_model,
    compact,
    patch_of,
    polylines,
)
from .graph_paint import (
    COLORBAR_PX,
    LOG_SCALE_SPAN,
    NO_DATA_COLOR,
    NON_FINITE_COLOR,
    PAINT_COLORSCALE,
    ColorScale,
    NodeValue,
    Paint,
    color_scale,
    node_style,
    paint_patch,
    paint_trace_index,
    paint_traces,
    paint_updates,
)
from .plot_text import plot_text

# The names of graph_model, graph_highlight, graph_labels and graph_paint are re-exported:
# pages, tests and benchmarks import them from here.
__all__ = [
    "ARROW_TRACE",
    "COLORBAR_PX",
    "DIRECTIONS",
    "EDGE_COLOR",
    "EDGE_COLOR_DIMMED",
    "EDGE_TRACE",
    "FIRST_NODE_TRACE",
    "HIGHLIGHT_EDGE_COLOR",
    "KIND_COLORS",
    "KIND_ORDER",
    "KIND_SYMBOLS",
    "LOG_SCALE_SPAN",
    "MAX_ARROWS",
    "MAX_LABELED_NODES",
    "NON_FINITE_COLOR",
    "NO_DATA_COLOR",
    "OTHER_ROLE_EDGE_TRACE",
    "PAINT_COLORSCALE",
    "SELECTED_EDGE_TRACE",
    "UNKNOWN_KIND_COLOR",
    "X_PADDING",
    "Y_PADDING",
    "ColorScale",
    "GraphEdgeLike",
    "GraphFigureModel",
    "GraphLike",
    "GraphNodeLike",
    "Highlight",
    "LabelStyle",
    "NodeValue",
    "Paint",
    "Update",
    "build_graph_figure",
    "build_graph_model",
    "client_highlight_data",
    "color_scale",
    "compact",
    "compute_highlight",
    "highlight_patch",
    "highlight_updates",
    "hover_text",
    "label_style",
    "neighbor_in_direction",
    "node_labels",
    "node_style",
    "paint_patch",
    "paint_trace_index",
    "paint_traces",
    "paint_updates",
    "patch_of",
    "polylines",
]

_DIMMED_OPACITY = 0.18
_DIMMED_TEXT = "rgba(80, 80, 80, 0.3)"
_ARROW_AT = 0.72  # arrowhead position along an edge's last segment (clear of the marker)
_ARROW_FROM = 0.6  # the invisible point that orients it


def build_graph_figure(
    model: GraphFigureModel,
    *,
    selected_node: str | None = None,
    selected_role: str | None = None,
    uirevision: Any = None,
    width_px: int = 1000,
    height_px: int = 560,
    paint: Paint | None = None,
) -> go.Figure:
    """The dependency-graph figure; optionally with a selection already highlighted.

    ``uirevision`` defaults to the graph hash: zoom and pan survive every update of the
    same graph structure (highlight patches, new steps) and reset for another structure.
    ``width_px``/``height_px`` are the expected plot size: marker size, label font size,
    label position and label length are chosen so that labels fit the space a node has
    at the initial zoom (labels are the part of a name that tells the node apart, wrapped
    onto lines, see :func:`node_labels`; the full name is in the hover text). Where
    not even a few characters of a label fit at the smallest readable font (a long or tall
    graph), or the graph has more than ``MAX_LABELED_NODES`` nodes, the nodes are drawn
    without labels: unreadable labels only cost time at every redraw.

    ``paint``: the nodes coloured by a statistic (:func:`paint_updates`), with a colour
    bar and legend entries for non-finite data and nodes without data; another step is
    a :func:`paint_patch` of this figure. Without it the nodes have their kind's colour.
    """
    layout = model.layout
    if paint is not None:
        width_px -= COLORBAR_PX
    style = label_style(layout, width_px, height_px, list(model.nodes))
    font_size, marker_size, labels = style.font, style.marker, style.labels

    edge_x, edge_y = polylines(model.drawn_edges, layout.edge_paths)
    arrow_x: list[float] = []
    arrow_y: list[float] = []
    for k in model.arrow_edges:
        path = layout.edge_paths[model.drawn_edges[k]]
        (ax, ay), (bx, by) = path[-2], path[-1]
        arrow_x += [_r(ax + (bx - ax) * _ARROW_FROM), _r(ax + (bx - ax) * _ARROW_AT)]
        arrow_y += [_r(ay + (by - ay) * _ARROW_FROM), _r(ay + (by - ay) * _ARROW_AT)]

    def lines(name: str, x: list, y: list, line: dict) -> dict:
        return {"type": "scatter", "name": name, "x": x, "y": y, "mode": "lines",
                "line": line, "hoverinfo": "skip", "showlegend": False}

    traces: list[dict[str, Any]] = [
        lines("edges", edge_x, edge_y, {"color": EDGE_COLOR, "width": 1}),
        lines("edges (other roles)", [], [],
              {"color": HIGHLIGHT_EDGE_COLOR, "width": 1, "dash": "dot"}),
        lines("edges (selection)", [], [], {"color": HIGHLIGHT_EDGE_COLOR, "width": 2.6}),
        {
            "type": "scatter", "name": "edge directions", "x": arrow_x, "y": arrow_y,
            "mode": "markers", "hoverinfo": "skip", "showlegend": False,
            "marker": {
                "symbol": "arrow", "angleref": "previous", "color": "rgb(90, 90, 90)",
                "size": [0, max(6, marker_size * 0.6)] * len(model.arrow_edges),
                "line": {"width": 0},
            },
            "unselected": {"marker": {"opacity": _DIMMED_OPACITY}},
        },
    ]
    has_imports = False
    for kind, names in model.node_traces:
        nodes = [model.nodes[name] for name in names]
        color = KIND_COLORS.get(kind, UNKNOWN_KIND_COLOR)
        symbol = KIND_SYMBOLS.get(kind, "circle")
        imports = [n.is_import for n in nodes]
        has_imports |= any(imports)
        trace: dict[str, Any] = {
            "type": "scatter", "name": plot_text(kind), "legendgroup": kind,
            "mode": "markers+text" if labels is not None else "markers",
            "x": [layout.positions[name][0] for name in names],
            "y": [layout.positions[name][1] for name in names],
            "customdata": list(names),
            "hovertext": [hover_text(n) for n in nodes],
            "hoverinfo": "text",
            "marker": {
                "color": color,
                "size": marker_size,
                "symbol": [symbol + "-open" if i else symbol for i in imports],
                "line": {
                    "color": [color if i else "white" for i in imports],
                    "width": [2 if i else 1 for i in imports],
                },
            },
            "unselected": {"marker": {"opacity": _DIMMED_OPACITY}},
        }
        if labels is not None:
            # wrapped first: the entities of an escaped name do not count as characters
            trace["text"] = ["<br>".join(map(plot_text, labels[name])) for name in names]
            trace["textposition"] = style.position
            # (assets/comgra.css outlines the labels in white: over edges they stay legible)
            trace["textfont"] = {"size": font_size, "color": "rgb(40, 40, 40)"}
            trace["unselected"]["textfont"] = {"color": _DIMMED_TEXT}
        traces.append(trace)
    traces.append(
        {
            "type": "scatter", "name": "selected", "x": [], "y": [], "mode": "markers",
            "showlegend": False, "hoverinfo": "skip",
            "marker": {"symbol": "circle-open", "size": marker_size + 12, "color": "black",
                       "line": {"width": 3, "color": "black"}},
        }
    )
    if has_imports:  # legend-only entry explaining the hollow symbols
        traces.append(
            {
                "type": "scatter", "name": "import (earlier iteration)", "x": [None],
                "y": [None], "mode": "markers", "hoverinfo": "skip",
                "marker": {"symbol": "circle-open", "color": "rgb(90, 90, 90)", "size": 10,
                           "line": {"width": 2}},
            }
        )
    if paint is not None:
        for t in range(len(model.node_traces)):
            traces[FIRST_NODE_TRACE + t]["showlegend"] = False
        traces += paint_traces(model, paint)
    updates = highlight_updates(model, selected_node, selected_role)
    if paint is not None:
        updates += paint_updates(model, paint)
    for trace, path, value in updates:
        target = traces[trace]
        for key in path[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(path[-1], None)  # "no selection" is the default
        else:
            target[path[-1]] = value

    xs = [p[0] for p in layout.positions.values()] or [0.0]
    ys = [p[1] for p in layout.positions.values()] or [0.0]
    figure_layout = {
        "uirevision": model.graph_hash if uirevision is None else uirevision,
        "meta": {"graph_hash": model.graph_hash, "highlight": client_highlight_data(model)},
        "showlegend": True,
        "legend": {"orientation": "h", "itemsizing": "constant", "x": 0, "y": 1.0,
                   "yanchor": "bottom"},
        "margin": {"l": 8, "r": 8, "t": 28, "b": 8},
        "xaxis": {"visible": False, "range": [min(xs) - X_PADDING, max(xs) + X_PADDING]},
        "yaxis": {"visible": False, "range": [min(ys) - Y_PADDING, max(ys) + Y_PADDING]},
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "hovermode": "closest",
        "hoverlabel": {"align": "left"},
        "clickmode": "event",
        "dragmode": "pan",
        "modebar": {"remove": ["select2d", "lasso2d", "autoScale2d"]},
    }
    # Validation of the big per-point arrays costs ~20x the rest of the build (about
    # 0.25 s at 500 nodes); the test suite validates this structure instead.
    return go.Figure({"data": traces, "layout": figure_layout}, _validate=False)


def _r(value: float) -> float:
    return round(value, 2)
