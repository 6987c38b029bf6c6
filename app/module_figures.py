"""Pure builders for the Modules page (issue 15): one level of the module graph.

The module graph is the JSON ``Group.read_module_graph`` returns: invocations (id,
module, parent, class, extra_repr, inputs and outputs with shapes) and edges
``[from, from_role, to, to_role]`` between siblings, from ``"<parent>:input"`` and to
``"<parent>:output"``. One level, as torchexplorer's explorer draws it: the viewed
module's inputs and outputs, one node per child invocation, an edge where an autograd
path leads from one to the other. The root is the invocation without a parent (or, when
the recording names no such invocation, the virtual parent of the top-level
invocations, id ``ROOT``).

The histograms of a module over time are built in ``histogram_figures.py``; their names
are importable from here too (the page imports them as ``module_figures``).

Figures are dicts (see ``figures.py`` for why); names from a recording go through
``plot_text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .figures import Figure, axis, base_layout, empty_figure
from .graph_layout import compute_layout
from .histogram_figures import (  # re-exported: the pages and tests import them from here
    GRID_CELL_BUDGET,
    GRID_ROWS_PER_BIN,
    MAX_GRID_ROWS,
    OVERLAY_COLOURS,
    OVERLAY_LEVELS,
    WHAT_LABELS,
    WHATS,
    HistogramGrid,
    histogram_choices,
    histogram_figure,
    histogram_grid,
    recording_types,
    step_edges,
)
from .module_sharing import hover_rows, sharing
from .plot_text import plot_text
from .typed_figures import typed_arrays

__all__ = [
    "GRID_CELL_BUDGET",
    "GRID_ROWS_PER_BIN",
    "MAX_GRID_ROWS",
    "OVERLAY_COLOURS",
    "OVERLAY_LEVELS",
    "ROOT",
    "WHATS",
    "WHAT_LABELS",
    "HistogramGrid",
    "LevelNode",
    "LevelView",
    "breadcrumb",
    "children",
    "find_invocation",
    "format_shape",
    "has_children",
    "histogram_choices",
    "histogram_figure",
    "histogram_grid",
    "invocations",
    "level_view",
    "module_graph_figure",
    "module_hover",
    "parent_of",
    "recording_types",
    "root_id",
    "step_edges",
    "typed_arrays",
]

#: The virtual root's id when the recording names no root invocation.
ROOT = ""

_INPUT = ":input"
_OUTPUT = ":output"
_MODULE_COLOUR = "#4c78a8"
_LEAF_COLOUR = "#9ecae9"
_IO_COLOUR = "#bab0ac"
_SELECTED_LINE = "#e45756"
_TEXT_POSITION = {"input": "top right", "output": "top left"}


# --- the module graph, one level ------------------------------------------------------


@dataclass(frozen=True)
class LevelNode:
    """A node of one level: a child invocation or an input/output of the viewed module.

    Attributes:
        key: unique in the level (an invocation's id; ``"<parent>:input/<role>"``).
        kind: "module" (a child invocation) or "input" / "output".
        label: the short text drawn next to the node.
        hover: the tooltip (plotly markup, user text escaped).
        has_children: a module that can be opened.
        module: the module's qualified name (invocations only).
    """

    key: str
    kind: str
    label: str
    hover: str
    has_children: bool = False
    module: str | None = None


@dataclass(frozen=True)
class LevelView:
    """The graph of one viewed module: its nodes, the edges between them (by key, with the
    roles they join) and the way up (breadcrumb: ``(label, id)`` from the root)."""

    parent: str
    nodes: tuple[LevelNode, ...]
    edges: tuple[tuple[str, str, str], ...]  # (from key, to key, "role → role")
    breadcrumb: tuple[tuple[str, str], ...]


def invocations(graph: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The graph's invocations by id."""
    return {str(inv["id"]): inv for inv in (graph or {}).get("invocations", ())}


def root_id(graph: Mapping[str, Any] | None) -> str:
    """The id of the top level: the one invocation without a parent, else ``ROOT``."""
    by_id = invocations(graph)
    tops = [i for i, inv in by_id.items() if not _parent_of(inv, by_id)]
    return tops[0] if len(tops) == 1 and tops[0] != ROOT else ROOT


def _parent_of(inv: Mapping[str, Any], by_id: Mapping[str, Any]) -> str | None:
    parent = inv.get("parent")
    if parent is None or (parent not in by_id and parent != ROOT):
        return None
    return str(parent)


def children(graph: Mapping[str, Any] | None, parent: str) -> list[Mapping[str, Any]]:
    """The invocations directly inside ``parent``, in recorded (call) order."""
    by_id = invocations(graph)
    root = root_id(graph)
    found = []
    for inv_id, inv in by_id.items():
        if inv_id == parent:
            continue
        up = _parent_of(inv, by_id)
        if up == parent or (parent == root and up in (None, ROOT) and inv_id != root):
            found.append(inv)
    return found


def has_children(graph: Mapping[str, Any] | None, inv_id: str) -> bool:
    return bool(children(graph, inv_id))


def breadcrumb(graph: Mapping[str, Any] | None, parent: str) -> list[tuple[str, str]]:
    """``(label, id)`` from the root down to ``parent``."""
    by_id = invocations(graph)
    root = root_id(graph)
    chain: list[str] = []
    current: str | None = parent
    while current is not None and current != root and current not in chain:
        chain.append(current)
        current = _parent_of(by_id[current], by_id) if current in by_id else None
    chain.reverse()
    root_inv = by_id.get(root)
    # the root's name as watch() gave it ("model"), else its class
    root_label = root or (str(root_inv.get("class") or "model") if root_inv else "model")
    return [(root_label, root)] + [(_short_name(by_id, i), i) for i in chain]


def parent_of(graph: Mapping[str, Any] | None, inv_id: str) -> str:
    """The id of the level that shows ``inv_id`` (the root for unknown ids)."""
    by_id = invocations(graph)
    inv = by_id.get(inv_id)
    up = _parent_of(inv, by_id) if inv else None
    return up if up is not None else root_id(graph)


def find_invocation(graph: Mapping[str, Any] | None, name: str) -> str | None:
    """The invocation of a node of the dependency graph, if any: a module's invocation id
    or name (its inputs and outputs), else the module a parameter node
    (``model.fc.weight``) belongs to."""
    by_id = invocations(graph)
    if name in by_id:
        return name
    found = next((i for i, inv in by_id.items() if inv.get("module") == name), None)
    if found is None and "." in name:
        owner = name.rsplit(".", 1)[0]
        found = next((i for i, inv in by_id.items() if owner in (i, inv.get("module"))), None)
    return found


def _short_name(by_id: Mapping[str, Mapping[str, Any]], inv_id: str) -> str:
    """The name relative to the parent (``conv1`` inside ``layer1.0``)."""
    inv = by_id.get(inv_id, {})
    parent = _parent_of(inv, by_id) if inv else None
    parent_module = str(by_id[parent].get("module") or parent) if parent in by_id else ""
    name = inv_id
    if parent_module and name.startswith(parent_module + "."):
        name = name[len(parent_module) + 1:]
    return name or str(inv.get("class") or "model")


def format_shape(shape: Any) -> str:
    """``(B, 64, 56, 56)``: -1 (or None) is the batch dimension that varies."""
    if shape is None:
        return "?"
    if isinstance(shape, (str, int)):
        return str(shape)
    dims = ["B" if d is None or (isinstance(d, (int, np.integer)) and d < 0) else str(d)
            for d in shape]
    return "(" + ", ".join(dims) + ")"


def module_hover(inv: Mapping[str, Any], shared: list | None = None) -> str:
    """Tooltip: name and class, one row per input and output with its shape, the
    module's ``extra_repr`` as key: value rows, then its parameters shared with other
    modules (``module_sharing.SharedParameter``)."""
    name = plot_text(inv.get("module") or inv.get("id") or "model")
    rows = [f"<b>{name}</b> · {plot_text(inv.get('class') or '')}"]
    for port in list(inv.get("inputs") or ()) + list(inv.get("outputs") or ()):
        rows.append(f"{plot_text(port.get('role'))}: {plot_text(format_shape(port.get('shape')))}")
    extra = inv.get("extra_repr") or {}
    if isinstance(extra, str):
        extra = {"extra_repr": extra} if extra else {}
    if extra:
        rows.append("―――")
        rows.extend(f"{plot_text(k)}: {plot_text(v)}" for k, v in extra.items())
    if shared:
        rows.append("―――")
        rows.extend(hover_rows(shared))
    return "<br>".join(rows)


def level_view(graph: Mapping[str, Any] | None, parent: str | None = None) -> LevelView:
    """The nodes and edges of one level of ``graph`` (the root level for None or an id
    the graph does not have)."""
    by_id = invocations(graph)
    root = root_id(graph)
    if parent is None or (parent not in by_id and parent != root):
        parent = root
    kids = children(graph, parent)
    kid_ids = {str(k["id"]) for k in kids}
    shares = sharing(graph)
    parent_inv = by_id.get(parent, {})
    shapes = {("input", p.get("role")): p.get("shape") for p in parent_inv.get("inputs") or ()}
    shapes |= {("output", p.get("role")): p.get("shape") for p in parent_inv.get("outputs") or ()}

    io_roles: dict[str, list[str]] = {"input": [], "output": []}
    for kind, ports in (("input", parent_inv.get("inputs")), ("output", parent_inv.get("outputs"))):
        for port in ports or ():
            io_roles[kind].append(str(port.get("role")))
    edges: dict[tuple[str, str], list[str]] = {}
    for edge in (graph or {}).get("edges", ()):
        source, source_role, target, target_role = (str(e) for e in edge)
        if source == parent + _INPUT:
            source_key = _io_key(parent, "input", source_role)
            if source_role not in io_roles["input"]:
                io_roles["input"].append(source_role)
        elif source in kid_ids:
            source_key = source
        else:
            continue
        if target == parent + _OUTPUT:
            target_key = _io_key(parent, "output", target_role)
            if target_role not in io_roles["output"]:
                io_roles["output"].append(target_role)
        elif target in kid_ids:
            target_key = target
        else:
            continue
        roles = edges.setdefault((source_key, target_key), [])
        label = f"{source_role} → {target_role}"
        if label not in roles:
            roles.append(label)

    nodes = [
        LevelNode(_io_key(parent, "input", role), "input", role,
                  f"<b>{plot_text(role)}</b> of {plot_text(parent or 'the model')}<br>"
                  f"shape {plot_text(format_shape(shapes.get(('input', role))))}")
        for role in io_roles["input"]
    ]
    for kid in kids:
        kid_id = str(kid["id"])
        nodes.append(
            LevelNode(kid_id, "module", _short_name(by_id, kid_id),
                      module_hover(kid, shares.get(str(kid.get("module") or kid_id))),
                      has_children=has_children(graph, kid_id),
                      module=str(kid.get("module") or kid_id))
        )
    nodes += [
        LevelNode(_io_key(parent, "output", role), "output", role,
                  f"<b>{plot_text(role)}</b> of {plot_text(parent or 'the model')}<br>"
                  f"shape {plot_text(format_shape(shapes.get(('output', role))))}")
        for role in io_roles["output"]
    ]
    return LevelView(
        parent=parent,
        nodes=tuple(nodes),
        edges=tuple((s, t, ", ".join(r)) for (s, t), r in edges.items()),
        breadcrumb=tuple(breadcrumb(graph, parent)),
    )


def _io_key(parent: str, kind: str, role: str) -> str:
    return f"{parent}:{kind}/{role}"


def module_graph_figure(
    view: LevelView, selected: Sequence[str] = (), height: int | None = None
) -> Figure:
    """The level as a left-to-right graph. Points carry ``customdata = [key, kind,
    has_children]``; modules that can be opened are squares, leaves circles, the viewed
    module's inputs and outputs grey diamonds; selected modules have a red border."""
    if not view.nodes:
        return empty_figure("No module invocations recorded at this level.", height=height)
    keys = [n.key for n in view.nodes]
    layout = compute_layout(
        keys,
        [(s, t) for s, t, _ in view.edges],
        import_nodes=[n.key for n in view.nodes if n.kind == "input"],
        layer_spacing=1.0,
        node_spacing=1.0,
    )
    x_line: list[float | None] = []
    y_line: list[float | None] = []
    mid_x, mid_y, mid_text = [], [], []
    annotations = []
    for source, target, roles in view.edges:
        path = layout.edge_paths.get((source, target))
        if not path:
            continue
        for px, py in path:
            x_line.append(px)
            y_line.append(py)
        x_line.append(None)
        y_line.append(None)
        (x0, y0), (x1, y1) = path[-2], path[-1]
        annotations.append({
            "x": x1, "y": y1, "ax": x0, "ay": y0, "xref": "x", "yref": "y",
            "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 2,
            "arrowsize": 1.2, "arrowwidth": 1.2, "arrowcolor": "#8c96a3", "text": "",
            "standoff": 11,
        })
        mid = path[len(path) // 2 - 1] if len(path) > 2 else None
        (ax_, ay_), (bx, by) = (mid, path[len(path) // 2]) if mid else (path[0], path[1])
        mid_x.append((ax_ + bx) / 2)
        mid_y.append((ay_ + by) / 2)
        mid_text.append(plot_text(roles))
    traces: list[dict] = [
        {"type": "scatter", "mode": "lines", "x": x_line, "y": y_line, "hoverinfo": "skip",
         "line": {"color": "#8c96a3", "width": 1.2}, "showlegend": False},
        {"type": "scatter", "mode": "markers", "x": mid_x, "y": mid_y, "text": mid_text,
         "hovertemplate": "%{text}<extra></extra>", "marker": {"size": 6, "opacity": 0},
         "showlegend": False, "name": "edges"},
    ]
    chosen = set(selected)
    xs, ys, labels, hovers, custom, symbols, colours, lines, widths, where = (
        [] for _ in range(10))
    for node in view.nodes:
        x, y = layout.positions[node.key]
        xs.append(x)
        ys.append(y)
        suffix = " ▸" if node.has_children else ""
        labels.append(plot_text(node.label) + suffix)
        hint = "<br><i>click to open its modules</i>" if node.has_children else ""
        hovers.append(node.hover + hint)
        custom.append([node.key, node.kind, node.has_children])
        # the viewed module's inputs and outputs are labelled above, towards the inside:
        # below and centred, a long role ("output last_hidden_state") ran into the label
        # of the module beside it and past the figure's edge
        where.append(_TEXT_POSITION.get(node.kind, "bottom center"))
        if node.kind == "module":
            symbols.append("square" if node.has_children else "circle")
            colours.append(_MODULE_COLOUR if node.has_children else _LEAF_COLOUR)
        else:
            symbols.append("diamond")
            colours.append(_IO_COLOUR)
        selected_node = node.kind == "module" and node.key in chosen
        lines.append(_SELECTED_LINE if selected_node else "#ffffff")
        widths.append(3 if selected_node else 1)
    traces.append({
        "type": "scatter", "mode": "markers+text", "x": xs, "y": ys, "text": labels,
        "textposition": where, "hovertext": hovers, "hoverinfo": "text",
        "customdata": custom, "name": "modules", "showlegend": False,
        "marker": {"size": 20, "symbol": symbols, "color": colours,
                   "line": {"color": lines, "width": widths}},
        "cliponaxis": False,
    })
    rows = max((len(col) for col in layout.layer_order), default=1)
    fig_height = height or int(min(560, max(200, 60 + 60 * rows)))
    return {
        "data": traces,
        "layout": base_layout(
            height=fig_height,
            xaxis=axis(visible=False, range=[-0.5, max(layout.num_layers - 0.5, 0.5)]),
            yaxis=axis(visible=False, scaleanchor=None),
            annotations=annotations,
            hovermode="closest",
            dragmode="pan",
            clickmode="event",
            margin={"l": 20, "r": 20, "t": 12, "b": 24},
        ),
    }
