"""Painting the dependency graph: its nodes coloured by a recorded statistic.

Painted (``build_graph_figure(model, paint=Paint(...))``), the node traces carry one fill
and outline colour per node (a recorded statistic on a :class:`ColorScale`, red for
NaN/Inf, grey for no data) and a hover line with the value; a colour-bar trace and legend
entries follow the figure's other traces, so no highlight index moves. Another step is a
:func:`paint_patch` (colours, hover values and the colour bar only). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dash import Patch

from .graph_model import FIRST_NODE_TRACE, KIND_SYMBOLS, GraphFigureModel, Update, patch_of
from .plot_text import plot_text

__all__ = [
    "COLORBAR_PX",
    "LOG_SCALE_SPAN",
    "NON_FINITE_COLOR",
    "NO_DATA_COLOR",
    "PAINT_COLORSCALE",
    "ColorScale",
    "NodeValue",
    "Paint",
    "color_scale",
    "node_style",
    "paint_patch",
    "paint_trace_index",
    "paint_traces",
    "paint_updates",
]

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
COLORBAR_PX = 70  # the plot width the colour bar takes


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
) -> tuple[Update, ...]:
    """``(trace index, property path, value)`` triples that paint the node traces (fill,
    outline, a hover line with the value) and set the colour bar
    (:func:`paint_trace_index`)."""
    updates: list[Update] = []
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
    return patch_of(paint_updates(model, paint))
