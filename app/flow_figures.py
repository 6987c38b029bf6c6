"""Pure builders of the Flow page (issue 18): the Sankey of a chain of gradient flows, the
gradient heatmaps of its nodes, the units a clicked unit exchanges gradient with, and the
editable input of the probe loop.

Inputs are :class:`comgra_like.query.flows.FlowData` (numpy arrays, memory-mapped) of one
chain, earlier pair first; outputs are plotly figures and plain data. No data access, no
Dash, no torch.

What a link is: ``F[i, j] = g_b[i] · ∂b_i/∂a_j`` (record/flow.py), the share of the
gradient reaching unit ``j`` of the earlier node ``a`` that passes through unit ``i`` of
the later node ``b``. A link is drawn from ``a``'s unit (left) to ``b``'s (right), its
width ``|F|``, red when positive and blue when negative. When a node has more units than
``max_units``, units are grouped in blocks (``query.flows.blocks_for``: square-ish
blocks of a 2-D map) and a link carries the sum of the flows between two blocks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from comgra_like.format.flows import COMPLETE, PARTIAL
from comgra_like.query.flows import FlowData, blocks_for, flow_links, pool_sum

from .plot_text import plot_text

#: Default number of units a node is drawn with at most (more are grouped in blocks).
DEFAULT_MAX_UNITS = 16
#: At most this many links are drawn (the largest); the summary says how many were above.
MAX_LINKS = 300
#: The threshold slider: the threshold is ``10 ** s`` times the largest link, s in range.
SLIDER_MIN, SLIDER_MAX = -4.0, 0.0
POSITIVE, NEGATIVE = "rgba(214, 39, 40, {a})", "rgba(31, 119, 180, {a})"
LAYER_COLOURS = ("#636efa", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880")


def threshold_for(slider: float | None, largest: float) -> float:
    """The absolute threshold the slider position ``slider`` (log10 of a fraction of the
    largest link) stands for."""
    s = SLIDER_MIN if slider is None else min(SLIDER_MAX, max(SLIDER_MIN, float(slider)))
    return float(largest) * 10.0 ** s


# --- nodes and units ----------------------------------------------------------------------


@dataclass(frozen=True)
class ChainNode:
    """One node of the chain: its per-sample shape and gradient (None when not stored)."""

    name: str
    shape: tuple[int, ...]
    grad: np.ndarray | None
    value: np.ndarray | None


def with_rows(flow: FlowData, answers: Sequence[FlowData]) -> FlowData:
    """``flow`` (too large to store whole, or partial) joined with the rows served for it
    on demand (partial records of the same pair): a partial flow with every row known,
    the stored ones first. A unit asked twice keeps its first row. Complete flows and
    flows without answers are returned as they are."""
    if flow.info.status == COMPLETE or not answers:
        return flow
    n_source = math.prod(flow.info.source_shape) if flow.info.source_shape else 1
    rows: list[int] = []
    parts: list[np.ndarray] = []
    if flow.flow is not None and flow.info.status == PARTIAL:
        rows.extend(int(r) for r in flow.info.rows or ())
        parts.append(np.asarray(flow.flow).reshape(-1, n_source))
    for answer in answers:
        if answer.flow is None or answer.info.rows is None:
            continue
        if answer.info.source_shape != flow.info.source_shape:
            continue  # the served network changed shape: not rows of this flow
        matrix = np.asarray(answer.flow).reshape(-1, n_source)
        keep = [k for k, r in enumerate(answer.info.rows) if r not in rows]
        rows.extend(int(answer.info.rows[k]) for k in keep)
        parts.append(matrix[keep])
    if not rows:
        return flow
    matrix = np.concatenate(parts).reshape((len(rows),) + tuple(flow.info.source_shape))
    info = dataclasses.replace(flow.info, status=PARTIAL, rows=tuple(rows))
    return dataclasses.replace(flow, info=info, flow=matrix)


def missing_row(flows: Sequence[FlowData], node: str, unit: int) -> FlowData | None:
    """The flow ending at ``node`` when it lacks ``unit``'s row (no full matrix, and the
    row was not computed): the flow whose row the page can ask for. None otherwise."""
    names = [n.name for n in chain_nodes(flows)]
    if node not in names or names.index(node) == 0:
        return None
    f = flows[names.index(node) - 1]
    if f.info.status == COMPLETE and f.flow is not None:
        return None
    if f.info.status == PARTIAL and f.flow is not None and unit in (f.info.rows or ()):
        return None
    return f


def chain_nodes(flows: Sequence[FlowData]) -> list[ChainNode]:
    """The nodes of a chain of flows, earlier first (each flow's target is the next
    flow's source)."""
    if not flows:
        return []
    first = flows[0]
    nodes = [ChainNode(first.info.source, first.info.source_shape, first.grad_source,
                       first.value_source)]
    for f in flows:
        nodes.append(ChainNode(f.info.target, f.info.target_shape, f.grad_target,
                               f.value_target))
    return nodes


def group_of(flat: np.ndarray | int, shape: Sequence[int], blocks: Sequence[int]) -> np.ndarray:
    """The block (flat index in the grouped shape) each flat unit index falls in."""
    shape, blocks = tuple(shape), tuple(blocks)
    grouped = tuple(math.ceil(s / b) for s, b in zip(shape, blocks))
    if not shape:
        return np.zeros(np.shape(flat), dtype=np.int64)
    coords = np.unravel_index(np.asarray(flat, dtype=np.int64), shape)
    return np.ravel_multi_index(tuple(c // b for c, b in zip(coords, blocks)), grouped)


def _axis_names(rank: int) -> list[str]:
    return {1: ["i"], 2: ["y", "x"], 3: ["c", "y", "x"]}.get(rank, [f"d{k}" for k in range(rank)])


def unit_label(name: str, shape: Sequence[int], blocks: Sequence[int], group: int) -> str:
    """``conv1[c3, y0:4, x4:8]``: a block of units by its index ranges (end excluded)."""
    shape, blocks = tuple(shape), tuple(blocks)
    if not shape:
        return name
    grouped = tuple(math.ceil(s / b) for s, b in zip(shape, blocks))
    coords = np.unravel_index(int(group), grouped)
    parts = []
    for axis, c, b, s in zip(_axis_names(len(shape)), coords, blocks, shape):
        start, end = int(c) * b, min(s, (int(c) + 1) * b)
        parts.append(f"{axis}{start}" if end - start == 1 else f"{axis}{start}:{end}")
    return f"{name}[{', '.join(parts)}]"


def grouping_text(shape: Sequence[int], blocks: Sequence[int]) -> str:
    """'1024 units in 64 groups of 1×4×4' or '36 units, each drawn'."""
    n = math.prod(shape)
    groups = math.prod(math.ceil(s / b) for s, b in zip(shape, blocks))
    if groups == n:
        return f"{n} unit{'s' if n != 1 else ''}, each drawn"
    return f"{n} units in {groups} groups of {'×'.join(str(b) for b in blocks)}"


# --- grouped flows and the Sankey -------------------------------------------------------


@dataclass
class GroupedFlow:
    """A flow between blocks of units: ``matrix[r, s]`` is the flow from block ``s`` of the
    source to block ``targets[r]`` of the target (only the target blocks that have rows:
    all of them for a complete flow, those of the computed rows for a partial one)."""

    source: str
    target: str
    status: str
    matrix: np.ndarray | None  # None: too_large or missing (no matrix stored)
    targets: np.ndarray
    source_blocks: tuple[int, ...]
    target_blocks: tuple[int, ...]
    rows: int = 0  # unit rows behind it (partial: the computed ones)


def grouped_flow(flow: FlowData, source_blocks: Sequence[int],
                 target_blocks: Sequence[int]) -> GroupedFlow:
    """The flow of ``flow`` summed over blocks of units (see :func:`query.flows.pool_sum`)."""
    info = flow.info
    source_blocks, target_blocks = tuple(source_blocks), tuple(target_blocks)
    n_source_groups = math.prod(math.ceil(s / b) for s, b in zip(info.source_shape,
                                                                   source_blocks))
    empty = GroupedFlow(info.source, info.target, info.status, None,
                        np.zeros(0, np.int64), source_blocks, target_blocks)
    if flow.flow is None or info.status not in (COMPLETE, PARTIAL):
        return empty
    if info.status == COMPLETE:
        pooled = pool_sum(flow.flow, target_blocks + source_blocks)
        matrix = np.asarray(pooled, dtype=np.float64).reshape(-1, n_source_groups)
        return GroupedFlow(info.source, info.target, info.status, matrix,
                           np.arange(matrix.shape[0], dtype=np.int64), source_blocks,
                           target_blocks, rows=math.prod(info.target_shape))
    rows = np.asarray(info.rows if info.rows is not None else (), dtype=np.int64)
    pooled = np.asarray(pool_sum(flow.flow, (1,) + source_blocks), dtype=np.float64)
    pooled = pooled.reshape(len(rows), n_source_groups)
    groups = group_of(rows, info.target_shape, target_blocks)
    targets, inverse = np.unique(groups, return_inverse=True)
    matrix = np.zeros((len(targets), n_source_groups))
    np.add.at(matrix, inverse.reshape(-1), pooled)
    return GroupedFlow(info.source, info.target, info.status, matrix, targets, source_blocks,
                       target_blocks, rows=len(rows))


def chain_blocks(flows: Sequence[FlowData], max_units: int) -> dict[str, tuple[int, ...]]:
    """The block sizes of every node of the chain (one grouping per node, shared by the
    flow that ends at it and the one that starts there)."""
    return {n.name: blocks_for(n.shape, max_units) for n in chain_nodes(flows)}


def group_chain(flows: Sequence[FlowData], max_units: int) -> list[GroupedFlow]:
    blocks = chain_blocks(flows, max_units)
    return [grouped_flow(f, blocks[f.info.source], blocks[f.info.target]) for f in flows]


def largest_link(grouped: Sequence[GroupedFlow]) -> float:
    """The largest ``|flow|`` between two blocks along the chain (0.0 when none)."""
    values = [float(np.abs(g.matrix).max()) for g in grouped
              if g.matrix is not None and g.matrix.size]
    return max(values, default=0.0)


@dataclass
class SankeyModel:
    """What the Sankey draws and the summary says."""

    labels: list[str] = field(default_factory=list)
    node_layer: list[int] = field(default_factory=list)
    node_key: list[tuple[str, int]] = field(default_factory=list)  # (node name, block)
    link_source: list[int] = field(default_factory=list)
    link_target: list[int] = field(default_factory=list)
    link_value: list[float] = field(default_factory=list)  # signed flow
    per_flow: list[dict[str, Any]] = field(default_factory=list)
    threshold: float = 0.0
    largest: float = 0.0


def sankey_model(grouped: Sequence[GroupedFlow], shapes: Mapping[str, Sequence[int]],
                 threshold: float, max_links: int = MAX_LINKS) -> SankeyModel:
    """The links of every flow of the chain with ``|value| >= threshold`` (from
    :func:`query.flows.flow_links`), the largest ``max_links`` of the whole chain, and the
    nodes they connect. ``per_flow`` says, per pair, how many links were above the
    threshold and how many are drawn, and the pair's status."""
    model = SankeyModel(threshold=float(threshold), largest=largest_link(grouped))
    layer_of = {}
    for g in grouped:
        layer_of.setdefault(g.source, len(layer_of))
        layer_of.setdefault(g.target, len(layer_of))
    candidates = []
    for k, g in enumerate(grouped):
        entry = {"source": g.source, "target": g.target, "status": g.status, "above": 0,
                 "drawn": 0, "rows": g.rows}
        model.per_flow.append(entry)
        if g.matrix is None:
            continue
        n_groups = g.matrix.shape[1]
        links = flow_links(g.matrix, (n_groups,), rows=g.targets, min_abs=threshold)
        entry["above"] = len(links["value"])
        for t, s, v in zip(links["target"], links["source"], links["value"]):
            candidates.append((abs(v), k, int(s), int(t), float(v)))
    candidates.sort(key=lambda c: -c[0])
    index: dict[tuple[str, int], int] = {}

    def node(name: str, block: int, blocks: tuple[int, ...]) -> int:
        key = (name, block)
        if key not in index:
            index[key] = len(model.labels)
            model.labels.append(unit_label(name, shapes[name], blocks, block))
            model.node_layer.append(layer_of[name])
            model.node_key.append(key)
        return index[key]

    for _, k, s, t, v in candidates[:max_links]:
        g = grouped[k]
        model.link_source.append(node(g.source, s, g.source_blocks))
        model.link_target.append(node(g.target, t, g.target_blocks))
        model.link_value.append(v)
        model.per_flow[k]["drawn"] += 1
    return model


def sankey_figure(model: SankeyModel, *, title: str = "", height: int = 420) -> go.Figure:
    """The Sankey of a chain: links ``|F|`` wide, red positive, blue negative."""
    if not model.link_value:
        fig = go.Figure()
        fig.add_annotation(text="No flow above the threshold." if model.per_flow
                           else "No flows.", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    else:
        top = max(abs(v) for v in model.link_value) or 1.0
        colours = [(POSITIVE if v >= 0 else NEGATIVE).format(
            a=round(0.25 + 0.6 * abs(v) / top, 3)) for v in model.link_value]
        # Each node in the column of its layer: plotly would put a node without incoming
        # links (a partial flow's sources, the units it has no rows for) in the first one.
        layers = max(model.node_layer) + 1
        count = [model.node_layer.count(k) for k in range(layers)]
        seen = [0] * layers
        x, y = [], []
        for k in model.node_layer:
            x.append(0.001 + 0.998 * k / max(1, layers - 1))
            y.append(0.001 + 0.998 * (seen[k] + 0.5) / count[k])
            seen[k] += 1
        fig = go.Figure(go.Sankey(
            arrangement="snap",
            node={"label": [plot_text(label) for label in model.labels], "pad": 4, "thickness": 12,
                  "x": x, "y": y,
                      "color": [LAYER_COLOURS[k % len(LAYER_COLOURS)] for k in model.node_layer],
                      "hovertemplate": "%{label}<extra></extra>"},
            link={"source": model.link_source, "target": model.link_target,
                      "value": [abs(v) for v in model.link_value], "color": colours,
                      "customdata": [f"{v:+.4g}" for v in model.link_value],
                      "hovertemplate": ("gradient %{customdata} from %{target.label} back to "
                                     "%{source.label}<extra></extra>")},
        ))
    fig.update_layout(title={"text": plot_text(title), "font": {"size": 13}}, height=height,
                      margin={"l": 10, "r": 10, "t": 36 if title else 10, "b": 10},
                      meta={"links": len(model.link_value)})
    return fig


def summary_lines(model: SankeyModel, shapes: Mapping[str, Sequence[int]],
                  blocks: Mapping[str, Sequence[int]]) -> list[str]:
    """The threshold, the grouping of each node and the links of each pair, as text."""
    lines = [f"threshold |F| ≥ {model.threshold:.3g} (largest link {model.largest:.3g})"]
    for name, shape in shapes.items():
        lines.append(f"{name} {tuple(shape)}: {grouping_text(shape, blocks[name])}")
    for entry in model.per_flow:
        pair = f"{entry['source']} → {entry['target']}"
        if entry["status"] == COMPLETE:
            lines.append(f"{pair}: {entry['above']} links above the threshold, "
                         f"{entry['drawn']} drawn")
        elif entry["status"] == PARTIAL:
            rows = (f"the row of 1 unit of {entry['target']} was" if entry["rows"] == 1
                    else f"the rows of {entry['rows']} units of {entry['target']} were")
            lines.append(f"{pair}: partial flow, only {rows} computed; {entry['above']} links "
                         f"above the threshold, {entry['drawn']} drawn")
        else:
            lines.append(f"{pair}: no matrix stored ({entry['status']}): click a unit of "
                         f"{entry['target']} on the heatmaps to compute its row")
    return lines


# --- heatmaps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MapLayout:
    """Where each unit of a per-sample tensor sits in a 2-D picture: ``index[r, c]`` is
    the flat unit index shown there, -1 in the gaps between tiles. A 2-D map is itself;
    a rank-3 tensor is its maps (last two axes) tiled in a square-ish grid; a vector is a
    row."""

    shape: tuple[int, ...]
    index: np.ndarray

    def picture(self, values: np.ndarray) -> np.ndarray:
        """``values`` (the node's shape) as the picture, NaN in the gaps."""
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        out = np.full(self.index.shape, np.nan)
        inside = self.index >= 0
        out[inside] = flat[self.index[inside]]
        return out

    def unit_at(self, row: int, col: int) -> int | None:
        if 0 <= row < self.index.shape[0] and 0 <= col < self.index.shape[1]:
            u = int(self.index[row, col])
            return u if u >= 0 else None
        return None

    def cells_of(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) of the given flat unit indices."""
        where = np.full(math.prod(self.shape) if self.shape else 1, -1, dtype=np.int64)
        inside = self.index >= 0
        where[self.index[inside]] = np.flatnonzero(inside)
        cells = where[np.asarray(units, dtype=np.int64)]
        return np.divmod(cells, self.index.shape[1])


def map_layout(shape: Sequence[int]) -> MapLayout:
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape) if shape else 1
    if len(shape) <= 1:
        return MapLayout(shape, np.arange(n, dtype=np.int64).reshape(1, n))
    if len(shape) == 2:
        return MapLayout(shape, np.arange(n, dtype=np.int64).reshape(shape))
    h, w = shape[-2], shape[-1]
    tiles = n // (h * w)
    cols = math.ceil(math.sqrt(tiles))
    rows = math.ceil(tiles / cols)
    index = np.full((rows * (h + 1) - 1, cols * (w + 1) - 1), -1, dtype=np.int64)
    units = np.arange(n, dtype=np.int64).reshape(tiles, h, w)
    for t in range(tiles):
        r, c = divmod(t, cols)
        index[r * (h + 1):r * (h + 1) + h, c * (w + 1):c * (w + 1) + w] = units[t]
    return MapLayout(shape, index)


def highlight_sets(flows: Sequence[FlowData], node: str, unit: int) -> dict[str, Any]:
    """The units the clicked ``unit`` of ``node`` exchanges gradient with, node by node:
    in earlier nodes the units its gradient reaches (nonzero entries of its row, then of
    those units' rows, ...), in later nodes the units whose gradient reaches it (nonzero
    entries of its column, ...). Returns ``{"units": {name: flat indices}, "unknown":
    [names]}``; a node is unknown when the flow to it has no matrix or, for a partial
    flow, none of the needed rows was computed."""
    names = [n.name for n in chain_nodes(flows)]
    if node not in names:
        return {"units": {}, "unknown": []}
    at = names.index(node)
    units: dict[str, np.ndarray] = {node: np.asarray([int(unit)], dtype=np.int64)}
    unknown: list[str] = []
    current = units[node]
    for k in range(at - 1, -1, -1):  # flow k: names[k] -> names[k + 1]
        f = flows[k]
        matrix, rows = _matrix(f)
        if matrix is None:
            unknown.append(names[k])
            break
        if rows is None:
            picked = matrix[current]
        else:
            keep = np.isin(rows, current)
            if not keep.any():
                unknown.append(names[k])
                break
            picked = matrix[keep]
        current = np.flatnonzero((np.asarray(picked) != 0).any(axis=0))
        units[names[k]] = current
    current = units[node]
    for k in range(at, len(flows)):  # flow k: names[k] -> names[k + 1]
        f = flows[k]
        matrix, rows = _matrix(f)
        if matrix is None:
            unknown.append(names[k + 1])
            break
        hit = np.flatnonzero((np.asarray(matrix[:, current]) != 0).any(axis=1))
        current = hit if rows is None else np.asarray(rows, dtype=np.int64)[hit]
        units[names[k + 1]] = current
    return {"units": units, "unknown": unknown}


def _matrix(f: FlowData) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The flow as (target rows, source units), and the row indices of a partial flow."""
    if f.flow is None or f.info.status not in (COMPLETE, PARTIAL):
        return None, None
    n_source = math.prod(f.info.source_shape) if f.info.source_shape else 1
    matrix = f.flow.reshape(-1, n_source)
    if f.info.status == PARTIAL:
        return matrix, np.asarray(f.info.rows or (), dtype=np.int64)
    return matrix, None


def heatmaps_figure(nodes: Sequence[ChainNode], *, selected: tuple[str, int] | None = None,
                    highlight: Mapping[str, np.ndarray] | None = None,
                    height: int = 300) -> go.Figure:
    """The gradient at each node, side by side (trace ``k`` is node ``k``'s heatmap, its
    customdata the flat unit index of each cell); highlighted units are outlined."""
    if not nodes:
        fig = go.Figure()
        fig.update_layout(height=height)
        return fig
    fig = make_subplots(rows=1, cols=len(nodes), horizontal_spacing=0.04,
                        subplot_titles=[plot_text(f"{n.name} {tuple(n.shape)}") for n in nodes])
    outlines = []
    for k, n in enumerate(nodes):
        layout = map_layout(n.shape)
        grad = n.grad if n.grad is not None else np.zeros(n.shape, np.float32)
        z = layout.picture(grad)
        top = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 0.0
        fig.add_trace(go.Heatmap(
            z=z, customdata=layout.index, colorscale="RdBu", reversescale=True,
            zmid=0, zmin=-top or None, zmax=top or None, showscale=False, name=n.name,
            hovertemplate=f"{plot_text(n.name)} unit %{{customdata}}<br>gradient %{{z:.4g}}<extra></extra>",
            xgap=0, ygap=0), row=1, col=k + 1)
        fig.update_yaxes(autorange="reversed", showticklabels=False, row=1, col=k + 1,
                         scaleanchor=f"x{k + 1 if k else ''}")
        fig.update_xaxes(showticklabels=False, row=1, col=k + 1)
        marked = (highlight or {}).get(n.name)
        if marked is not None and len(marked):
            rows, cols = layout.cells_of(marked)
            outlines.append((k, rows, cols, selected is not None and selected[0] == n.name))
    for k, rows, cols, is_clicked in outlines:
        fig.add_trace(go.Scatter(
            x=cols, y=rows, mode="markers", hoverinfo="skip", showlegend=False,
            name=f"highlight {nodes[k].name}",
            marker={"symbol": "square-open", "size": 8 if not is_clicked else 11,
                        "color": "black" if not is_clicked else "#ff7f0e",
                        "line": {"width": 2}}), row=1, col=k + 1)
    fig.update_layout(height=height, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      meta={"nodes": [n.name for n in nodes]})
    return fig


# --- the probe editor ---------------------------------------------------------------------


def toggle(values: np.ndarray, unit: int, z: float) -> np.ndarray:
    """vnittest's click: a unit at 0 becomes ``z``, any other value becomes 0."""
    out = np.array(values, dtype=np.float32, copy=True)
    flat = out.reshape(-1)
    flat[unit] = np.float32(z) if flat[unit] == 0 else np.float32(0)
    return out


def paint(values: np.ndarray, units: Sequence[int], z: float) -> np.ndarray:
    """Set the given units to ``z`` (the paint mode's click)."""
    out = np.array(values, dtype=np.float32, copy=True)
    out.reshape(-1)[np.asarray(list(units), dtype=np.int64)] = np.float32(z)
    return out


def editor_figure(values: np.ndarray, *, original: np.ndarray | None = None,
                  title: str = "", height: int = 320) -> go.Figure:
    """The input of the sample as a heatmap to edit (customdata: flat unit index); cells
    that differ from ``original`` are outlined."""
    values = np.asarray(values, dtype=np.float32)
    layout = map_layout(values.shape)
    z = layout.picture(values)
    fig = go.Figure(go.Heatmap(
        z=z, customdata=layout.index, colorscale="Viridis", name="input",
        hovertemplate="unit %{customdata}: %{z:.4g}<extra></extra>"))
    if original is not None and np.shape(original) == values.shape:
        changed = np.flatnonzero(values.reshape(-1) != np.asarray(original).reshape(-1))
        if len(changed):
            rows, cols = layout.cells_of(changed)
            fig.add_trace(go.Scatter(x=cols, y=rows, mode="markers", hoverinfo="skip",
                                     name="edited", showlegend=False,
                                     marker={"symbol": "square-open", "size": 10,
                                                 "color": "#ff7f0e", "line": {"width": 2}}))
    fig.update_yaxes(autorange="reversed", scaleanchor="x", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(title={"text": plot_text(title), "font": {"size": 13}}, height=height,
                      margin={"l": 10, "r": 10, "t": 30, "b": 10}, dragmode=False)
    return fig
