"""Pure builders for the Modules page (issue 15): one level of the module graph and the
histograms of a module over time.

The module graph is the JSON ``Group.read_module_graph`` returns: invocations (id,
module, parent, class, extra_repr, inputs and outputs with shapes) and edges
``[from, from_role, to, to_role]`` between siblings, from ``"<parent>:input"`` and to
``"<parent>:output"``. One level, as torchexplorer's explorer draws it: the viewed
module's inputs and outputs, one node per child invocation, an edge where an autograd
path leads from one to the other. The root is the invocation without a parent (or, when
the recording names no such invocation, the virtual parent of the top-level
invocations, id ``ROOT``).

Histograms are the rows ``Group.read_histograms`` returns for one module, role and kind
(``what``): one column per recorded step, the bins as rows, colour for the counts. Bin
ranges may differ from step to step (torchexplorer bins each step between its own
minimum and maximum); the columns are then painted on a shared value grid, every cell
with the count of the step's bin that covers it, so the colours are counts read, never
interpolated ones.

Figures are dicts (see ``figures.py`` for why); names from a recording go through
``plot_text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .figures import Figure, axis, base_layout, empty_figure
from .graph_layout import compute_layout
from .module_sharing import hover_rows, sharing
from .plot_text import plot_text
from .typed_figures import typed_arrays  # noqa: F401  (the pages import it from here)

#: The virtual root's id when the recording names no root invocation.
ROOT = ""
#: What a histogram is of, in the order the panels offer them.
WHATS: tuple[str, ...] = ("io", "io_grad", "params", "params_grad")
WHAT_LABELS = {
    "io": "inputs / outputs",
    "io_grad": "gradients of inputs / outputs",
    "params": "parameters",
    "params_grad": "parameter gradients",
}
#: A value grid shared by steps with different bin ranges has at least this many rows
#: per bin of the finest step, so that narrow bins stay visible ...
GRID_ROWS_PER_BIN = 2
#: ... within a budget of cells (what the browser receives: 500 steps get 80 rows) ...
GRID_CELL_BUDGET = 40_000
#: ... and never more than this many rows, nor fewer than the most bins of a step.
MAX_GRID_ROWS = 512

_INPUT = ":input"
_OUTPUT = ":output"
_MODULE_COLOUR = "#4c78a8"
_LEAF_COLOUR = "#9ecae9"
_IO_COLOUR = "#bab0ac"
_SELECTED_LINE = "#e45756"
_TEXT_POSITION = {"input": "top right", "output": "top left"}
_COUNTS_SCALE = "Viridis"


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


# --- histograms over time -------------------------------------------------------------


@dataclass(frozen=True)
class HistogramGrid:
    """Counts on a value grid, one column per recorded step.

    Attributes:
        steps: the recorded training steps, one column each, ascending.
        edges: the value grid's row boundaries (rows + 1, ascending).
        counts: rows × steps; NaN where the step has no bin.
        bin_lo, bin_hi: rows × steps, the range of the step's bin behind each cell.
        vmin, vmax: per step, the smallest and largest value seen.
        shared: every step has the same bins (the grid is exactly those bins).
    """

    steps: np.ndarray
    edges: np.ndarray
    counts: np.ndarray
    bin_lo: np.ndarray
    bin_hi: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    shared: bool


def step_edges(row: Mapping[str, Any]) -> np.ndarray:
    """A histogram row's bin edges: its explicit ``edges`` if it has them, else equal bins
    from ``lo`` to ``hi`` (a zero-width range becomes one value wide, so constant tensors
    still show)."""
    counts = np.asarray(row["counts"])
    explicit = row.get("edges") if hasattr(row, "get") else None
    if explicit is not None and not (isinstance(explicit, float) and np.isnan(explicit)):
        edges = np.asarray(explicit, dtype=np.float64)
        if len(edges) == len(counts) + 1:
            return edges
    lo, hi = float(row["lo"]), float(row["hi"])
    if not hi > lo:
        half = max(abs(lo) * 1e-3, 1e-6)
        lo, hi = lo - half, hi + half
    return np.linspace(lo, hi, len(counts) + 1)


def histogram_grid(frame: pd.DataFrame, cell_budget: int = GRID_CELL_BUDGET) -> HistogramGrid:
    """The histograms of one module, role and ``what`` (rows of ``read_histograms``) on one
    value grid: every recorded step is a column. When all steps have the same bins the
    grid is those bins and the counts are the counts read; otherwise a uniform grid over
    all steps' ranges (rows within ``cell_budget`` cells, see ``GRID_*``) shows in each
    cell the count of the step's bin that contains the cell's centre."""
    if frame.empty:
        raise ValueError("no histogram rows to draw")
    frame = frame.sort_values("training_step", kind="stable")
    frame = frame.drop_duplicates("training_step", keep="last")
    steps = frame["training_step"].to_numpy(dtype=np.int64)
    rows = frame.to_dict("records")
    per_step = [step_edges(r) for r in rows]
    counts = [np.asarray(r["counts"], dtype=np.float64) for r in rows]
    vmin = frame["vmin"].to_numpy(dtype=np.float64) if "vmin" in frame else np.full(len(rows), np.nan)
    vmax = frame["vmax"].to_numpy(dtype=np.float64) if "vmax" in frame else np.full(len(rows), np.nan)
    first = per_step[0]
    shared = all(len(e) == len(first) and np.array_equal(e, first) for e in per_step)
    if shared:
        z = np.stack(counts, axis=1)
        lo = np.repeat(first[:-1, None], len(steps), axis=1)
        hi = np.repeat(first[1:, None], len(steps), axis=1)
        return HistogramGrid(steps, first, z, lo, hi, vmin, vmax, True)
    low = min(float(e[0]) for e in per_step)
    high = max(float(e[-1]) for e in per_step)
    finest = min(float(np.min(np.diff(e))) for e in per_step)
    most_bins = max(len(c) for c in counts)
    wanted = (int(np.ceil((high - low) / finest)) * GRID_ROWS_PER_BIN if finest > 0
              else MAX_GRID_ROWS)
    allowed = min(MAX_GRID_ROWS, max(most_bins, cell_budget // len(steps)))
    n_rows = int(max(most_bins, min(wanted, allowed)))
    edges = np.linspace(low, high, n_rows + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    z = np.full((n_rows, len(steps)), np.nan)
    lo = np.full_like(z, np.nan)
    hi = np.full_like(z, np.nan)
    for column, (e, c) in enumerate(zip(per_step, counts)):
        index = np.searchsorted(e, centres, side="right") - 1
        inside = (index >= 0) & (index < len(c))
        z[inside, column] = c[index[inside]]
        lo[inside, column] = e[index[inside]]
        hi[inside, column] = e[index[inside] + 1]
    return HistogramGrid(steps, edges, z, lo, hi, vmin, vmax, False)


def histogram_figure(
    panels: Sequence[tuple[str, HistogramGrid | None]],
    *,
    log_color: bool = False,
    height: int = 300,
    title: str | None = None,
    overlay: bool = False,
) -> Figure:
    """Histograms over time, one subplot per ``(label, grid)`` side by side (the same
    module of several trials, or several gradient groups) with one shared colour scale
    and value axis: a heatmap of the counts (log colour optional, the hover always shows
    the count), the min and max bounds as lines and a dashed line at zero. ``label`` is
    plain text; a None grid is a trial without such histograms. ``overlay`` draws them
    all in one panel instead (see ``_overlay_figure``)."""
    shown = [(label, grid) for label, grid in panels if grid is not None]
    if not shown:
        return empty_figure("No histograms recorded for this choice yet.", height=height)
    if overlay and len(panels) > 1:
        return _overlay_figure(panels, log_color=log_color, height=height, title=title)
    n = len(panels)
    gap = 0.04
    width = (1 - gap * (n - 1)) / n
    # a grey background: the white dashed zero line shows where a step has no bin, too
    layout = base_layout(title=title, height=height, hovermode="closest", showlegend=False,
                         plot_bgcolor="#e9ecef")
    finite = [g.counts[np.isfinite(g.counts)] for _, g in shown]
    top = max((float(v.max()) for v in finite if v.size), default=1.0)
    lows = [float(g.edges[0]) for _, g in shown]
    highs = [float(g.edges[-1]) for _, g in shown]
    for g in (g for _, g in shown):
        lows += [float(v) for v in g.vmin if np.isfinite(v)]
        highs += [float(v) for v in g.vmax if np.isfinite(v)]
    y_range = [min(lows), max(highs)]
    pad = (y_range[1] - y_range[0]) * 0.02 or 1e-6
    y_range = [y_range[0] - pad, y_range[1] + pad]
    layout["coloraxis"] = {
        "colorscale": _COUNTS_SCALE,
        "cmin": 0,
        "cmax": float(np.log10(top + 1)) if log_color else top,
        "colorbar": {"title": {"text": "log₁₀(1+count)" if log_color else "count", "side": "right"},
                     "thickness": 10, "len": 0.9},
    }
    data: list[dict] = []
    shapes: list[dict] = []
    annotations: list[dict] = []
    for i, (label, grid) in enumerate(panels):
        suffix = "" if i == 0 else str(i + 1)
        x_name, y_name = f"x{suffix}", f"y{suffix}"
        domain = [i * (width + gap), i * (width + gap) + width]
        layout[f"xaxis{suffix}"] = axis("step", domain=domain, anchor=y_name)
        layout[f"yaxis{suffix}"] = axis(
            "value" if i == 0 else None, anchor=x_name, range=y_range,
            zeroline=False, showticklabels=i == 0,
            **({} if i == 0 else {"matches": "y"}),
        )
        annotations.append({"text": plot_text(label), "x": (domain[0] + domain[1]) / 2,
                            "y": 1.0, "xref": "paper", "yref": "paper", "yanchor": "bottom",
                            "showarrow": False, "font": {"size": 12}})
        if grid is None:
            annotations.append({"text": "nothing recorded", "x": (domain[0] + domain[1]) / 2,
                                "y": 0.5, "xref": "paper", "yref": "paper",
                                "showarrow": False, "font": {"color": "#6c757d"}})
            continue
        z = np.log10(grid.counts + 1) if log_color else grid.counts
        custom = np.stack([grid.bin_lo, grid.bin_hi, grid.counts], axis=-1).astype(np.float32)
        data.append({
            "type": "heatmap", "x": grid.steps, "y": grid.edges, "z": z,
            "customdata": custom, "coloraxis": "coloraxis", "xaxis": x_name, "yaxis": y_name,
            "hoverongaps": False, "name": plot_text(label),
            "hovertemplate": "step %{x}<br>bin %{customdata[0]:.4g} … %{customdata[1]:.4g}"
                             "<br>count %{customdata[2]:d}<extra></extra>",
        })
        for values, name in ((grid.vmin, "min"), (grid.vmax, "max")):
            data.append({
                "type": "scatter", "mode": "lines+markers" if len(grid.steps) < 3 else "lines",
                "x": grid.steps, "y": values, "xaxis": x_name, "yaxis": y_name,
                "line": {"color": "#d62728", "width": 1.2}, "marker": {"size": 4},
                "name": name, "hovertemplate": f"step %{{x}}<br>{name} %{{y:.4g}}<extra></extra>",
            })
        if y_range[0] <= 0 <= y_range[1]:
            shapes.append({"type": "line", "xref": f"{x_name} domain", "yref": y_name,
                           "x0": 0, "x1": 1, "y0": 0, "y1": 0,
                           "line": {"color": "#ffffff", "width": 1.2, "dash": "dash"}})
    layout["shapes"] = shapes
    layout["annotations"] = annotations
    layout["margin"] = {"l": 56, "r": 12, "t": 40 if title else 24, "b": 36}
    return {"data": data, "layout": layout}


#: Colours of the overlaid histograms after the first (contour lines and bounds).
OVERLAY_COLOURS: tuple[str, ...] = ("#ff7f0e", "#e377c2", "#17becf", "#bcbd22", "#8c564b")
#: Contour levels of an overlaid histogram (few: the lines must stay readable over the
#: first histogram's colours).
OVERLAY_LEVELS = 6


def _value_range(grids: Sequence[HistogramGrid]) -> list[float]:
    lows = [float(g.edges[0]) for g in grids]
    highs = [float(g.edges[-1]) for g in grids]
    for g in grids:
        lows += [float(v) for v in g.vmin if np.isfinite(v)]
        highs += [float(v) for v in g.vmax if np.isfinite(v)]
    low, high = min(lows), max(highs)
    pad = (high - low) * 0.02 or 1e-6
    return [low - pad, high + pad]


def _overlay_figure(
    panels: Sequence[tuple[str, HistogramGrid | None]],
    *,
    log_color: bool,
    height: int,
    title: str | None,
) -> Figure:
    """Several histograms over time in one panel: the first as the coloured heatmap, each
    further one as contour lines of its counts in a colour of its own (a second heatmap
    would hide the first one's cells), every one with its min and max bounds in its
    colour and a legend entry, so that which counts belong to which stays readable. The
    contour levels use the same scale as the heatmap (log colour included); the hover on
    a line gives its label, the step, the value and the count there."""
    shown = [(label, grid) for label, grid in panels if grid is not None]
    missing = [label for label, grid in panels if grid is None]
    layout = base_layout(title=title, height=height, hovermode="closest", showlegend=True,
                         plot_bgcolor="#e9ecef")
    layout["legend"] = {"orientation": "h", "y": -0.22, "x": 0, "font": {"size": 11}}
    finite = [g.counts[np.isfinite(g.counts)] for _, g in shown]
    top = max((float(v.max()) for v in finite if v.size), default=1.0)
    cmax = float(np.log10(top + 1)) if log_color else top
    y_range = _value_range([g for _, g in shown])
    layout["xaxis"] = axis("step")
    layout["yaxis"] = axis("value", range=y_range, zeroline=False)
    layout["coloraxis"] = {
        "colorscale": _COUNTS_SCALE, "cmin": 0, "cmax": cmax,
        "colorbar": {"title": {"text": "log₁₀(1+count)" if log_color else "count",
                               "side": "right"}, "thickness": 10, "len": 0.9},
    }
    data: list[dict] = []
    for i, (label, grid) in enumerate(shown):
        z = np.log10(grid.counts + 1) if log_color else grid.counts
        colour = "#d62728" if i == 0 else OVERLAY_COLOURS[(i - 1) % len(OVERLAY_COLOURS)]
        name = plot_text(label)
        if i == 0:
            custom = np.stack([grid.bin_lo, grid.bin_hi, grid.counts], axis=-1).astype(np.float32)
            data.append({
                "type": "heatmap", "x": grid.steps, "y": grid.edges, "z": z,
                "customdata": custom, "coloraxis": "coloraxis", "hoverongaps": False,
                "name": f"{name} (colours)", "showlegend": True, "legendgroup": name,
                "hovertemplate": f"{name}<br>step %{{x}}<br>bin %{{customdata[0]:.4g}} … "
                                 "%{customdata[1]:.4g}<br>count %{customdata[2]:d}<extra></extra>",
            })
        else:
            centres = (grid.edges[:-1] + grid.edges[1:]) / 2
            data.append({
                "type": "contour", "x": grid.steps, "y": centres, "z": z,
                "name": f"{name} (lines)", "showlegend": True, "legendgroup": name,
                "showscale": False, "connectgaps": False,
                "colorscale": [[0, colour], [1, colour]],
                "contours": {"coloring": "lines", "start": cmax / OVERLAY_LEVELS,
                             "end": cmax, "size": cmax / OVERLAY_LEVELS or 1},
                "line": {"width": 1.6, "color": colour},
                "customdata": grid.counts.astype(np.float32),
                "hovertemplate": f"{name}<br>step %{{x}}<br>value %{{y:.4g}}<br>count "
                                 "%{customdata:d}<extra></extra>",
            })
        for values, bound in ((grid.vmin, "min"), (grid.vmax, "max")):
            data.append({
                "type": "scatter", "mode": "lines+markers" if len(grid.steps) < 3 else "lines",
                "x": grid.steps, "y": values, "name": f"{name} {bound}",
                "legendgroup": name, "showlegend": False,
                "line": {"color": colour, "width": 1.2, "dash": "solid" if i == 0 else "dot"},
                "marker": {"size": 4},
                "hovertemplate": f"{name}<br>step %{{x}}<br>{bound} %{{y:.4g}}<extra></extra>",
            })
    shapes = []
    if y_range[0] <= 0 <= y_range[1]:
        shapes.append({"type": "line", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1,
                       "y0": 0, "y1": 0,
                       "line": {"color": "#ffffff", "width": 1.2, "dash": "dash"}})
    layout["shapes"] = shapes
    if missing:
        layout["annotations"] = [{
            "text": plot_text("nothing recorded: " + ", ".join(missing)), "x": 1, "y": 1.0,
            "xref": "paper", "yref": "paper", "xanchor": "right", "yanchor": "bottom",
            "showarrow": False, "font": {"color": "#6c757d", "size": 11}}]
    layout["margin"] = {"l": 56, "r": 12, "t": 40 if title else 24, "b": 36}
    return {"data": data, "layout": layout}


def recording_types(frame: pd.DataFrame, what: str, role: str) -> list[str]:
    """The recording types (forward, the gradient groups such as ``gradient:backward``,
    ``gradient:backward_2`` or a recorder's loss groups) of one module's histograms of
    ``what`` and ``role``: forward first, then the gradient groups by name."""
    if frame is None or frame.empty or "recording_type" not in frame:
        return []
    part = frame[(frame["what"] == what) & (frame["role"] == role)]
    return sorted({str(r) for r in part["recording_type"]}, key=_recording_type_order)


def _recording_type_order(recording_type: str) -> tuple[int, str, int]:
    # backward_10 after backward_2: the pass number as a number
    head, _, tail = recording_type.rpartition("_")
    numbered = bool(head) and tail.isdigit()
    kind = 0 if recording_type == "forward" else 1 if recording_type.startswith("gradient") else 2
    return kind, head if numbered else recording_type, int(tail) if numbered else 1


def histogram_choices(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The roles recorded per ``what`` in one module's histogram rows (what in WHATS order,
    roles in first-seen order)."""
    out: dict[str, list[str]] = {}
    if frame.empty:
        return out
    for what in WHATS:
        part = frame[frame["what"] == what]
        if len(part):
            out[what] = list(dict.fromkeys(str(r) for r in part["role"]))
    return out
