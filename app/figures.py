"""Pure figure and table builders for the value views and the Graphs page.

No Dash callbacks, no file access: inputs are numbers, arrays and the frames the query
API returns; outputs are plotly figure dicts (``{"data": [...], "layout": {...}}``) or
plain rows. Dicts, not ``go.Figure``: building a validated figure object costs 10–20 ms
per view, a dict well under one, and these run on every selection change.

Every name from a recording goes through :func:`~comgra_like.app.plot_text.plot_text`
before it enters a figure (plotly renders HTML in figure text); ``title`` arguments are
figure markup, so callers escape what they put there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.vocabulary import COUNT_STATISTICS, STATISTIC_LABELS

from .plot_text import plot_text
from .typed_figures import typed_array, typed_values  # noqa: F401 (re-export: one encoding)

#: Above this many values a heatmap is thinned (every k-th row/column) to stay responsive.
MAX_HEATMAP_CELLS = 250_000
#: Per-cell hover labels with the original index are built up to this many cells.
MAX_INDEXED_HOVER_CELLS = 40_000
#: The series across steps shows a legend for up to this many types of execution.
MAX_SERIES_LEGEND = 4
#: A series with more points is drawn from the smallest and largest value of each of
#: MAX_SERIES_POINTS // 2 runs of steps: 100,000 points took seconds to send and draw,
#: and a plot is at most ~1,500 pixels wide, so two points per pixel column is all a
#: screen shows; the extremes keep every spike visible.
MAX_SERIES_POINTS = 3000
#: 1-D tensors up to this length are bars; longer ones are wrapped into a matrix.
MAX_BAR_LENGTH = 128

_FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12}
_MARGIN = {"l": 48, "r": 12, "t": 36, "b": 36}
# Blue for negative, white at zero, red for positive (ColorBrewer RdBu). An explicit list:
# plotly.js does not know plotly.py's "_r" names.
_DIVERGING = [
    [0.0, "#2166ac"],
    [0.25, "#92c5de"],
    [0.5, "#f7f7f7"],
    [0.75, "#f4a582"],
    [1.0, "#b2182b"],
]

#: Statistics computed for some tensors only (NaN elsewhere: "does not apply", not a NaN
#: in the data).
_SOMETIMES_COMPUTED = frozenset({"svd_top", "update_ratio"})


Figure = dict  # a plotly figure as a dict: {"data": [...], "layout": {...}}


def axis(title: str | None = None, **extra: Any) -> dict:
    """An axis in the shared light style (what plotly's 'plotly_white' template gives)."""
    spec = {
        "gridcolor": "#ebeef2",
        "zerolinecolor": "#c9ced6",
        "linecolor": "#c9ced6",
        "automargin": True,
    }
    if title:
        spec["title"] = {"text": title, "standoff": 6}
    spec.update(extra)
    return spec


def base_layout(title: str | None = None, height: int | None = None, **extra: Any) -> dict:
    """The layout every figure here shares: compact margins, system font, white background."""
    layout = {
        "margin": _MARGIN if title else {**_MARGIN, "t": 12},
        "font": _FONT,
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hoverlabel": {"font": {"size": 12}},
    }
    if title:
        layout["title"] = {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 13}}
    if height is not None:
        layout["height"] = height
    layout.update(extra)
    return layout


def empty_figure(message: str, height: int | None = None) -> Figure:
    """A blank figure that says why there is nothing to show (``message`` is plain text:
    error messages name tensors and files)."""
    return {
        "data": [],
        "layout": base_layout(
            height=height,
            xaxis={"visible": False},
            yaxis={"visible": False},
            annotations=[
                {
                    "text": plot_text(message),
                    "showarrow": False,
                    "x": 0.5,
                    "y": 0.5,
                    "xref": "paper",
                    "yref": "paper",
                    "font": {"size": 13, "color": "#6c757d"},
                }
            ],
        ),
    }


# --- numbers --------------------------------------------------------------------------


def format_number(value: Any, statistic: str | None = None) -> str:
    """A statistic as text: counts as integers, floats with 6 significant digits."""
    if value is None:
        return "–"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(number):
        return "–" if statistic in _SOMETIMES_COMPUTED else "NaN"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if statistic in COUNT_STATISTICS:
        return f"{int(number):,}"
    if number == 0:
        return "0"
    return f"{number:.6g}"


def statistics_rows(stats: Mapping[str, float]) -> list[tuple[str, str, str]]:
    """Rows (statistic name, label, formatted value) for the statistics table.

    Known statistics come first in a fixed order; unknown ones follow sorted, so that a
    newer recorder's extra column still shows. Statistics that do not apply (NaN
    ``svd_top``/``update_ratio``) are left out.
    """
    rows = []
    for name, label in STATISTIC_LABELS.items():
        if name not in stats:
            continue
        value = stats[name]
        if name in _SOMETIMES_COMPUTED and _is_nan(value):
            continue
        rows.append((name, label, format_number(value, name)))
    for name in sorted(set(stats) - set(STATISTIC_LABELS)):
        rows.append((name, name, format_number(stats[name], name)))
    return rows


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def format_shape(shape: Sequence[int] | None) -> str:
    """(3, 4) -> '3 × 4'; () -> 'scalar'."""
    if shape is None:
        return "–"
    if len(shape) == 0:
        return "scalar"
    return " × ".join(str(int(d)) for d in shape)


# --- per-neuron values ----------------------------------------------------------------


def matrix_view(values: np.ndarray) -> tuple[np.ndarray, str, str, list[int] | None]:
    """How a tensor of any rank is drawn as a matrix.

    Returns (matrix, x label, y label, shape of the rows' index or None):
    2-D as it is; 3-D and higher as (product of the leading dims, last dim), the rows
    labelled by their leading indices; 1-D wrapped into rows of about sqrt(n) values.
    """
    values = np.asarray(values)
    if values.ndim == 2:
        return values, "dim 1", "dim 0", None
    if values.ndim >= 3:
        leading = list(values.shape[:-1])
        matrix = values.reshape(int(np.prod(leading)), values.shape[-1])
        return (
            matrix,
            f"dim {values.ndim - 1}",
            "dims " + ",".join(map(str, range(values.ndim - 1))),
            leading,
        )
    flat = values.reshape(-1)
    width = max(1, math.ceil(math.sqrt(flat.size)))
    rows = math.ceil(flat.size / width)
    padded = np.full(rows * width, np.nan, dtype=np.float64)
    padded[: flat.size] = flat
    return padded.reshape(rows, width), "index mod width", "index ÷ width", None


def neuron_figure(
    values: np.ndarray | None,
    title: str = "",
    height: int | None = None,
) -> Figure:
    """The values of one tensor, one cell/bar per value, exact numbers on hover.

    0-D: one bar. 1-D: bars up to :data:`MAX_BAR_LENGTH` values, else wrapped into a
    matrix. 2-D: a heatmap as the matrix. Higher ranks: rows are the leading indices.
    Colours are symmetric around 0 (blue negative, red positive); NaN/inf are blank and
    counted in the subtitle.
    """
    if values is None:
        return empty_figure("only statistics were recorded for this tensor", height)
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return empty_figure("empty tensor", height)
    finite = np.isfinite(array)
    bad = int(array.size - finite.sum())
    note = f"{bad} NaN/inf value{'s' if bad != 1 else ''} left blank" if bad else ""
    shown = np.where(finite, array, np.nan)
    if array.ndim == 0 or (array.ndim == 1 and array.size <= MAX_BAR_LENGTH):
        flat = shown.reshape(-1)
        bar = {
            "type": "bar",
            "x": list(range(flat.size)),
            "y": flat,
            "marker": {"color": flat, "colorscale": _DIVERGING, "cmid": 0},
            "hovertemplate": "index %{x}<br>value %{y:.7g}<extra></extra>",
        }
        layout = base_layout(
            _with_note(title, note),
            height,
            xaxis=axis("index" if array.ndim else None, showticklabels=array.ndim > 0),
            yaxis=axis("value", zeroline=True),
            bargap=0.1 if flat.size < 40 else 0,
        )
        return {"data": [bar], "layout": layout}
    matrix, x_label, y_label, leading = matrix_view(shown)
    matrix, step_rows, step_cols = _thin(matrix)
    if step_rows > 1 or step_cols > 1:
        note = ", ".join(
            filter(None, [note, f"1 of every {step_rows} rows and {step_cols} columns shown"])
        )
    y_values = np.arange(matrix.shape[0]) * step_rows
    x_values = np.arange(matrix.shape[1]) * step_cols
    limit = float(np.nanmax(np.abs(matrix))) if np.isfinite(matrix).any() else 1.0
    heatmap = {
        "type": "heatmap",
        "z": matrix,
        "x": x_values,
        "y": y_values,
        "colorscale": _DIVERGING,
        "zmid": 0,
        "zmin": -limit if limit > 0 else -1,
        "zmax": limit if limit > 0 else 1,
        "colorbar": {"thickness": 10, "len": 0.9},
        "hoverongaps": False,
    }
    if array.ndim == 1:
        width = matrix_view(shown)[0].shape[1]
        if matrix.size <= MAX_INDEXED_HOVER_CELLS:
            heatmap["customdata"] = y_values[:, None] * width + x_values[None, :]
            heatmap["hovertemplate"] = "index %{customdata}<br>value %{z:.7g}<extra></extra>"
        else:
            heatmap["hovertemplate"] = "row %{y}, column %{x}<br>value %{z:.7g}<extra></extra>"
    elif leading is not None and matrix.size <= MAX_INDEXED_HOVER_CELLS:
        row_index = np.array(
            [",".join(map(str, np.unravel_index(int(r), leading))) for r in y_values], dtype=object
        )
        heatmap["customdata"] = np.repeat(row_index[:, None], matrix.shape[1], axis=1)
        heatmap["hovertemplate"] = "[%{customdata}, %{x}]<br>value %{z:.7g}<extra></extra>"
    else:
        heatmap["hovertemplate"] = "[%{y}, %{x}]<br>value %{z:.7g}<extra></extra>"
    layout = base_layout(
        _with_note(title, note),
        height,
        xaxis=axis(x_label, showgrid=False, zeroline=False),
        yaxis=axis(y_label, autorange="reversed", showgrid=False, zeroline=False),
    )
    return {"data": [heatmap], "layout": layout}


def _with_note(title: str, note: str) -> str:
    if not note:
        return title
    return f"{title}<br><span style='font-size:11px;color:#6c757d'>{note}</span>" if title else note


def _thin(matrix: np.ndarray) -> tuple[np.ndarray, int, int]:
    rows, cols = matrix.shape
    if rows * cols <= MAX_HEATMAP_CELLS:
        return matrix, 1, 1
    factor = math.sqrt(rows * cols / MAX_HEATMAP_CELLS)
    step_rows = max(1, math.ceil(factor)) if rows > 1 else 1
    step_cols = max(1, math.ceil(factor)) if cols > 1 else 1
    if rows == 1 or cols == 1:  # a single row/column takes the whole thinning
        step_rows = math.ceil(rows * cols / MAX_HEATMAP_CELLS) if cols == 1 else 1
        step_cols = math.ceil(rows * cols / MAX_HEATMAP_CELLS) if rows == 1 else 1
    return matrix[::step_rows, ::step_cols], step_rows, step_cols


# --- statistic across steps -----------------------------------------------------------


def series_figure(
    frame: pd.DataFrame,
    statistic: str,
    current_step: int | None,
    title: str = "",
    height: int | None = None,
) -> Figure:
    """A statistic over all recorded training steps, one line per type of execution.

    ``frame`` has the columns of ``Group.read_series``. The current step is marked by a
    vertical line (see :func:`step_marker_shapes`); points carry their step as
    ``customdata`` so that a click can select it. A NaN or infinite value is a hole:
    the line breaks there. Steps and values go as typed arrays (:func:`typed_array`).
    """
    if frame is None or len(frame) == 0:
        return empty_figure("no recorded values of this statistic", height)
    if not np.isfinite(frame["value"].to_numpy(dtype=np.float64)).any():
        return empty_figure(f"{statistic} does not apply to this tensor", height)  # svd_top
    traces = []
    # numpy, not a pandas groupby and sort: ~3x faster for 100,000 steps (each group's
    # frame was a copy of every column)
    all_steps = frame["training_step"].to_numpy(np.int64)
    all_values = frame["value"].to_numpy(dtype=np.float64)
    codes, types = pd.factorize(frame["type_of_execution"], sort=True)
    by_type = np.lexsort((all_steps, codes))  # stable: a step's rows keep their order
    bounds = np.searchsorted(codes[by_type], np.arange(len(types) + 1))
    for code, toe in enumerate(types):
        rows = by_type[bounds[code]:bounds[code + 1]]
        values = all_values[rows]
        if not np.isfinite(values).any():
            continue
        shown = extremes_per_run(values, MAX_SERIES_POINTS)
        steps = all_steps[rows[shown]]
        y = values[shown]
        name = plot_text(toe)
        traces.append(
            {
                "type": "scatter",
                "x": typed_array(steps),
                # plotly.js draws no point and breaks the line at a NaN (not at an inf)
                "y": typed_array(np.where(np.isfinite(y), y, np.nan)),
                "mode": "lines+markers" if len(shown) == len(values) else "lines",
                "name": name,
                "marker": {"size": 6},
                # a click selects this step; a list, as dcc.Graph reads a clicked point's
                # customdata from the figure it was given, where a typed array is still
                # its base64 text
                "customdata": steps.tolist(),
                "hovertemplate": (
                    f"{name}<br>step %{{x}}<br>{plot_text(statistic)} %{{y:.7g}}<extra></extra>"
                ),
            }
        )
    # A legend above the plot for a few types of execution; more would take the plot's
    # place, so then the hover label names them (and the type selector filters them).
    several = 1 < len(traces) <= MAX_SERIES_LEGEND
    layout = base_layout(
        title,
        height,
        xaxis=axis("training step"),
        yaxis=axis(plot_text(STATISTIC_LABELS.get(statistic, statistic))),
        showlegend=several,
        legend={"orientation": "h", "y": 1.0, "x": 0, "xanchor": "left", "yanchor": "bottom"},
        shapes=step_marker_shapes(current_step),
        hovermode="closest",
        clickmode="event",
    )
    if several and not title:
        layout["margin"] = {**_MARGIN, "t": 28}
    return {"data": traces, "layout": layout}


def extremes_per_run(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indexes of the points to draw, in order: all of them when there are at most
    ``max_points``, else the first and last point and, of each of ``max_points // 2``
    runs of consecutive points, the first place of its smallest and of its largest
    finite value and its first non-finite value (a hole, which breaks the line)."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    runs = max(1, max_points // 2)
    starts = np.linspace(0, n, runs + 1).astype(np.int64)[:-1]
    run_of = np.repeat(np.arange(runs), np.diff(np.append(starts, n)))
    finite = np.isfinite(values)
    clean = np.where(finite, values, np.nan)
    index = np.arange(n)

    def first_where(mask: np.ndarray) -> np.ndarray:
        first = np.minimum.reduceat(np.where(mask, index, n), starts)
        return first[first < n]  # runs where the mask holds somewhere

    picked = [np.array([0, n - 1])]
    # fmin/fmax skip NaN; a run without a finite value has NaN there, which no value equals
    for extreme in (np.fmin.reduceat(clean, starts), np.fmax.reduceat(clean, starts)):
        picked.append(first_where(clean == extreme[run_of]))
    picked.append(first_where(~finite))
    return np.unique(np.concatenate(picked))


def step_marker_shapes(current_step: int | None) -> list[dict]:
    """The vertical line at the current step (layout.shapes of the series figure)."""
    if current_step is None:
        return []
    return [
        {
            "type": "line",
            "x0": current_step,
            "x1": current_step,
            "y0": 0,
            "y1": 1,
            "yref": "paper",
            "line": {"color": "#d63384", "width": 2, "dash": "dot"},
        }
    ]


# --- KPIs -----------------------------------------------------------------------------

#: Up to this many points a KPI line also marks its points; a line of one point would be
#: invisible, so a single point is a marker alone.
MAX_KPI_POINTS_WITH_MARKERS = 20
#: Up to this many types of execution a trial's KPIs get one line per type; beyond that,
#: types whose names differ only in their numbers share a line (see
#: :func:`kpi_type_lines`), so that the legend stays readable.
MAX_KPI_TYPES = 20

_TRAILING_NUMBER = re.compile(r"\d+$")
_NUMBER = re.compile(r"\d+")
#: The line of all types when not even the numbers in their names group them.
ALL_TYPES = "all types"


def kpi_type_lines(types: Iterable[str], max_types: int = MAX_KPI_TYPES) -> dict[str, str]:
    """Which line each type of execution is drawn in: ``{type: line name}``.

    Up to ``max_types`` types, each type is its own line. Beyond that the names are
    coarsened only as far as needed: first a trailing number is replaced by ``*``
    (``batch_17`` → ``batch_*``), then every number (``epoch_3_batch_17`` →
    ``epoch_*_batch_*``); a pattern that only one type matches keeps the type's name. If
    even that leaves more than ``max_types`` lines, all types share one line
    (:data:`ALL_TYPES`). Hover text names each point's own type.
    """
    names = sorted({str(t) for t in types})
    if len(names) <= max_types:
        return {t: t for t in names}
    for pattern in (_TRAILING_NUMBER, _NUMBER):
        lines = {t: pattern.sub("*", t) for t in names}
        members: dict[str, int] = {}
        for line in lines.values():
            members[line] = members.get(line, 0) + 1
        lines = {t: line if members[line] > 1 else t for t, line in lines.items()}
        if len(set(lines.values())) <= max_types:
            return lines
    return {t: ALL_TYPES for t in names}


def kpi_label(kpi_name: str, line: str) -> str:
    """A KPI line's legend entry (plain text): ``name (type)``, or whichever of the two
    is not empty (comgra scripts often record a KPI with an empty name)."""
    kpi_name, line = str(kpi_name), str(line)
    if kpi_name and line:
        return f"{kpi_name} ({line})"
    return kpi_name or line or "unnamed"


def kpi_mode(num_points: int) -> str:
    """The scatter mode of a KPI line of ``num_points`` points."""
    if num_points <= 1:
        return "markers"
    return "lines+markers" if num_points <= MAX_KPI_POINTS_WITH_MARKERS else "lines"


def kpi_figures(
    frame: pd.DataFrame,
    height: int | None = 360,
    max_types: int = MAX_KPI_TYPES,
) -> list[tuple[str, Figure]]:
    """One figure per KPI group, groups sorted; one line per (type of execution, KPI name).

    With more than ``max_types`` types of execution in ``frame`` (a script that names
    every batch ``batch_<i>``), types are grouped into lines by :func:`kpi_type_lines`
    and the figure says so under its title. Short lines show their points
    (:func:`kpi_mode`).
    """
    if frame is None or len(frame) == 0:
        return []
    types = frame["type_of_execution"].astype(str)
    lines = kpi_type_lines(types.unique(), max_types)
    frame = frame.assign(_line=types.map(lines), type_of_execution=types)
    grouped = len(set(lines.values())) < len(lines)
    figures = []
    for group, part in frame.groupby("kpi_group", sort=True):
        traces = []
        for (line_name, name), line in part.groupby(["_line", "kpi_name"], sort=True):
            line = line.sort_values(["timepoint", "type_of_execution"], kind="stable")
            label = plot_text(kpi_label(name, line_name))
            trace = {
                "type": "scatter",
                "x": line["timepoint"].to_numpy(dtype=np.int64),
                "y": line["value"].to_numpy(dtype=np.float64),
                "mode": kpi_mode(len(line)),
                "name": label,
                "marker": {"size": 8 if len(line) == 1 else 5},
                "hovertemplate": f"{label}<br>step %{{x}}<br>%{{y:.7g}}<extra></extra>",
            }
            if (line["type_of_execution"] != line_name).any():
                # a shared line: the hover names each point's own type
                trace["text"] = [plot_text(t) for t in line["type_of_execution"]]
                trace["hovertemplate"] = (
                    f"{label}<br>step %{{x}} · %{{text}}<br>%{{y:.7g}}<extra></extra>"
                )
            traces.append(trace)
        title = plot_text(group)
        if grouped:
            title = _with_note(title, _grouping_note(part))
        layout = base_layout(
            title,
            height,
            xaxis=axis("training step"),
            yaxis=axis(),
            # at the right, one entry per line: it scrolls instead of squeezing the plot
            legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
            showlegend=True,  # also for one line: it names what the line is
            hovermode="x unified",
            uirevision=str(group),
        )
        figures.append((str(group), {"data": traces, "layout": layout}))
    return figures


def _grouping_note(part: pd.DataFrame) -> str:
    types = part["type_of_execution"].nunique()
    lines = part["_line"].nunique()
    # short enough for half the page's width; the hover names each point's own type
    if (part["_line"] == ALL_TYPES).all():
        return f"{types} types of execution in one line"
    return f"{types} types of execution in {lines} line{'s' if lines != 1 else ''} (* for numbers)"


# --- network --------------------------------------------------------------------------


def module_rows(modules: Sequence[Any]) -> list[dict[str, Any]]:
    """The module tree as table rows in depth-first order.

    ``modules`` are the query API's ``ModuleInfo`` objects (``name, parent, parameters,
    num_parameters_total``). Each module row is followed by its own parameters. Row
    dicts: ``kind`` ('module'|'parameter'), ``depth``, ``name``, ``full_name``,
    ``shape``, ``count`` (parameters of the row; for modules the total of the subtree).
    """
    children: dict[str | None, list[Any]] = {}
    names = {m.name for m in modules}
    for module in modules:
        parent = module.parent if module.parent in names else None
        children.setdefault(parent, []).append(module)
    rows: list[dict[str, Any]] = []

    def visit(module: Any, depth: int) -> None:
        own = sum(int(p.numel) for p in module.parameters)
        rows.append(
            {
                "kind": "module",
                "depth": depth,
                "name": module.name or "(root)",
                "full_name": module.name,
                "shape": "",
                "count": int(module.num_parameters_total),
                "own": own,
            }
        )
        for parameter in module.parameters:
            rows.append(
                {
                    "kind": "parameter",
                    "depth": depth + 1,
                    "name": parameter.name,
                    "full_name": parameter.full_name,
                    "shape": format_shape(parameter.shape),
                    "count": int(parameter.numel),
                    "own": int(parameter.numel),
                }
            )
        for child in sorted(children.get(module.name, []), key=lambda m: m.name):
            visit(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda m: m.name):
        visit(root, 0)
    return rows


def filter_notes(notes: Sequence[Any], query: str | None) -> list[Any]:
    """Notes (oldest first, as stored) whose text contains every word of ``query``."""
    words = [w.casefold() for w in (query or "").split()]
    if not words:
        return list(notes)
    return [n for n in notes if all(w in n.text.casefold() for w in words)]
