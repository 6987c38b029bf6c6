"""Pure builders of the Flight page (issue 30) and of the flight window on the Tensors
page's "across steps" chart: no Dash callbacks, no file access.

- :func:`window_figure`: one tensor's statistic over a flight window (every step, a
  dense line) with the regularly recorded steps of the same tensor beside it (sparse
  markers), the window shaded, the trigger's step and the player's step marked
  (:func:`window_shapes`, patched alone when the player moves).
- :func:`flight_trace`: the dense window as a trace named ``"flight window"`` (the
  Tensors page adds it to its series figure).
- :func:`window_scale` / :func:`window_paint`: the dependency graph painted with a
  statistic at one step of the window (``graph_figure.Paint``): one colour scale for
  the whole window, so that a colour means the same value at every step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.format import flight as flight_format
from comgra_like.vocabulary import STATISTIC_LABELS

from .figures import axis, base_layout, empty_figure
from .graph_figure import ColorScale, NodeValue, Paint, color_scale
from .plot_text import plot_text

#: The name of the dense window's trace (the browser test and the docs name it).
FLIGHT_TRACE_NAME = "flight window"
#: The name of the trace marking NaN and Inf values in the window.
NON_FINITE_TRACE_NAME = "NaN/Inf"
#: The name of the regularly recorded steps' trace.
RECORDED_TRACE_NAME = "recorded steps"
FLIGHT_COLOR = "#d62728"
RECORDED_COLOR = "#1f77b4"
WINDOW_FILL = "rgba(214, 39, 40, 0.08)"
PLAYER_COLOR = "#444444"
#: How each trigger kind reads.
KIND_LABELS: Mapping[str, str] = {
    "non_finite": "NaN / Inf",
    "loss_spike": "loss spike",
    "grad_norm_spike": "gradient-norm spike",
    "update_spike": "update spike",
    "predicate": "your predicate",
}
#: What each role of a window is called in the page's controls.
ROLE_LABELS: Mapping[str, str] = {"value": "value", "gradient": "gradient",
                                  "update": "update (parameters)", "kpi": "KPI"}


def statistic_label(statistic: str) -> str:
    return STATISTIC_LABELS.get(statistic, statistic)


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def when_text(time: float | None) -> str:
    """A trigger's wall time in UTC ('' when the window did not keep it)."""
    if time is None or not math.isfinite(time):
        return ""
    return datetime.fromtimestamp(time, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def value_text(value: float | None) -> str:
    if value is None:
        return ""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def samples_text(ids: Sequence[Any] | None, limit: int = 6) -> str:
    """The sample ids of a step, shortened: 'samples 880–895' for a run of consecutive
    integers, else the first ``limit`` and how many ('' without ids)."""
    ids = list(ids or ())
    if not ids:
        return ""
    if all(isinstance(i, int) for i in ids) and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"samples {ids[0]}–{ids[-1]}" if len(ids) > 1 else f"sample {ids[0]}"
    head = ", ".join(str(i) for i in ids[:limit])
    return f"{len(ids)} samples: {head}" + (", …" if len(ids) > limit else "")


def trigger_label(row: Any) -> str:
    """One line naming a trigger (the trigger dropdown's option)."""
    where = f" · {row.tensor}" if row.tensor else ""
    return f"step {row.step} · {kind_label(row.kind)}{where}"


# --- the window chart -------------------------------------------------------------------


def flight_trace(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
                 statistic: str, name: str = FLIGHT_TRACE_NAME,
                 what: str = "every step kept by the flight recorder") -> dict[str, Any]:
    """The dense window: a line with a small marker on every step, in the flight
    recorder's red. A NaN or Inf breaks the line (plotly draws no point there)."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    return {
        "type": "scatter",
        "x": steps.tolist(),
        "y": [float(v) if math.isfinite(v) else None for v in values],
        "mode": "lines+markers",
        "name": name,
        "line": {"color": FLIGHT_COLOR, "width": 1.5},
        "marker": {"size": 4, "color": FLIGHT_COLOR, "symbol": "circle"},
        "customdata": steps.tolist(),
        "hovertemplate": (f"{plot_text(name)} ({plot_text(what)})<br>step %{{x}}<br>"
                          f"{plot_text(statistic_label(statistic))} %{{y:.7g}}<extra></extra>"),
    }


def with_gaps(steps: np.ndarray, values: np.ndarray) -> tuple[list, list]:
    """Steps and values with a None between steps that are not consecutive (two windows
    are two lines, never joined across the steps between them)."""
    xs: list = []
    ys: list = []
    for i, (s, v) in enumerate(zip(steps.tolist(), values.tolist())):
        if i and s != xs[-1] + 1:
            xs.append(None)
            ys.append(None)
        xs.append(s)
        ys.append(v if math.isfinite(v) else None)
    return xs, ys


def add_flight_window(figure: dict[str, Any], frame: pd.DataFrame | None, statistic: str,
                      aggregation: str | None = None) -> dict[str, Any]:
    """The Tensors page's "across steps" chart with the trial's flight windows among its
    recorded steps: a trace named ``"flight window"`` (every step of each window, a dense
    line in the flight recorder's red, broken between windows); ``figure`` as
    ``figures.series_figure`` made it (changed in place and returned), each window shaded
    (``series_window_shapes``, after the shapes already there). ``aggregation``: the
    chart's (a batch aggregation is of per-sample values; the window's are of the whole
    tensor, which the trace's name says). Nothing changes without a frame or rows."""
    if frame is None or len(frame) == 0 or not figure.get("data"):
        return figure
    steps = frame["training_step"].to_numpy(np.int64)
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], frame["value"].to_numpy(np.float64)[order]
    whole = aggregation not in (None, "none")
    trace = flight_trace(steps, values, statistic,
                         name=FLIGHT_TRACE_NAME + (" (whole tensor)" if whole else ""))
    trace["x"], trace["y"] = with_gaps(steps, values)
    del trace["customdata"]  # a click on the chart selects a recorded step: not these
    figure["data"].append(trace)
    layout = figure.setdefault("layout", {})
    # the windows shaded, after the step marker (the page patches both on a step change)
    layout["shapes"] = list(layout.get("shapes") or []) + series_window_shapes(frame)
    layout["showlegend"] = True
    layout.setdefault("legend", {"orientation": "h", "y": 1.0, "x": 0, "xanchor": "left",
                                 "yanchor": "bottom"})
    margin = dict(layout.get("margin") or {})
    margin["t"] = max(int(margin.get("t", 0)), 28)
    layout["margin"] = margin
    return figure


def series_window_shapes(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    """A shaded band (layout.shapes, below the traces) over each flight window of a
    Tensors-page series (``flight_data.tensors_page_series``): from its first to its last
    step, whichever trigger wrote it; none without a frame."""
    if frame is None or len(frame) == 0:
        return []
    spans = frame.groupby("trigger", sort=False)["training_step"].agg(["min", "max"])
    # the Flight page's shaded window, one per window
    return [window_shapes((int(lo), int(hi)), None, None)[0]
            for lo, hi in sorted(zip(spans["min"], spans["max"]))]


def non_finite_trace(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
                     statistic: str) -> dict[str, Any] | None:
    """A red cross at each step of the window whose value is NaN or Inf (the line breaks
    there), drawn at the last finite value before it (None: every value is finite)."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    finite = np.where(~bad, values, np.nan)
    last = pd.Series(finite).ffill().bfill().fillna(0.0).to_numpy()
    return {
        "type": "scatter", "x": steps[bad].tolist(), "y": last[bad].tolist(),
        "mode": "markers", "name": NON_FINITE_TRACE_NAME,
        "marker": {"size": 12, "color": FLIGHT_COLOR, "symbol": "x-thin-open",
                   "line": {"width": 3, "color": FLIGHT_COLOR}},
        "customdata": [str(v) for v in values[bad]],
        "hovertemplate": (f"step %{{x}}<br>{plot_text(statistic_label(statistic))} "
                          "%{customdata}<extra></extra>"),
    }


def recorded_trace(frame: pd.DataFrame, statistic: str, aggregation: str | None
                   ) -> dict[str, Any]:
    """The regularly recorded steps: large hollow markers, a thin dotted line."""
    steps = frame["training_step"].to_numpy(np.int64)
    values = frame["value"].to_numpy(np.float64)
    of = "" if aggregation in (None, "none") else f" ({aggregation.replace('_', ' ')})"
    return {
        "type": "scatter",
        "x": steps.tolist(),
        "y": [float(v) if math.isfinite(v) else None for v in values],
        "mode": "lines+markers",
        "name": RECORDED_TRACE_NAME + of,
        "line": {"color": RECORDED_COLOR, "width": 1, "dash": "dot"},
        "marker": {"size": 10, "color": "white", "symbol": "diamond-open",
                   "line": {"color": RECORDED_COLOR, "width": 2}},
        "customdata": steps.tolist(),
        "hovertemplate": (f"recorded step{plot_text(of)}<br>step %{{x}}<br>"
                          f"{plot_text(statistic_label(statistic))} %{{y:.7g}}<extra></extra>"),
    }


def window_shapes(window: tuple[int, int], trigger_step: int | None,
                  current_step: int | None) -> list[dict[str, Any]]:
    """The shaded window, the trigger's step (dashed red) and the player's step (grey)."""
    shapes: list[dict[str, Any]] = [{
        "type": "rect", "xref": "x", "yref": "paper", "x0": window[0] - 0.5,
        "x1": window[1] + 0.5, "y0": 0, "y1": 1, "fillcolor": WINDOW_FILL,
        "line": {"width": 0}, "layer": "below",
    }]
    if trigger_step is not None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": trigger_step,
                       "x1": trigger_step, "y0": 0, "y1": 1,
                       "line": {"color": FLIGHT_COLOR, "width": 1.5, "dash": "dash"}})
    if current_step is not None:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": current_step,
                       "x1": current_step, "y0": 0, "y1": 1,
                       "line": {"color": PLAYER_COLOR, "width": 2}})
    return shapes


def x_range(window: tuple[int, int], recorded_steps: np.ndarray) -> list[float]:
    """The window with the nearest recorded step on each side of it (or the window's
    own length when there is none), so that the two densities are seen together."""
    span = max(1, window[1] - window[0])
    before = recorded_steps[recorded_steps < window[0]]
    after = recorded_steps[recorded_steps > window[1]]
    low = int(before.max()) if before.size else window[0] - span // 2
    high = int(after.min()) if after.size else window[1] + span // 2
    pad = max(0.5, 0.03 * (high - low))
    return [low - pad, high + pad]


def window_figure(window_frame: pd.DataFrame, recorded: pd.DataFrame, *, statistic: str,
                  tensor: str, role: str, window: tuple[int, int],
                  trigger_step: int | None, current_step: int | None,
                  aggregation: str | None = None, height: int = 320) -> dict[str, Any]:
    """A tensor's statistic over the window (dense) and at the recorded steps (sparse).

    ``window_frame`` and ``recorded`` have ``training_step`` and ``value``. The title
    says how many steps each has in the shown range; when the recorded rows are a batch
    aggregation of per-sample values that is not the whole tensor's number
    (``aggregation`` not none, batch abs max for abs_max, batch mean for mean), it says
    so."""
    if window_frame is None or window_frame.empty:
        return empty_figure(f"the window has no {statistic_label(statistic)} of "
                            f"{tensor} ({role})", height)
    rec_steps = recorded["training_step"].to_numpy(np.int64) if len(recorded) else \
        np.array([], np.int64)
    shown = x_range(window, rec_steps)
    in_range = int(((rec_steps >= shown[0]) & (rec_steps <= shown[1])).sum())
    traces = []
    if len(recorded):
        traces.append(recorded_trace(recorded, statistic, aggregation))
    traces.append(flight_trace(window_frame["training_step"], window_frame["value"],
                               statistic))
    bad = non_finite_trace(window_frame["training_step"], window_frame["value"], statistic)
    if bad is not None:
        traces.append(bad)
    n = len(window_frame)
    differs = aggregation not in (None, "none") and not (
        (statistic, aggregation) in (("mean", "batch_mean"), ("abs_max", "batch_abs_max")))
    note = (" · recorded: per-sample values, batch mean (not the whole tensor's number)"
            if differs else "")
    title = (f"{plot_text(tensor)} ({plot_text(ROLE_LABELS.get(role, role))}): "
             f"{n} steps in the flight window, {in_range} recorded step"
             f"{'s' if in_range != 1 else ''} in view{note}")
    layout = base_layout(
        "", height,
        xaxis={**axis("training step"), "range": shown},
        yaxis=axis(plot_text(statistic_label(statistic))),
        showlegend=True,
        legend={"orientation": "h", "y": 1.0, "x": 0, "xanchor": "left", "yanchor": "bottom"},
        shapes=window_shapes(window, trigger_step, current_step),
        hovermode="closest",
        clickmode="event",
    )
    layout["margin"] = {**layout.get("margin", {}), "t": 56}
    layout["title"] = {"text": title, "font": {"size": 12}, "x": 0, "xanchor": "left",
                       "y": 0.98, "yanchor": "top"}
    layout["meta"] = {"flight_steps": n, "recorded_in_view": in_range}
    return {"data": traces, "layout": layout}


# --- the painted graph ------------------------------------------------------------------


def _column(statistic: str) -> str:
    return "l2_norm" if statistic == "norm" else statistic


def window_scale(rows: pd.DataFrame, statistic: str, role: str) -> ColorScale | None:
    """One colour scale for every step of the window (the role's finite values)."""
    column = _column(statistic)
    if rows is None or rows.empty or column not in rows.columns:
        return None
    return color_scale(rows.loc[rows["role"] == role, column].to_numpy(np.float64))


def window_paint(rows: pd.DataFrame, step: int, statistic: str, role: str,
                 scale: ColorScale | None) -> Paint:
    """The graph's nodes painted with ``statistic`` of ``role`` at one window step: a
    node shows its first row of the step (in the step's order); it holds NaN/Inf when
    that row counted one or its abs max is not finite (``format.flight.non_finite_rows``)."""
    column = _column(statistic)
    values: dict[str, NodeValue] = {}
    if rows is not None and not rows.empty and column in rows.columns:
        part = rows[(rows["training_step"] == step) & (rows["role"] == role)].sort_values(
            "order", kind="stable")
        bad = flight_format.non_finite_rows(
            part[list(flight_format.STATISTICS)].to_numpy(np.float64))
        for node, name, value, holds in zip(part["node"].astype(str), part["name"].astype(str),
                                            part[column].to_numpy(np.float64), bad):
            if node not in values:
                values[node] = NodeValue(float(value), name, bool(holds))
    label = f"{statistic_label(statistic)} of the {ROLE_LABELS.get(role, role)}"
    return Paint(label=label, values=values, scale=scale, step=int(step))


def next_step(steps: Sequence[int], current: int | None) -> int | None:
    """The player's next step (None at the end: it stops)."""
    steps = list(steps)
    if not steps:
        return None
    if current is None or current not in steps:
        return steps[0]
    i = steps.index(current)
    return steps[i + 1] if i + 1 < len(steps) else None


def step_summary(rows: pd.DataFrame, step: int, statistic: str, role: str,
                 limit: int = 4) -> str:
    """One line naming what the painted graph shows at ``step`` by name (a graph of many
    nodes is drawn without labels): the tensors with a NaN or Inf there, in the order
    the step computed them, and those whose statistic changed most since the step
    before (as a factor)."""
    column = _column(statistic)
    if rows is None or rows.empty or column not in rows.columns:
        return ""
    part = rows[rows["role"] == role].sort_values(["training_step", "order"], kind="stable")
    now = part[part["training_step"] == step].drop_duplicates("name")
    if now.empty:
        return f"step {step}: no {ROLE_LABELS.get(role, role)} rows"
    bad = flight_format.non_finite_rows(now[list(flight_format.STATISTICS)].to_numpy(np.float64))
    out = []
    names = now["name"].astype(str).tolist()
    if bad.any():
        shown = [n for n, b in zip(names, bad) if b]
        more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
        out.append(f"NaN/Inf in {len(shown)}: " + ", ".join(shown[:limit]) + more)
    before = part[part["training_step"] == step - 1].drop_duplicates("name").set_index("name")
    if len(before):
        prev = before[column].reindex(names).to_numpy(np.float64)
        cur = now[column].to_numpy(np.float64)
        with np.errstate(all="ignore"):
            factor = np.abs(cur) / np.abs(prev)
        ok = np.isfinite(factor) & (factor > 0)
        if ok.any():
            change = np.where(ok, np.abs(np.log(np.where(ok, factor, 1.0))), -1.0)
            top = [i for i in np.argsort(-change, kind="stable")[:limit] if change[i] > 0]
            if top:
                out.append(f"{statistic_label(statistic)} changed most since step {step - 1}: "
                           + ", ".join(f"{names[i]} ×{factor[i]:.3g}" for i in top))
    return " · ".join(out)
