"""Pure builders for the Metrics page (issue 16): one figure per metric, one line per
module, several trials overlaid, epoch bands, and the spectrum of a vector metric.

Inputs are the frames ``Group.read_metrics`` returns (columns training_step,
type_of_execution, module, module_class, metric, backward_pass, value, vector, wall_time),
one per trial. A metric is computed on its own schedule (``linear(k, o)``), so a line
has a marker on every computed step and nowhere else; consecutive computed steps are
joined, but a hole longer than the schedule's period (the metric was not computed for a
while) breaks the line rather than bridging it, so the schedule stays visible.

Epoch aggregates (monitorch's lenses): with a window of ``w`` steps, each run of steps
``[k·w, (k+1)·w)`` becomes one point, the mean of the values computed in it, with a band
(``std``: mean ± std, ``min-max``, ``q1-q3``) from ``comgra_like.metrics.quantities``'s
``band`` (the same definitions as the recording side: population std, a true minimum).
The computed points stay as faint markers under the mean line.

A distributed recording read with ``ranks="all"`` (a ``rank`` column) has one line per
rank as well, side by side (a rank whose values drift is what one looks for); metrics
are per-rank quantities and are never merged.

A click opens the Tensors or Modules page at the step and module of the point: each
trace says whose it is in its ``meta`` (``[trial, module, backward pass, rank, steps]``;
``steps`` only for window means, the step a click on each leads to), and the page
resolves a clicked trace and point index with :func:`point_of` from those, kept
server-side (:func:`trace_meta`). No per-point data is sent: a long run's figure is its
x and y. Figures are dicts (see ``figures.py``); names from a recording go through
``plot_text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.metrics.quantities import BANDS, QUANTITIES, band

from .figures import Figure, axis, base_layout, empty_figure
from .natural import natural_key
from .plot_text import plot_text

#: Module colours, assigned in the order of the modules of the page (the same module has
#: the same colour in every figure).
COLOURS: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf",
)
#: Line styles and marker symbols of the overlaid trials, in their order.
TRIAL_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash")
TRIAL_SYMBOLS: tuple[str, ...] = ("circle", "diamond", "square", "triangle-up", "x")
#: A gap between computed steps longer than this many times the schedule's period (the
#: median gap) breaks the line.
GAP_FACTOR = 1.5
#: Band choices offered by the page (None: no aggregation band).
BAND_CHOICES: tuple[str, ...] = BANDS
#: What the page says when a trial has no metrics: how to turn them on.
HOW_TO_RECORD = (
    "record them with comgra_like.watch(model, metrics={'fc1': ['InputSndNorm'], "
    "'Conv2d': [['WeightNorm', 'linear(5, 0)']]}) or Taiyi's Monitor(model, config)")


@dataclass(frozen=True)
class Series:
    """The points of one line: one module of one trial (and one backward pass, and one
    rank when the ranks are side by side; None otherwise)."""

    trial: str
    module: str
    backward_pass: int
    steps: np.ndarray
    values: np.ndarray
    rank: int | None = None


def module_colours(modules: Sequence[str]) -> dict[str, str]:
    """A colour per module, in the given order (cycling after ``len(COLOURS)``)."""
    return {m: COLOURS[i % len(COLOURS)] for i, m in enumerate(dict.fromkeys(modules))}


def is_vector(frame: pd.DataFrame | None, metric: str) -> bool:
    """Whether ``metric`` is a vector metric (a spectrum): a built-in one declared so, or
    any metric with a stored vector."""
    quantity = QUANTITIES.get(metric)
    if quantity is not None and quantity.vector:
        return True
    if frame is None or frame.empty or "vector" not in frame:
        return False
    return bool(frame["vector"].map(lambda v: v is not None and np.size(v) > 0).any())


def _rows_of(frame: pd.DataFrame, metric: str,
             modules: Sequence[str] | None) -> pd.DataFrame:
    """A trial's rows of one metric, of the chosen modules (all when none are chosen)."""
    part = frame[frame["metric"] == metric]
    if modules:
        part = part[part["module"].isin(list(modules))]
    return part


def series(frames: Mapping[str, pd.DataFrame], metric: str,
           modules: Sequence[str] | None = None) -> list[Series]:
    """The lines of one metric: per trial (in the given order), module (in natural order:
    ``h.2`` before ``h.10``), backward pass and rank (a frame with a ``rank`` column: the
    ranks side by side), the computed steps ascending with their values."""
    out: list[Series] = []
    for trial, frame in frames.items():
        if frame is None or frame.empty:
            continue
        part = _rows_of(frame, metric, modules)
        ranked = "rank" in part.columns
        by = ["module", "backward_pass"] + (["rank"] if ranked else [])
        groups = sorted(part.groupby(by, sort=False),
                        key=lambda kv: (natural_key(str(kv[0][0])), *kv[0][1:]))
        for key, rows in groups:
            rows = rows.sort_values("training_step", kind="stable")
            out.append(Series(str(trial), str(key[0]), int(key[1]),
                              rows["training_step"].to_numpy(dtype=np.int64),
                              rows["value"].to_numpy(dtype=np.float64),
                              int(key[2]) if ranked else None))
    return out


def breaks(steps: np.ndarray) -> np.ndarray:
    """Indices ``i`` where the line must not join step ``i-1`` to step ``i``: the gap is
    longer than ``GAP_FACTOR`` times the schedule's period (the median gap)."""
    if len(steps) < 3:
        return np.zeros(0, dtype=np.int64)
    gaps = np.diff(steps)
    period = float(np.median(gaps))
    return np.nonzero(gaps > GAP_FACTOR * period)[0] + 1


def broken(values: Sequence[Any], cut: np.ndarray) -> list:
    """``values`` as a list with a None before every index in ``cut`` (plotly breaks a
    line at a None)."""
    out = [v.item() if isinstance(v, np.generic) else v for v in values]
    for i in sorted((int(c) for c in cut), reverse=True):
        out.insert(i, None)
    return out


@dataclass(frozen=True)
class Windows:
    """Epoch aggregates of one line: one entry per window that has computed points."""

    first: np.ndarray   # the window's first step
    last: np.ndarray    # its last step
    x: np.ndarray       # where the point is drawn: the mean of its computed steps
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    count: np.ndarray   # computed points in the window
    index: np.ndarray   # the window's number (step // window)
    last_computed: np.ndarray  # its last computed step (where a click on it leads)


def aggregate_windows(steps: np.ndarray, values: np.ndarray, window: int,
                      how: str = "std") -> Windows:
    """The mean and band (``how`` in ``BANDS``) of every window of ``window`` steps
    (``[k·window, (k+1)·window)``) that has computed points."""
    if window < 1:
        raise ValueError(f"window={window}: a window is at least 1 step")
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    index = steps // window
    keys, starts = np.unique(index, return_index=True)
    ends = list(starts[1:]) + [len(steps)]
    rows = []
    for key, start, end in zip(keys, starts, ends):
        chunk = values[start:end]
        finite = chunk[np.isfinite(chunk)]
        mean = float(finite.mean()) if finite.size else np.nan
        lo, hi = band(chunk, how)
        rows.append((key * window, key * window + window - 1,
                     float(steps[start:end].mean()), mean, lo, hi, end - start, key,
                     steps[end - 1]))
    columns = list(zip(*rows)) if rows else [[]] * 9
    return Windows(*(np.asarray(c, dtype=np.float64 if i in (2, 3, 4, 5) else np.int64)
                     for i, c in enumerate(columns)))


def _trace_name(s: Series, several_trials: bool, several_passes: bool) -> str:
    name = s.module
    if s.rank is not None:
        name += f" · rank {s.rank}"
    if several_passes:
        name += f" · pass {s.backward_pass}"
    if several_trials:
        name += f" · {s.trial}"
    return name


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def metric_figure(
    frames: Mapping[str, pd.DataFrame],
    metric: str,
    *,
    modules: Sequence[str] | None = None,
    colours: Mapping[str, str] | None = None,
    window: int = 1,
    how: str = "std",
    log_y: bool = False,
    step: int | None = None,
    height: int = 320,
) -> Figure:
    """One metric over the training steps: a line per module (colour) and trial (line
    style, marker), markers on the computed steps only, broken across holes in the
    schedule; with ``window > 1`` the mean per window with its band (``how``) and the
    computed points as faint markers. ``step`` draws a vertical line there (the step a
    spectrum is shown for). The first trial of ``frames`` is the main one."""
    lines = series(frames, metric, modules)
    if not lines:
        return empty_figure(f"No values of {metric} for this choice yet.", height=height)
    colours = dict(colours or {})
    for m, c in module_colours([s.module for s in lines]).items():
        colours.setdefault(m, c)
    trials = list(dict.fromkeys(frames))
    several_trials = len({s.trial for s in lines}) > 1
    several_passes = len({s.backward_pass for s in lines}) > 1
    passes = sorted({s.backward_pass for s in lines})
    ranks = sorted({s.rank for s in lines if s.rank is not None})
    data: list[dict] = []
    for s in lines:
        colour = colours[s.module]
        t = trials.index(s.trial) if s.trial in trials else 0
        # the ranks of one module side by side: its colour, a line style per rank
        t += ranks.index(s.rank) if s.rank is not None else 0
        dash = TRIAL_DASHES[t % len(TRIAL_DASHES)]
        symbol = TRIAL_SYMBOLS[(t + passes.index(s.backward_pass)) % len(TRIAL_SYMBOLS)]
        name = plot_text(_trace_name(s, several_trials, several_passes))
        group = f"{s.trial}|{s.module}|{s.backward_pass}|{s.rank}"
        meta = [s.trial, s.module, s.backward_pass, s.rank, None]
        hover = (f"{name}<br>step %{{x}}<br>{plot_text(metric)} %{{y:.5g}}"
                 "<extra>click: open this step</extra>")
        if window <= 1:
            cut = breaks(s.steps)
            data.append({
                "type": "scatter", "mode": "lines+markers", "x": broken(s.steps, cut),
                "y": broken(s.values, cut), "meta": meta, "name": name, "legendgroup": group,
                "line": {"color": colour, "dash": dash, "width": 1.6},
                "marker": {"color": colour, "symbol": symbol, "size": 6},
                "hovertemplate": hover, "connectgaps": False,
            })
            continue
        w = aggregate_windows(s.steps, s.values, window, how)
        cut = np.nonzero(np.diff(w.index) > 1)[0] + 1
        # the band: one filled outline per run of consecutive windows
        bx: list = []
        by: list = []
        for run in np.split(np.arange(len(w.index)), cut):
            if not len(run):
                continue
            lo, hi = w.lo[run], w.hi[run]
            keep = np.isfinite(lo) & np.isfinite(hi)
            xr = w.x[run][keep]
            if not len(xr):
                continue
            if len(xr) == 1:  # a lone window: a thin box around its point
                half = window / 4
                x0, low, high = float(xr[0]), float(lo[keep][0]), float(hi[keep][0])
                bx += [x0 - half, x0 + half, x0 + half, x0 - half, None]
                by += [low, low, high, high, None]
                continue
            bx += xr.tolist() + xr[::-1].tolist() + [None]
            by += hi[keep].tolist() + lo[keep][::-1].tolist() + [None]
        data.append({
            "type": "scatter", "mode": "lines", "x": bx, "y": by, "fill": "toself",
            "fillcolor": _rgba(colour, 0.18), "line": {"width": 0, "color": colour},
            "hoverinfo": "skip", "showlegend": False, "legendgroup": group,
            "name": f"{name} band",
        })
        data.append({
            "type": "scatter", "mode": "markers", "x": s.steps.tolist(),
            "y": s.values.tolist(), "meta": meta, "name": f"{name} points", "legendgroup": group,
            "showlegend": False, "hovertemplate": hover,
            "marker": {"color": colour, "symbol": symbol, "size": 4, "opacity": 0.35},
        })
        # a click on a window's mean leads to its last computed step
        window_meta = meta[:4] + [broken([int(x) for x in w.last_computed], cut)]
        text = [f"steps {a}–{b} · {n} computed · {how} band {lo:.4g} … {hi:.4g}"
                for a, b, n, lo, hi in zip(w.first, w.last, w.count, w.lo, w.hi)]
        data.append({
            "type": "scatter", "mode": "lines+markers", "x": broken(w.x, cut),
            "y": broken(w.mean, cut), "text": broken(text, cut),
            "meta": window_meta, "name": name, "legendgroup": group,
            "line": {"color": colour, "dash": dash, "width": 2},
            "marker": {"color": colour, "symbol": symbol, "size": 7},
            "hovertemplate": f"{name}<br>%{{text}}<br>mean %{{y:.5g}}<extra></extra>",
            "connectgaps": False,
        })
    quantity = QUANTITIES.get(metric)
    title = f"<b>{plot_text(metric)}</b>"
    if quantity is not None:
        title += f" <span style='font-size:11px;color:#6c757d'>{plot_text(quantity.meaning)}</span>"
    if window > 1:
        title += (f" <span style='font-size:11px'>· mean per {window} steps, "
                  f"band {plot_text(how)}</span>")
    layout = base_layout(title=title, height=height, hovermode="closest",
                         showlegend=True, uirevision=metric, clickmode="event")
    layout["xaxis"] = axis("step")
    vector = any(is_vector(frame, metric) for frame in frames.values())
    # a vector metric's line is its first (largest) element: the spectrum is beside it
    y_title = f"{metric}[0] (largest)" if vector else metric
    layout["yaxis"] = axis(plot_text(y_title), type="log" if log_y else "linear")
    layout["legend"] = {"font": {"size": 11}}
    if step is not None:
        layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": step,
                             "x1": step, "y0": 0, "y1": 1,
                             "line": {"color": "#6c757d", "width": 1, "dash": "dot"}}]
    return {"data": data, "layout": layout}


def spectrum_figure(
    frames: Mapping[str, pd.DataFrame],
    metric: str,
    step: int | None,
    *,
    modules: Sequence[str] | None = None,
    colours: Mapping[str, str] | None = None,
    height: int = 320,
) -> Figure:
    """The vectors of a vector metric (a spectrum, largest first) at ``step``: one line per
    module and trial, the index along x and the values on a log axis. A line whose
    metric was not computed at ``step`` shows its latest vector before it (named so);
    ``step=None`` shows the latest vector of each."""
    colours = dict(colours or {})
    trials = list(dict.fromkeys(frames))
    data: list[dict] = []
    shown_steps: set[int] = set()
    for trial, frame in frames.items():
        if frame is None or frame.empty:
            continue
        part = _rows_of(frame, metric, modules)
        part = part[part["vector"].map(lambda v: v is not None and np.size(v) > 0)]
        for (module, backward), rows in part.groupby(["module", "backward_pass"], sort=False):
            rows = rows.sort_values("training_step", kind="stable")
            before = rows if step is None else rows[rows["training_step"] <= step]
            if before.empty:
                continue
            row = before.iloc[-1]
            at = int(row["training_step"])
            shown_steps.add(at)
            vector = np.asarray(row["vector"], dtype=np.float64)
            colour = colours.setdefault(str(module), COLOURS[len(colours) % len(COLOURS)])
            t = trials.index(trial)
            name = str(module) + (f" · pass {backward}" if backward else "")
            name += f" · {trial}" if len(trials) > 1 else ""
            name += f" (step {at})" if step is not None and at != step else ""
            data.append({
                "type": "scatter", "mode": "lines+markers",
                "x": list(range(1, len(vector) + 1)), "y": vector.tolist(), "name": plot_text(name),
                "line": {"color": colour, "dash": TRIAL_DASHES[t % len(TRIAL_DASHES)]},
                "marker": {"size": 4, "color": colour},
                "hovertemplate": f"{plot_text(name)}<br>#%{{x}}: %{{y:.5g}}<extra></extra>",
            })
    if not data:
        where = "" if step is None else f" at or before step {step}"
        return empty_figure(f"No {metric} vector{where}.", height=height)
    positive = all(np.all(np.asarray(d["y"]) > 0) for d in data)
    label = (f"step {step}" if step is not None
             else "latest step" if len(shown_steps) != 1 else f"step {next(iter(shown_steps))}")
    layout = base_layout(
        title=f"{plot_text(metric)} at {label}",
        height=height, hovermode="closest", showlegend=len(data) > 1)
    layout["xaxis"] = axis("index, largest first")
    layout["yaxis"] = axis("value", type="log" if positive else "linear")
    layout["legend"] = {"font": {"size": 11}}
    return {"data": data, "layout": layout}


def empty_reason(trials: Sequence[str], listed: Mapping[str, pd.DataFrame | None]) -> str | None:
    """Why the page shows nothing (None: there is something to show)."""
    if not trials:
        return "No trial selected."
    if any(frame is not None and not frame.empty for frame in listed.values()):
        return None
    names = ", ".join(trials)
    return f"No metrics recorded in {names}: {HOW_TO_RECORD}."


def metric_order(listing: pd.DataFrame) -> list[str]:
    """The metrics of a ``list_metrics`` frame: built-in ones in the table's order (Taiyi's,
    then monitorch's), then the others (user metrics, loss) by name."""
    if listing is None or listing.empty:
        return []
    names = {str(m) for m in listing["metric"]}
    known = [m for m in QUANTITIES if m in names]
    return known + sorted(names - set(known))


def trace_meta(figure: Mapping[str, Any]) -> list:
    """Whose each trace of a :func:`metric_figure` is, by trace index (``curveNumber``):
    its ``meta`` (None for a band, which has no points to click)."""
    return [trace.get("meta") if "band" not in str(trace.get("name", "")) else None
            for trace in figure.get("data", [])]


def point_of(event: Mapping[str, Any] | None, traces: Sequence[Any] | None) -> dict | None:
    """``{trial, module, training_step, backward_pass, rank}`` of a clicked or hovered
    point, from the trace index and point index of the event and the figure's
    :func:`trace_meta`; None off the points (or for a figure since replaced). A heatmap's
    meta has a sixth entry, the module of each row label (the event's ``y``)."""
    points = (event or {}).get("points") or []
    traces = traces or []
    for point in points:
        curve, index = point.get("curveNumber"), point.get("pointIndex", point.get("pointNumber"))
        if not isinstance(curve, int) or not 0 <= curve < len(traces):
            continue
        meta = traces[curve]
        if not isinstance(meta, (list, tuple)) or len(meta) < 5:
            continue
        module = meta[1]
        if len(meta) > 5 and isinstance(meta[5], Mapping):  # a heatmap: row label -> module
            module = meta[5].get(str(point.get("y")))
            if module is None:
                continue
        steps = meta[4]
        if steps is not None:  # a window's mean: the step a click on it leads to
            if not isinstance(index, int) or not 0 <= index < len(steps) or steps[index] is None:
                continue
            step = steps[index]
        else:
            step = point.get("x")
            if step is None:
                continue
        return {"trial": str(meta[0]), "module": str(module), "training_step": int(step),
                "backward_pass": int(meta[2]),
                "rank": None if meta[3] is None else int(meta[3])}
    return None
