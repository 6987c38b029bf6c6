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
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np
import plotly.graph_objects as go
from dash import Patch

from comgra_like import vocabulary as vocab

from .graph_layout import Edge, GraphLayout, Point, compute_layout
from .plot_text import plot_text

__all__ = [
    "ARROW_TRACE",
    "EDGE_TRACE",
    "FIRST_NODE_TRACE",
    "KIND_COLORS",
    "KIND_ORDER",
    "OTHER_ROLE_EDGE_TRACE",
    "SELECTED_EDGE_TRACE",
    "ColorScale",
    "GraphFigureModel",
    "Highlight",
    "NodeValue",
    "Paint",
    "build_graph_figure",
    "build_graph_model",
    "client_highlight_data",
    "color_scale",
    "compute_highlight",
    "highlight_patch",
    "highlight_updates",
    "neighbor_in_direction",
    "node_labels",
    "node_style",
    "paint_patch",
    "paint_trace_index",
    "paint_updates",
]

KIND_ORDER = vocab.KINDS
# Okabe-Ito palette (distinguishable with colour-vision deficiencies) plus one symbol
# per kind, so the kind is never told by colour alone.
KIND_COLORS: Mapping[str, str] = MappingProxyType(
    {
        vocab.INPUT: "#0072B2",
        vocab.CALCULATED: "#009E73",
        vocab.PARAMETER: "#E69F00",
        vocab.TARGET: "#CC79A7",
        vocab.LOSS: "#D55E00",
    }
)
KIND_SYMBOLS: Mapping[str, str] = MappingProxyType(
    {
        vocab.INPUT: "square",
        vocab.CALCULATED: "circle",
        vocab.PARAMETER: "diamond",
        vocab.TARGET: "hexagon",
        vocab.LOSS: "star",
    }
)
UNKNOWN_KIND_COLOR = "#7F7F7F"

EDGE_TRACE = 0
OTHER_ROLE_EDGE_TRACE = 1
SELECTED_EDGE_TRACE = 2
ARROW_TRACE = 3
FIRST_NODE_TRACE = 4

_EDGE_COLOR = "rgba(110, 110, 110, 0.55)"
_EDGE_COLOR_DIMMED = "rgba(150, 150, 150, 0.18)"
_HIGHLIGHT_EDGE_COLOR = "rgba(30, 30, 30, 0.9)"
_DIMMED_OPACITY = 0.18
_DIMMED_TEXT = "rgba(80, 80, 80, 0.3)"
_ARROW_AT = 0.72  # arrowhead position along an edge's last segment (clear of the marker)
_ARROW_FROM = 0.6  # the invisible point that orients it
_X_PADDING = 0.6  # axis range beyond the outermost nodes, in layers
_Y_PADDING = 0.8  # in node spacings
_MIN_FONT = 7  # px: smaller labels cannot be read
_MIN_LABEL_CHARS = 4  # a label must fit at least this many characters ("…abc")
_MAX_LABEL_CHARS = 28  # characters a label's line has at most
_MAX_LABEL_LINES = 3
_CHAR_WIDTH = 0.6  # the mean width of a character of the UI font, in font sizes
_LINE_HEIGHT = 1.3  # plotly's distance between lines of a text, in font sizes
_MARGIN_HEIGHT = 45  # px of the figure's height outside the plot: margins, legend row
_MARGIN_WIDTH = 16
# Every highlight redraws every label (plotly re-lays out all text of the plot on each
# data change, ~0.1 ms per label in headless Chromium), so a graph with more nodes never
# gets labels, however much room it has; the hover text names every node.
MAX_LABELED_NODES = 400
# The same for arrowheads (two plotly points each, ~0.1 ms per redraw): above this many
# drawn edges only the edges that run right to left get one (a layered layout draws every
# other edge left to right).
MAX_ARROWS = 300
DIRECTIONS = ("left", "right", "up", "down")


class GraphNodeLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def roles(self) -> Sequence[str]: ...
    @property
    def tensor_names(self) -> Mapping[str, str]: ...
    @property
    def shapes(self) -> Mapping[str, Sequence[int]]: ...
    @property
    def iteration(self) -> int: ...
    @property
    def is_import(self) -> bool: ...
    @property
    def module_group(self) -> str | None: ...


class GraphEdgeLike(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def source_role(self) -> str: ...
    @property
    def target_role(self) -> str: ...


class GraphLike(Protocol):
    @property
    def graph_hash(self) -> str: ...
    @property
    def nodes(self) -> Sequence[GraphNodeLike]: ...
    @property
    def edges(self) -> Sequence[GraphEdgeLike]: ...


@dataclass(frozen=True)
class GraphFigureModel:
    """Everything the figure, the highlight and the navigation need for one graph.

    Attributes:
        graph_hash: the graph's content hash (default ``uirevision``).
        layout: the node positions (:class:`GraphLayout`).
        nodes: node name → the graph's node object, in graph order.
        edges: the graph's edges as ``(source, target, source_role, target_role)``.
        drawn_edges: the distinct ``(source, target)`` pairs in the order of the edge
            trace (several roles can share one drawn edge).
        arrow_edges: indices into ``drawn_edges`` of the edges with an arrowhead, in the
            order of the arrowheads (all of them up to ``MAX_ARROWS`` drawn edges).
        node_traces: per node trace (index ``FIRST_NODE_TRACE + i``): its kind and node
            names in point order.
        point_of: node name → ``(trace index, point index)``.
        incoming, outgoing: node name → indices into ``edges``.
    """

    graph_hash: str
    layout: GraphLayout
    nodes: Mapping[str, GraphNodeLike]
    edges: tuple[tuple[str, str, str, str], ...]
    drawn_edges: tuple[Edge, ...]
    arrow_edges: tuple[int, ...]
    node_traces: tuple[tuple[str, tuple[str, ...]], ...]
    point_of: Mapping[str, tuple[int, int]]
    incoming: Mapping[str, tuple[int, ...]]
    outgoing: Mapping[str, tuple[int, ...]]

    @property
    def selection_trace(self) -> int:
        """Index of the ring trace that marks the selected node (after the node traces)."""
        return FIRST_NODE_TRACE + len(self.node_traces)

    def __repr__(self) -> str:
        return (
            f"GraphFigureModel(graph_hash={self.graph_hash!r}, nodes={len(self.nodes)}, "
            f"edges={len(self.edges)}, layers={self.layout.num_layers})"
        )


@dataclass(frozen=True)
class Highlight:
    """What a selection lights up (see :func:`compute_highlight`).

    ``thick_edges``: drawn edges on a dependency path through the selected role;
    ``thin_edges``: drawn edges on such a path that only other roles of the selected
    node carry.
    """

    node: str
    role: str | None
    upstream: frozenset[str]
    downstream: frozenset[str]
    thick_edges: frozenset[Edge]
    thin_edges: frozenset[Edge]

    @property
    def nodes(self) -> frozenset[str]:
        """The selected node, everything it depends on and everything depending on it."""
        return self.upstream | self.downstream | {self.node}


def build_graph_model(graph: GraphLike) -> GraphFigureModel:
    """Lay out ``graph`` and index it; the result feeds every other function here."""
    nodes: dict[str, GraphNodeLike] = {}
    for node in graph.nodes:
        nodes.setdefault(node.name, node)
    edges = tuple(
        (e.source, e.target, e.source_role, e.target_role)
        for e in graph.edges
        if e.source in nodes and e.target in nodes
    )
    layout = compute_layout(
        list(nodes),
        [(s, t) for s, t, _, _ in edges],
        column_group={name: node.module_group for name, node in nodes.items()},
        import_nodes=[name for name, node in nodes.items() if node.is_import],
    )
    kinds = [k for k in KIND_ORDER if any(n.kind == k for n in nodes.values())]
    kinds += sorted({n.kind for n in nodes.values()} - set(KIND_ORDER))
    # Non-import nodes first: the legend shows the first point's (filled) symbol.
    imports_last = sorted(nodes.items(), key=lambda item: bool(item[1].is_import))
    node_traces = tuple(
        (kind, tuple(name for name, n in imports_last if n.kind == kind)) for kind in kinds
    )
    point_of = {
        name: (FIRST_NODE_TRACE + t, p)
        for t, (_, names) in enumerate(node_traces)
        for p, name in enumerate(names)
    }
    incoming: dict[str, list[int]] = {name: [] for name in nodes}
    outgoing: dict[str, list[int]] = {name: [] for name in nodes}
    for k, (s, t, _, _) in enumerate(edges):
        outgoing[s].append(k)
        incoming[t].append(k)
    drawn_edges = tuple(layout.edge_paths)
    arrow_edges = tuple(
        k
        for k, pair in enumerate(drawn_edges)
        if len(drawn_edges) <= MAX_ARROWS or pair in layout.reversed_edges
    )
    return GraphFigureModel(
        graph_hash=graph.graph_hash,
        layout=layout,
        nodes=MappingProxyType(nodes),
        edges=edges,
        drawn_edges=drawn_edges,
        arrow_edges=arrow_edges,
        node_traces=node_traces,
        point_of=MappingProxyType(point_of),
        incoming=MappingProxyType({k: tuple(v) for k, v in incoming.items()}),
        outgoing=MappingProxyType({k: tuple(v) for k, v in outgoing.items()}),
    )


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
        width_px -= _COLORBAR_PX
    style = _label_style(layout, width_px, height_px, list(model.nodes))
    font_size, marker_size, labels = style.font, style.marker, style.labels

    edge_x, edge_y = _polylines(model.drawn_edges, layout.edge_paths)
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
        lines("edges", edge_x, edge_y, {"color": _EDGE_COLOR, "width": 1}),
        lines("edges (other roles)", [], [],
              {"color": _HIGHLIGHT_EDGE_COLOR, "width": 1, "dash": "dot"}),
        lines("edges (selection)", [], [], {"color": _HIGHLIGHT_EDGE_COLOR, "width": 2.6}),
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
            "hovertext": [_hover_text(n) for n in nodes],
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
        "xaxis": {"visible": False, "range": [min(xs) - _X_PADDING, max(xs) + _X_PADDING]},
        "yaxis": {"visible": False, "range": [min(ys) - _Y_PADDING, max(ys) + _Y_PADDING]},
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


def compute_highlight(model: GraphFigureModel, node: str, role: str | None = None) -> Highlight:
    """The transitive upstream/downstream of ``node`` and how to draw their edges.

    ``upstream``/``downstream`` follow every edge of ``node`` (all roles), so every
    dependency lights up. Edges on a path that starts with an edge of ``node`` carrying
    ``role`` are thick; edges reached only through another role of ``node`` are thin.
    ``role=None``, or a role no edge of ``node`` carries, treats all roles as selected.

    Raises:
        KeyError: ``node`` is not in the graph.
    """
    if node not in model.nodes:
        raise KeyError(f"node {node!r} is not in graph {model.graph_hash!r}")
    edges = model.edges
    node_roles = {e[3] for e in (edges[k] for k in model.incoming[node])}
    node_roles |= {e[2] for e in (edges[k] for k in model.outgoing[node])}
    if role not in node_roles:
        role = None

    def walk(start: list[int], upstream: bool) -> tuple[set[str], set[int]]:
        adjacency = model.incoming if upstream else model.outgoing
        end = 0 if upstream else 1
        reached: set[str] = set()
        used: set[int] = set()
        queue = deque(start)
        while queue:
            k = queue.popleft()
            if k in used:
                continue
            used.add(k)
            other = edges[k][end]
            if other != node and other not in reached:
                reached.add(other)
                queue.extend(adjacency[other])
        return reached, used

    ins, outs = list(model.incoming[node]), list(model.outgoing[node])
    upstream, up_edges = walk(ins, upstream=True)
    downstream, down_edges = walk(outs, upstream=False)
    if role is None:
        thick_ids = up_edges | down_edges
    else:
        _, up_role = walk([k for k in ins if edges[k][3] == role], upstream=True)
        _, down_role = walk([k for k in outs if edges[k][2] == role], upstream=False)
        thick_ids = up_role | down_role
    thick = {edges[k][:2] for k in thick_ids}
    thin = {edges[k][:2] for k in (up_edges | down_edges) - thick_ids} - thick
    return Highlight(
        node=node,
        role=role,
        upstream=frozenset(upstream),
        downstream=frozenset(downstream),
        thick_edges=frozenset(thick),
        thin_edges=frozenset(thin),
    )


def highlight_updates(
    model: GraphFigureModel, node: str | None, role: str | None = None
) -> tuple[tuple[int, tuple[str, ...], Any], ...]:
    """``(trace index, property path, value)`` triples that show a selection.

    ``node=None`` or a node not in the graph (a stale selection) clears the highlight.
    The triples are what :func:`highlight_patch` sends and what
    :func:`build_graph_figure` applies.
    """
    if node is None or node not in model.nodes:
        updates: list[tuple[int, tuple[str, ...], Any]] = [
            (EDGE_TRACE, ("line", "color"), _EDGE_COLOR),
            (OTHER_ROLE_EDGE_TRACE, ("x",), []),
            (OTHER_ROLE_EDGE_TRACE, ("y",), []),
            (SELECTED_EDGE_TRACE, ("x",), []),
            (SELECTED_EDGE_TRACE, ("y",), []),
            (ARROW_TRACE, ("selectedpoints",), None),
        ]
        updates += [
            (FIRST_NODE_TRACE + t, ("selectedpoints",), None)
            for t in range(len(model.node_traces))
        ]
        updates += [(model.selection_trace, ("x",), []), (model.selection_trace, ("y",), [])]
        return tuple(updates)

    highlight = compute_highlight(model, node, role)
    lit = highlight.nodes
    arrow_of = {k: i for i, k in enumerate(model.arrow_edges)}
    thick, thin, arrows = [], [], []
    for k, pair in enumerate(model.drawn_edges):
        if pair in highlight.thick_edges:
            thick.append(pair)
        elif pair in highlight.thin_edges:
            thin.append(pair)
        else:
            continue
        if k in arrow_of:
            arrows.append(2 * arrow_of[k] + 1)
    thick_x, thick_y = _polylines(thick, model.layout.edge_paths)
    thin_x, thin_y = _polylines(thin, model.layout.edge_paths)
    x, y = model.layout.positions[node]
    updates = [
        (EDGE_TRACE, ("line", "color"), _EDGE_COLOR_DIMMED),
        (OTHER_ROLE_EDGE_TRACE, ("x",), thin_x),
        (OTHER_ROLE_EDGE_TRACE, ("y",), thin_y),
        (SELECTED_EDGE_TRACE, ("x",), thick_x),
        (SELECTED_EDGE_TRACE, ("y",), thick_y),
        (ARROW_TRACE, ("selectedpoints",), _selection(arrows, len(model.arrow_edges))),
    ]
    for t, (_, names) in enumerate(model.node_traces):
        points = [i for i, n in enumerate(names) if n in lit]
        updates.append((FIRST_NODE_TRACE + t, ("selectedpoints",), _selection(points, len(names))))
    updates += [(model.selection_trace, ("x",), [x]), (model.selection_trace, ("y",), [y])]
    return tuple(updates)


def highlight_patch(model: GraphFigureModel, node: str | None, role: str | None = None) -> Patch:
    """A ``dash.Patch`` for the figure of ``build_graph_figure(model)`` showing a selection.

    Only ``selectedpoints``, the edge trace's colour and the coordinates of the overlay
    and ring traces change; ``node=None`` clears the highlight.
    """
    patch = Patch()
    for trace, path, value in highlight_updates(model, node, role):
        target = patch["data"][trace]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return patch


def client_highlight_data(model: GraphFigureModel) -> dict[str, Any]:
    """What the browser needs to compute :func:`highlight_updates` itself (JSON-able).

    Nodes are numbered in the order of the node traces' points (trace by trace), so the
    browser finds names, positions and points in the figure itself; roles are numbered
    by ``roles``. ``edges`` holds ``source, target, source role, target role`` per edge and
    ``drawn`` ``source, target`` per drawn edge (both flat), ``paths`` the flat
    ``x0, y0, x1, y1, …`` of each drawn edge's polyline, ``arrows`` the drawn edges with
    an arrowhead (``arrow_edges``). assets/comgra.js reads it.
    """
    names = [name for _, trace_names in model.node_traces for name in trace_names]
    number = {name: i for i, name in enumerate(names)}
    roles = sorted(
        {role for node in model.nodes.values() for role in node.roles}
        | {role for edge in model.edges for role in edge[2:]}
    )
    role_number = {role: i for i, role in enumerate(roles)}
    edges: list[int] = []
    for source, target, source_role, target_role in model.edges:
        edges += [number[source], number[target], role_number[source_role],
                  role_number[target_role]]
    drawn: list[int] = []
    paths: list[list[float]] = []
    for pair in model.drawn_edges:
        drawn += [number[pair[0]], number[pair[1]]]
        paths.append([_compact(c) for point in model.layout.edge_paths[pair] for c in point])
    return {
        "version": 1,
        "traces": {
            "edges": EDGE_TRACE,
            "other_role_edges": OTHER_ROLE_EDGE_TRACE,
            "selected_edges": SELECTED_EDGE_TRACE,
            "arrows": ARROW_TRACE,
            "first_node": FIRST_NODE_TRACE,
            "node_traces": len(model.node_traces),
            "selection": model.selection_trace,
        },
        "edge_color": _EDGE_COLOR,
        "dimmed_edge_color": _EDGE_COLOR_DIMMED,
        "roles": roles,
        "node_roles": [[role_number[r] for r in model.nodes[name].roles] for name in names],
        "edges": edges,
        "drawn": drawn,
        "paths": paths,
        "arrows": list(model.arrow_edges),
    }


def neighbor_in_direction(model: GraphFigureModel, node: str, direction: str) -> str | None:
    """The node to select when an arrow key is pressed with ``node`` selected.

    ``left``: a dependency (source of an incoming edge), ``right``: a dependent, each the
    one closest in height, then in distance, then in graph order; ``up``/``down``: the
    node above/below in the same layer. ``None`` when there is none or ``node`` is not
    in the graph.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if node not in model.nodes:
        return None
    layout = model.layout
    if direction in ("up", "down"):
        column = layout.layer_order[layout.layers[node]]
        i = column.index(node) + (-1 if direction == "up" else 1)
        return column[i] if 0 <= i < len(column) else None
    if direction == "left":
        candidates = [model.edges[k][0] for k in model.incoming[node]]
    else:
        candidates = [model.edges[k][1] for k in model.outgoing[node]]
    candidates = [c for c in dict.fromkeys(candidates) if c != node]
    if not candidates:
        return None
    x, y = layout.positions[node]
    order = {name: i for i, name in enumerate(model.nodes)}
    return min(
        candidates,
        key=lambda c: (
            abs(layout.positions[c][1] - y),
            abs(layout.positions[c][0] - x),
            order[c],
        ),
    )


# A label may start right after one of these: module paths ("a.b", "a/b") and comgra's
# "<module>__<tensor>" names.
_BOUNDARY = re.compile(r"(?:[./]+|_{2,})(?=[^./])")
# The suffix the recorder gives a node imported from another iteration: memory@initial, h@3
_IMPORT_SUFFIX = re.compile(r"@(?:initial|\d+)$")
# A part longer than a line is broken after a "_" or "-"
_SOFT_PARTS = re.compile(r"[^_-]*(?:[_-]+|$)")


def node_labels(
    names: Iterable[str], max_chars: int = 20, max_lines: int = 2
) -> dict[str, list[str]]:
    """The label of each node, as lines of at most ``max_chars`` characters.

    A label is the node's name less the longest prefix, ending in a ``.``, ``/`` or
    ``__``, that another name starts with too, as long as no other name ends with the
    rest: the module path the names share (``root_module.``) goes, what tells the nodes
    apart stays (``subnet_mem__hidden_state``, not ``hidden_state``, which three nodes
    end with). An import's ``@<iteration>`` stays after the label of its node. Labels
    are wrapped at those boundaries (a part longer than a line after a ``_`` or ``-``,
    else where it must), in lines as even as their number allows. A label longer than
    ``max_lines`` lines keeps its first line (what tells it apart) and its last lines
    (the tensor's own name), with ``…`` for what is left out; on a single line its
    middle is cut out.
    """
    max_chars = max(3, int(max_chars))
    max_lines = max(1, int(max_lines))
    return {name: _wrap(label, max_chars, max_lines) for name, label in _distinct(names).items()}


def _distinct(names: Iterable[str]) -> dict[str, str]:
    """Each name's label on one line (see :func:`node_labels`)."""
    split = {}
    for name in names:
        match = _IMPORT_SUFFIX.search(name)
        cut = match.start() if match and match.start() > 0 else len(name)
        split[name] = (name[:cut], name[cut:])
    endings: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    starts = {}
    for base in {base for base, _ in split.values()}:
        starts[base] = [0, *(m.end() for m in _BOUNDARY.finditer(base))]
        for start in starts[base]:
            endings[base[start:]] = endings.get(base[start:], 0) + 1
            prefixes[base[:start]] = prefixes.get(base[:start], 0) + 1
    labels = {}
    for name, (base, suffix) in split.items():
        # only a prefix another name shares is dropped: a module path, not a "/" that
        # happens to be in a name ("<b>x</b>", "loss/grad ratio")
        unique = [base[i:] for i in starts[base]
                  if endings[base[i:]] == 1 and (i == 0 or prefixes[base[:i]] > 1)]
        # the last unique ending is the shortest; none is unique when the whole name is
        # another name's ending ("weight" and "layer.weight"): then the whole name
        labels[name] = (unique[-1] if unique else base) + suffix
    return labels


def _wrap(label: str, max_chars: int, max_lines: int) -> list[str]:
    pieces = _pieces(label, max_chars)
    lines = _fill(pieces, max_chars)
    if len(lines) <= max_lines:
        # the narrowest lines that need no more of them: "subnet_mem." over
        # "layer_in.bias" rather than "subnet_mem.layer_in." over "bias"
        start = max(-(-len(label) // len(lines)), *map(len, pieces))
        for width in range(start, max_chars):
            narrower = _fill(pieces, width)
            if len(narrower) == len(lines):
                return narrower
        return lines
    if max_lines == 1:
        head = (max_chars - 1) // 2
        return [label[:head] + "…" + label[len(label) - (max_chars - 1 - head):]]
    first = lines[0] if len(lines[0]) < max_chars else lines[0][:-1]
    return [first + "…", *lines[len(lines) - (max_lines - 1):]]


def _pieces(label: str, max_chars: int) -> list[str]:
    """``label`` cut after each boundary; a part longer than a line also after each ``_``
    or ``-``, and what is still too long every ``max_chars`` characters."""
    cuts = [m.end() for m in _BOUNDARY.finditer(label)]
    pieces = []
    for a, b in zip([0, *cuts], [*cuts, len(label)]):
        part = label[a:b]
        if len(part) <= max_chars:
            pieces.append(part)
            continue
        for soft in _SOFT_PARTS.findall(part):
            pieces += [soft[i:i + max_chars] for i in range(0, len(soft), max_chars)]
    return pieces


def _fill(pieces: list[str], max_chars: int) -> list[str]:
    """The pieces in lines of at most ``max_chars`` characters, as many a line as fit."""
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > max_chars:
            lines.append(line)
            line = ""
        line += piece
    if line:
        lines.append(line)
    return lines


def _lines(label: str, max_chars: int) -> int:
    """How many lines ``label`` takes, wrapped at ``max_chars`` characters."""
    return len(_fill(_pieces(label, max_chars), max_chars))


@dataclass(frozen=True)
class _LabelStyle:
    font: int
    marker: int
    position: str
    labels: Mapping[str, list[str]] | None  # None: the nodes have no labels


def _label_style(
    layout: GraphLayout, width_px: int, height_px: int, names: Sequence[str] = ()
) -> _LabelStyle:
    """Font size, marker size, text position and the labels for the initial zoom.

    The densest column and the width of a layer decide how much room a label has:
    above its marker (up to the next node) or beside it (up to the next layer). The
    largest font at which every label (:func:`node_labels`) fits whole in one of the two
    places wins, above the marker before beside it; if none fits, the font that lets ~10
    characters fit a layer's width, with the labels shortened. Labels are left out when
    a node's row is lower than the smallest font (7 px: zooming in helps then), a layer
    narrower than ``_MIN_LABEL_CHARS`` characters of it, or above ``MAX_LABELED_NODES``
    nodes.
    """
    ys = [p[1] for p in layout.positions.values()] or [0.0]
    # the plot area: the figure less its margins and the legend's row
    height_px, width_px = height_px - _MARGIN_HEIGHT, width_px - _MARGIN_WIDTH
    px_per_unit = height_px / (max(ys) - min(ys) + 2 * _Y_PADDING)
    px_per_layer = width_px / (max(layout.num_layers - 1, 0) + 2 * _X_PADDING)
    marker = int(min(16, max(6, px_per_unit * 0.45)))
    above = px_per_unit - marker - 2
    # (position, width, height) of the room a label has
    places = [("middle right", px_per_layer * 0.8 - marker, px_per_unit - 2)]
    if above >= 8:
        places.insert(0, ("top center", px_per_layer * 0.9, above))
    position, room, font_room = places[0]
    labels_fit = (
        len(names) <= MAX_LABELED_NODES
        and font_room >= _MIN_FONT
        and room >= _CHAR_WIDTH * _MIN_FONT * _MIN_LABEL_CHARS
    )
    if not labels_fit:
        return _LabelStyle(int(_MIN_FONT), marker, position, None)

    def fit(font: int, width: float, height: float) -> tuple[int, int]:
        chars = int(min(_MAX_LABEL_CHARS, width / (_CHAR_WIDTH * font)))
        lines = int(min(_MAX_LABEL_LINES, height / (_LINE_HEIGHT * font)))
        return chars, lines

    texts = _distinct(names)
    longest = max(map(len, texts.values()), default=0)
    for font in range(12, _MIN_FONT - 1, -1):
        for place, width, height in places:
            chars, lines = fit(font, width, height)
            if chars < _MIN_LABEL_CHARS or lines < 1 or longest > chars * lines:
                continue
            if all(_lines(text, chars) <= lines for text in texts.values()):
                labels = {name: _wrap(text, chars, lines) for name, text in texts.items()}
                return _LabelStyle(font, marker, place, labels)
    # as large as the node's height allows, but small enough for ~10 characters to fit
    # the width of a layer
    font = int(min(12, max(_MIN_FONT, min(font_room, room / (_CHAR_WIDTH * 10)))))
    chars, lines = fit(font, room, font_room)
    return _LabelStyle(font, marker, position, node_labels(names, chars, max(1, lines)))


def _selection(points: list[int], size: int) -> list[int] | None:
    # None (no selection) looks the same as "everything selected" and costs 4 bytes
    return None if len(points) == size and size else points


def _r(value: float) -> float:
    return round(value, 2)


def _compact(value: float) -> float | int:
    # a whole number as an int: "3" instead of "3.0" in every payload
    return int(value) if float(value).is_integer() else value


def _polylines(
    pairs: Sequence[Edge], paths: Mapping[Edge, Sequence[Point]]
) -> tuple[list[float | None], list[float | None]]:
    """x and y of all ``pairs``' paths for one line trace, ``None`` between polylines.

    An edge that starts where the previous one ended continues its polyline, which
    saves a ``None`` and a repeated point per edge (about half of an overlay's payload).
    """
    unused: dict[str, deque[Edge]] = {}
    for pair in pairs:
        unused.setdefault(pair[0], deque()).append(pair)
    done: set[Edge] = set()
    xs: list[float | None] = []
    ys: list[float | None] = []
    for first in pairs:
        if first in done:
            continue
        pair: Edge | None = first
        skip = 0  # the first point of a continuing edge is the previous edge's last
        while pair is not None:
            done.add(pair)
            for px, py in paths[pair][skip:]:
                xs.append(_compact(px))  # x is a whole number of layers
                ys.append(py)
            skip = 1
            following = unused.get(pair[1])
            pair = None
            while following:
                candidate = following.popleft()
                if candidate not in done:
                    pair = candidate
                    break
        xs.append(None)
        ys.append(None)
    return xs, ys


def _hover_text(node: GraphNodeLike) -> str:
    lines = [f"<b>{plot_text(node.name)}</b>"]
    kind = node.kind
    if node.is_import:
        kind += f" · imported from iteration {node.iteration}"
    lines.append(f"kind: {plot_text(kind)}")
    if node.module_group:
        lines.append(f"module: {plot_text(node.module_group)}")
    for role in node.roles:
        shape = node.shapes.get(role)
        if shape is None:
            shape_text = "shape unknown"
        else:
            shape_text = "×".join(str(d) for d in shape) if len(shape) else "scalar"
        tensor = node.tensor_names.get(role, "")
        detail = f"{tensor} " if tensor and tensor != node.name else ""
        lines.append(f"role {plot_text(role)}: {plot_text(detail)}[{shape_text}]")
    return "<br>".join(lines)


# --- painting: the nodes coloured by a recorded statistic -----------------------------

#: The colour scale of painted nodes (plotly's Viridis: no red in it, so that the red of
#: non-finite data stands out; readable with colour-vision deficiencies).
PAINT_COLORSCALE = "Viridis"
_VIRIDIS = ("#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779",
            "#6ece58", "#b5de2b", "#fde725")
#: A node without data for the painted statistic at the step.
NO_DATA_COLOR = "#d9d9d9"
#: A node whose statistic is NaN or ±Inf (fill), or whose tensor holds one (outline).
NON_FINITE_COLOR = "#d62728"
_NON_FINITE_LINE = 3.5
#: Values that span at least this factor (all of them >= 0) are painted on a log scale.
LOG_SCALE_SPAN = 100.0
_COLORBAR_PX = 70  # the plot width the colour bar takes


@dataclass(frozen=True)
class ColorScale:
    """Where a value falls between ``low`` and ``high`` and its colour (log10 of the
    values when ``log``; values outside are clamped to the ends)."""

    low: float
    high: float
    log: bool = False

    def position(self, value: float) -> float:
        """0 at ``low``, 1 at ``high`` (clamped)."""
        lo, hi, v = self.low, self.high, float(value)
        if self.log:
            lo, hi = math.log10(lo), math.log10(hi)
            v = math.log10(v) if v > 0 else lo
        if hi <= lo:
            return 0.5
        return min(1.0, max(0.0, (v - lo) / (hi - lo)))

    def color(self, value: float) -> str:
        """The colour of a finite ``value`` (``#rrggbb``)."""
        return _interpolate(_VIRIDIS, self.position(value))

    def colorbar_range(self) -> tuple[float, float]:
        """cmin, cmax of the colour bar (log10 of the ends on a log scale)."""
        if self.log:
            return math.log10(self.low), math.log10(self.high)
        return self.low, self.high

    def ticks(self) -> tuple[list[float], list[str]] | None:
        """Tick positions and labels of a log scale's colour bar (None: plotly's own)."""
        if not self.log:
            return None
        first, last = math.floor(math.log10(self.low)), math.ceil(math.log10(self.high))
        every = max(1, math.ceil((last - first + 1) / 8))  # at most ~8 labels
        values = list(range(first, last + 1, every))
        return [float(v) for v in values], [f"1e{v}" for v in values]


def _interpolate(stops: Sequence[str], t: float) -> str:
    x = t * (len(stops) - 1)
    i = min(int(x), len(stops) - 2)
    f = x - i
    a, b = stops[i], stops[i + 1]
    channels = [round(int(a[k:k + 2], 16) * (1 - f) + int(b[k:k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in channels)


def color_scale(values: Iterable[float | None] | np.ndarray) -> ColorScale | None:
    """The scale for ``values`` (non-finite and None ignored; None when none is left).

    A log scale when every value is >= 0 and the positive ones span a factor of
    :data:`LOG_SCALE_SPAN` or more (gradient norms over training, a vanishing gradient
    along the graph); zeros then take the lowest colour. A single value gets a scale
    around it.
    """
    if not isinstance(values, np.ndarray):
        values = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    low, high = float(finite.min()), float(finite.max())
    positive = finite[finite > 0]
    if low >= 0 and positive.size and positive.max() / positive.min() >= LOG_SCALE_SPAN:
        return ColorScale(float(positive.min()), float(positive.max()), log=True)
    if high == low:
        pad = abs(low) * 0.1 or 1.0
        return ColorScale(low - pad, high + pad)
    return ColorScale(low, high)


@dataclass(frozen=True)
class NodeValue:
    """What a painted node shows: the statistic of one of its roles (None: not recorded
    there) and whether any of its roles holds a NaN or an Inf."""

    value: float | None
    role: str | None = None
    non_finite: bool = False


@dataclass(frozen=True)
class Paint:
    """A statistic painted on the nodes at one step.

    ``label`` names it (colour bar and hover), ``values`` maps node names to their
    :class:`NodeValue` (a node not in it has no data), ``scale`` is shared by every step
    (None: no value to scale, every node is grey).
    """

    label: str
    values: Mapping[str, NodeValue]
    scale: ColorScale | None
    step: int | None = None


def node_style(paint: Paint, name: str, is_import: bool) -> tuple[str, str, float]:
    """Fill colour, outline colour and outline width of a painted node.

    A non-finite statistic is filled red; a tensor with a NaN or Inf gets a thick red
    outline (whatever its statistic); a node without data is grey. Import nodes are
    hollow symbols: their outline carries the colour.
    """
    entry = paint.values.get(name)
    value = entry.value if entry is not None else None
    if value is None:
        fill = NO_DATA_COLOR
    elif not math.isfinite(value) or paint.scale is None:
        fill = NON_FINITE_COLOR if not math.isfinite(value) else NO_DATA_COLOR
    else:
        fill = paint.scale.color(value)
    if entry is not None and (entry.non_finite or (value is not None and not math.isfinite(value))):
        return fill, NON_FINITE_COLOR, _NON_FINITE_LINE
    if is_import:
        return fill, fill, 2.0
    return fill, "white", 1.0


def _value_text(paint: Paint, name: str) -> str:
    entry = paint.values.get(name)
    if entry is None or entry.value is None:
        return f"{plot_text(paint.label)}: no data"
    value = entry.value
    text = f"{value:.4g}" if math.isfinite(value) else str(value)
    role = f" (role {plot_text(entry.role)})" if entry.role and entry.role != name else ""
    warning = " · holds NaN/Inf" if entry.non_finite else ""
    return f"{plot_text(paint.label)}: {text}{role}{warning}"


def paint_updates(
    model: GraphFigureModel, paint: Paint
) -> tuple[tuple[int, tuple[str, ...], Any], ...]:
    """``(trace index, property path, value)`` triples that paint the node traces (fill,
    outline, a hover line with the value) and set the colour bar
    (:func:`paint_trace_index`)."""
    updates: list[tuple[int, tuple[str, ...], Any]] = []
    for t, (_, names) in enumerate(model.node_traces):
        trace = FIRST_NODE_TRACE + t
        imports = [model.nodes[n].is_import for n in names]
        styles = [node_style(paint, n, i) for n, i in zip(names, imports)]
        updates += [
            (trace, ("marker", "color"), [s[0] for s in styles]),
            (trace, ("marker", "line", "color"), [s[1] for s in styles]),
            (trace, ("marker", "line", "width"), [s[2] for s in styles]),
            (trace, ("hovertemplate",),
             [f"%{{hovertext}}<br>{_value_text(paint, n)}<extra></extra>" for n in names]),
        ]
    updates.append((paint_trace_index(model), ("marker",), _colorbar_marker(paint)))
    return tuple(updates)


def paint_trace_index(model: GraphFigureModel) -> int:
    """The index of the colour-bar trace of a painted figure (after the ring and the
    legend entry of import nodes, so that no highlight index moves)."""
    has_imports = any(n.is_import for n in model.nodes.values())
    return model.selection_trace + 1 + int(has_imports)


def _colorbar_marker(paint: Paint) -> dict[str, Any]:
    scale = paint.scale
    if scale is None:
        return {"color": [0], "colorscale": [[0, NO_DATA_COLOR], [1, NO_DATA_COLOR]],
                "cmin": 0, "cmax": 1, "showscale": True, "size": 0,
                "colorbar": {"title": {"text": plot_text(paint.label) + "<br>(no data)",
                                       "side": "right"}, "thickness": 10, "len": 0.8,
                             "tickvals": [], "ticktext": []}}
    cmin, cmax = scale.colorbar_range()
    colorbar: dict[str, Any] = {
        "title": {"text": plot_text(paint.label) + (" (log)" if scale.log else ""),
                  "side": "right"},
        "thickness": 10, "len": 0.8, "x": 1.0, "xpad": 4,
    }
    ticks = scale.ticks()
    if ticks is not None:
        colorbar["tickvals"], colorbar["ticktext"] = ticks
    else:  # plotly's own ticks (a patch from a log scale would leave its ticks)
        colorbar["tickvals"], colorbar["ticktext"] = None, None
    return {"color": [cmin], "colorscale": PAINT_COLORSCALE, "cmin": cmin, "cmax": cmax,
            "showscale": True, "size": 0, "colorbar": colorbar}


def paint_traces(model: GraphFigureModel, paint: Paint) -> list[dict[str, Any]]:
    """The colour bar trace and the legend entries of a painted figure (appended last):
    each kind's symbol in grey (the node traces' own legend entries would show the
    colour of their first node), non-finite data and no data."""
    def entry(name: str, symbol: str, fill: str, line: str, width: float) -> dict[str, Any]:
        return {"type": "scatter", "name": name, "x": [None], "y": [None], "mode": "markers",
                "hoverinfo": "skip",
                "marker": {"symbol": symbol, "color": fill, "size": 10,
                           "line": {"color": line, "width": width}}}

    kinds = [entry(plot_text(kind), KIND_SYMBOLS.get(kind, "circle"), "rgb(120, 120, 120)",
                   "white", 1) for kind, _ in model.node_traces]
    return [
        {"type": "scatter", "name": "colour scale", "x": [None], "y": [None],
         "mode": "markers", "hoverinfo": "skip", "showlegend": False,
         "marker": _colorbar_marker(paint)},
        *kinds,
        entry("NaN/Inf", "circle", NON_FINITE_COLOR, NON_FINITE_COLOR, 2.5),
        entry("no data", "circle", NO_DATA_COLOR, "white", 1),
    ]


def paint_patch(model: GraphFigureModel, paint: Paint) -> Patch:
    """A ``dash.Patch`` of a painted figure (:func:`build_graph_figure` with ``paint``)
    that shows ``paint`` instead: the node colours, hover values and the colour bar."""
    patch = Patch()
    for trace, path, value in paint_updates(model, paint):
        target = patch["data"][trace]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return patch
