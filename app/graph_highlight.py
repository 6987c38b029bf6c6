"""The highlight of a selected node in the dependency-graph figure, and keyboard
navigation between nodes.

Pure functions over a :class:`~comgra_like.app.graph_model.GraphFigureModel`; no Dash
callbacks, no file access. Highlighting only touches ``selectedpoints`` of the node and
arrow traces (the dimmed style is the trace's static ``unselected`` style), the colour of
the edge trace and the coordinates of the two overlays and the ring. No per-node colour
arrays are sent.

The browser applies the highlight of a click itself (``highlightUpdates`` in
assets/comgra.js, from :func:`client_highlight_data`, which the figure carries in
``layout.meta.highlight``): the same updates as :func:`highlight_updates`, without waiting
for the server. The server's patch still follows when the selection it makes differs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from dash import Patch

from .graph_layout import Edge
from .graph_model import (
    ARROW_TRACE,
    EDGE_TRACE,
    FIRST_NODE_TRACE,
    OTHER_ROLE_EDGE_TRACE,
    SELECTED_EDGE_TRACE,
    GraphFigureModel,
    Update,
    compact,
    patch_of,
    polylines,
)

__all__ = [
    "DIRECTIONS",
    "EDGE_COLOR",
    "EDGE_COLOR_DIMMED",
    "HIGHLIGHT_EDGE_COLOR",
    "Highlight",
    "client_highlight_data",
    "compute_highlight",
    "highlight_patch",
    "highlight_updates",
    "neighbor_in_direction",
]

EDGE_COLOR = "rgba(110, 110, 110, 0.55)"
EDGE_COLOR_DIMMED = "rgba(150, 150, 150, 0.18)"
HIGHLIGHT_EDGE_COLOR = "rgba(30, 30, 30, 0.9)"
DIRECTIONS = ("left", "right", "up", "down")


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
) -> tuple[Update, ...]:
    """``(trace index, property path, value)`` triples that show a selection.

    ``node=None`` or a node not in the graph (a stale selection) clears the highlight.
    The triples are what :func:`highlight_patch` sends and what
    :func:`build_graph_figure` applies.
    """
    if node is None or node not in model.nodes:
        updates: list[Update] = [
            (EDGE_TRACE, ("line", "color"), EDGE_COLOR),
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
    thick_x, thick_y = polylines(thick, model.layout.edge_paths)
    thin_x, thin_y = polylines(thin, model.layout.edge_paths)
    x, y = model.layout.positions[node]
    updates = [
        (EDGE_TRACE, ("line", "color"), EDGE_COLOR_DIMMED),
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
    return patch_of(highlight_updates(model, node, role))


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
        paths.append([compact(c) for point in model.layout.edge_paths[pair] for c in point])
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
        "edge_color": EDGE_COLOR,
        "dimmed_edge_color": EDGE_COLOR_DIMMED,
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


def _selection(points: list[int], size: int) -> list[int] | None:
    # None (no selection) looks the same as "everything selected" and costs 4 bytes
    return None if len(points) == size and size else points
