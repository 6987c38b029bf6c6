"""Pure builders for the Modules page's histograms of a module over time (issue 15).

Histograms are the rows ``Group.read_histograms`` returns for one module, role and kind
(``what``): one column per recorded step, the bins as rows, colour for the counts. Bin
ranges may differ from step to step (torchexplorer bins each step between its own
minimum and maximum); the columns are then painted on a shared value grid, every cell
with the count of the step's bin that covers it, so the colours are counts read, never
interpolated ones.

Figures are dicts (see ``figures.py`` for why); names from a recording go through
``plot_text``. The page sends them through ``typed_figures.typed_arrays``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .figures import Figure, axis, base_layout, empty_figure
from .plot_text import plot_text

__all__ = [
    "GRID_CELL_BUDGET",
    "GRID_ROWS_PER_BIN",
    "MAX_GRID_ROWS",
    "OVERLAY_COLOURS",
    "OVERLAY_LEVELS",
    "WHATS",
    "WHAT_LABELS",
    "HistogramGrid",
    "histogram_choices",
    "histogram_figure",
    "histogram_grid",
    "recording_types",
    "step_edges",
]

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

_COUNTS_SCALE = "Viridis"


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
    y_range = _value_range([g for _, g in shown])
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
