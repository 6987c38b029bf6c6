"""The dependency graph's figure model: its layout, indexes and trace numbering.

Pure functions; no Dash callbacks, no file access. :func:`build_graph_model` lays out a
``Graph`` of the query API (any object with ``graph_hash``, ``nodes`` and ``edges``, see
:class:`GraphLike`) and indexes it, once per graph; the figure (``graph_figure.py``),
the highlight and keyboard navigation (``graph_highlight.py``) and the painting
(``graph_paint.py``) all read the :class:`GraphFigureModel`. The trace indices
(``*_TRACE``) are fixed; ``graph_figure.py``'s docstring lists the traces.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from dash import Patch

from comgra_like import vocabulary as vocab

from .graph_layout import Edge, GraphLayout, Point, compute_layout

__all__ = [
    "ARROW_TRACE",
    "EDGE_TRACE",
    "FIRST_NODE_TRACE",
    "KIND_COLORS",
    "KIND_ORDER",
    "KIND_SYMBOLS",
    "MAX_ARROWS",
    "OTHER_ROLE_EDGE_TRACE",
    "SELECTED_EDGE_TRACE",
    "UNKNOWN_KIND_COLOR",
    "GraphEdgeLike",
    "GraphFigureModel",
    "GraphLike",
    "GraphNodeLike",
    "Update",
    "build_graph_model",
    "compact",
    "patch_of",
    "polylines",
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

# The same for arrowheads (two plotly points each, ~0.1 ms per redraw): above this many
# drawn edges only the edges that run right to left get one (a layered layout draws every
# other edge left to right).
MAX_ARROWS = 300

#: ``(trace index, property path, value)``: one change of a figure, applied to the
#: figure's dict by ``build_graph_figure`` and sent as a ``dash.Patch`` by :func:`patch_of`.
Update = tuple[int, tuple[str, ...], Any]


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


def patch_of(updates: Iterable[Update]) -> Patch:
    """A ``dash.Patch`` that makes ``updates`` (the highlight's, the painting's)."""
    patch = Patch()
    for trace, path, value in updates:
        target = patch["data"][trace]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return patch


def compact(value: float) -> float | int:
    # a whole number as an int: "3" instead of "3.0" in every payload
    return int(value) if float(value).is_integer() else value


def polylines(
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
                xs.append(compact(px))  # x is a whole number of layers
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
