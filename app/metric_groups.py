"""The Metrics page at real size (issue 27 item 6): 50 to 500 modules per metric.

A 12-layer GPT-2 watched with a metric per ``Conv1D`` gives 48 lines per figure; in one
plot with 10 repeating colours and a legend sorted as text (``h.0, h.1, h.10, h.2``)
nothing can be read. The pure builders here:

- natural order (``natural.py``): names with numbers in numeric order (``h.2`` before
  ``h.10``), for legends, options and rows;
- ``module_kind``: a module's type and layer index: its first number in the path is the
  layer (``model.transformer.h.3.mlp.c_fc`` is the type ``model.transformer.h.*.mlp.c_fc``
  at index 3); ``group_modules`` groups the modules by type;
- ``search_modules``: the page's search (words, all of which must occur; ``-word``
  excludes);
- ``outliers``: per type, the modules whose latest value is far from the type's median
  (a robust z-score over the median absolute deviation), named in the figures;
- ``grouped_figure``: small multiples, one subplot per type, one line per module coloured
  by its depth (layer index) on one colour scale;
- ``heatmap_figure``: module × step, the rows grouped by type and in depth order.

Both figures carry the same ``meta`` per trace as ``metric_figures.metric_figure`` (a
click opens the step and module; ``point_of`` reads it) and take its frames (those of
``Group.read_metrics``, one per trial).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .figures import Figure, axis, base_layout, empty_figure
from .metric_figures import COLOURS, TRIAL_DASHES, breaks, broken, series
from .natural import natural_key, natural_sorted
from .plot_text import plot_text

#: The view the page picks by itself: one plot up to this many modules, else by type.
LINES_UP_TO = 10
#: At most this many subplots; the types after them are drawn together as ``OTHER``.
MAX_PANELS = 16
#: The subplot of the modules without a type of their own (no layer index, or alone).
OTHER = "other modules"
#: A module is an outlier of its type when its robust z-score is above this (Iglewicz and
#: Hoaglin's 3.5) ...
OUTLIER_Z = 3.5
#: ... and at most this many are named per figure.
MAX_OUTLIERS = 5
#: The depth colour scale (Viridis' stops, dark = first layer, yellow = last).
DEPTH_SCALE: tuple[str, ...] = ("#440154", "#482878", "#3e4989", "#31688e", "#26828e",
                                "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725")


def module_kind(name: str) -> tuple[str, int | None]:
    """``(type, layer index)``: the first number in the dotted path is the layer, the
    type the name with it replaced by ``*``; ``(name, None)`` without a number."""
    parts = str(name).split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i] + ["*"] + parts[i + 1:]), int(part)
    return str(name), None


@dataclass(frozen=True)
class ModuleGroup:
    """The modules of one type, in depth (layer index) order; ``OTHER``'s in natural
    order with their indices None."""

    kind: str
    modules: tuple[str, ...]
    indices: tuple[int | None, ...]


def group_modules(modules: Sequence[str], max_panels: int = MAX_PANELS) -> list[ModuleGroup]:
    """The modules by type, the types in the natural order of their first module; types
    of one module, and those beyond ``max_panels - 1``, go into one ``OTHER`` group
    (last)."""
    by_kind: dict[str, list[tuple[int | None, str]]] = {}
    for m in natural_sorted(modules):
        kind, index = module_kind(m)
        by_kind.setdefault(kind, []).append((index, m))
    groups, rest = [], []
    for kind, members in by_kind.items():
        if len(members) < 2 or members[0][0] is None:
            rest += [m for _i, m in members]
            continue
        members.sort(key=lambda x: (x[0], natural_key(x[1])))
        groups.append(ModuleGroup(kind, tuple(m for _i, m in members),
                                  tuple(i for i, _m in members)))
    if len(groups) + (1 if rest else 0) > max_panels:
        keep = max(max_panels - 1, 0)
        for g in groups[keep:]:
            rest += list(g.modules)
        groups = groups[:keep]
    if rest:
        rest = natural_sorted(rest)
        groups.append(ModuleGroup(OTHER, tuple(rest), tuple(None for _ in rest)))
    return groups


def search_modules(modules: Sequence[str], query: str | None) -> list[str]:
    """The modules that match every word of ``query`` (case-insensitive substrings;
    ``-word``: must not occur), in the given order. An empty query matches all."""
    words = [w for w in re.split(r"[\s,]+", (query or "").strip().lower()) if w]
    wanted = [w for w in words if not w.startswith("-")]
    unwanted = [w[1:] for w in words if w.startswith("-") and len(w) > 1]
    out = []
    for m in modules:
        low = str(m).lower()
        if all(w in low for w in wanted) and not any(w in low for w in unwanted):
            out.append(m)
    return out


def depth_colour(index: int | None, top: int) -> str:
    """The colour of layer ``index`` of ``0..top`` on ``DEPTH_SCALE`` (grey for None)."""
    if index is None:
        return "#7f7f7f"
    position = 0.0 if top <= 0 else min(max(index / top, 0.0), 1.0)
    scaled = position * (len(DEPTH_SCALE) - 1)
    low = math.floor(scaled)
    high = min(low + 1, len(DEPTH_SCALE) - 1)
    frac = scaled - low
    a = [int(DEPTH_SCALE[low][i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(DEPTH_SCALE[high][i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * frac):02x}" for x, y in zip(a, b))


def short_names(modules: Sequence[str]) -> dict[str, str]:
    """Each module without the dotted prefix all of them share (``model.transformer.``)."""
    names = [str(m) for m in modules]
    if len(names) == 1:  # alone: from the part before its layer number ("h.*.mlp.c_fc")
        parts = names[0].split(".")
        i = next((i for i, p in enumerate(parts) if p.isdigit() or p == "*"), 0)
        return {names[0]: ".".join(parts[max(i - 1, 0):])}
    split = [n.split(".") for n in names]
    common = 0
    # (a part before a layer number stays: "h.3.mlp", not "3.mlp")
    while all(len(s) > common + 1 for s in split) and len({s[common] for s in split}) == 1 \
            and not any(s[common + 1].isdigit() or s[common + 1] == "*" for s in split):
        common += 1
    return {n: ".".join(s[common:]) for n, s in zip(names, split)}


@dataclass(frozen=True)
class Outlier:
    """A module whose latest value is far from its type's median."""

    module: str
    kind: str
    step: int
    value: float
    median: float
    z: float

    def describe(self, short: str | None = None) -> str:
        ratio = (f"{self.value / self.median:.3g}× its type's median" if self.median
                 else f"median {self.median:.3g}")
        return f"{short or self.module} ({self.value:.4g} at step {self.step}; {ratio})"


def latest_values(frame: pd.DataFrame | None, metric: str) -> pd.DataFrame:
    """``module, training_step, value``: each module's latest finite value of ``metric``
    (of its first backward pass and lowest rank)."""
    if frame is None or frame.empty:
        return pd.DataFrame(columns=["module", "training_step", "value"])
    part = frame[(frame["metric"] == metric) & np.isfinite(frame["value"].astype(float))]
    if "backward_pass" in part:
        part = part[part["backward_pass"] == part["backward_pass"].min()] if len(part) else part
    if "rank" in part and len(part):
        part = part[part["rank"] == part["rank"].min()]
    part = part.sort_values(["module", "training_step"], kind="stable")
    last = part.groupby("module", sort=False).tail(1)
    return last[["module", "training_step", "value"]].reset_index(drop=True)


def outliers(frame: pd.DataFrame | None, metric: str, modules: Sequence[str] | None = None,
             z_limit: float = OUTLIER_Z, limit: int = MAX_OUTLIERS) -> list[Outlier]:
    """The modules whose latest value is farthest from the median of their type (types
    of at least 4 modules; robust z = 0.6745 · (value − median) / MAD above ``z_limit``;
    with a MAD of zero, any value off the median), the farthest first."""
    latest = latest_values(frame, metric)
    if modules is not None:
        latest = latest[latest["module"].isin(list(modules))]
    found: list[Outlier] = []
    for group in group_modules(list(latest["module"]), max_panels=10 ** 6):
        if group.kind == OTHER or len(group.modules) < 4:
            continue
        rows = latest[latest["module"].isin(group.modules)]
        values = rows["value"].to_numpy(dtype=np.float64)
        median = float(np.median(values))
        mad = float(np.median(np.abs(values - median)))
        scale = max(abs(median), 1.0) * 1e-12
        for module, step, value in zip(rows["module"], rows["training_step"], values):
            off = value - median
            if mad > scale:
                z = 0.6745 * off / mad
            else:
                z = math.inf if abs(off) > scale else 0.0
            if abs(z) > z_limit:
                found.append(Outlier(str(module), group.kind, int(step), float(value),
                                     median, float(z)))
    found.sort(key=lambda o: (-abs(o.z), natural_key(o.module)))
    return found[:limit]


def _meta(s) -> list:
    return [s.trial, s.module, s.backward_pass, s.rank, None]


def _outlier_text(found: Sequence[Outlier], short: Mapping[str, str]) -> str:
    return "outliers: " + "; ".join(plot_text(o.describe(short.get(o.module)))
                                    for o in found)


def grouped_figure(
    frames: Mapping[str, pd.DataFrame],
    metric: str,
    *,
    modules: Sequence[str] | None = None,
    log_y: bool = False,
    step: int | None = None,
    panel_height: int = 220,
    columns: int = 3,
) -> Figure:
    """Small multiples: one subplot per module type (``group_modules``), a line per module
    coloured by its layer index on ``DEPTH_SCALE`` (a colour bar says which), each trial
    in a line style of its own; the outliers of the first trial (``outliers``) drawn
    thicker and named above the plots. Subplots have their own y axes (types differ in
    scale) and share the steps."""
    lines = series(frames, metric, modules)
    if not lines:
        return empty_figure(f"No values of {metric} for this choice yet.", height=320)
    trials = list(dict.fromkeys(frames))
    groups = group_modules([s.module for s in lines])
    short = short_names([s.module for s in lines])
    main = next(iter(frames.values()), None)
    found = outliers(main, metric, [s.module for s in lines])
    marked = {o.module for o in found}
    top = max((i for g in groups for i in g.indices if i is not None), default=0)
    n = len(groups)
    cols = n if n <= 4 else max(1, min(columns, n))  # up to 4 types side by side
    rows = math.ceil(n / cols)
    gap_x, gap_y = 0.06, 0.5 / max(rows, 1) * 0.28
    width = (1 - gap_x * (cols - 1)) / cols
    height_frac = (1 - gap_y * (rows - 1)) / rows
    title = f"<b>{plot_text(metric)}</b> <span style='font-size:11px;color:#6c757d'>" \
            f"· {len({s.module for s in lines})} modules by type, colour: layer</span>"
    outlier_line = _outlier_text(found, short) if found else ""
    layout = base_layout(title=title, height=rows * panel_height + 90 + (18 if found else 0),
                         hovermode="closest", showlegend=False, uirevision=metric,
                         clickmode="event")
    data: list[dict] = []
    annotations: list[dict] = []
    where = {m: k for k, g in enumerate(groups) for m in g.modules}
    index_of = {m: i for g in groups for m, i in zip(g.modules, g.indices)}
    others = groups[-1].modules if groups and groups[-1].kind == OTHER else ()
    other_colours = {m: c for m, c in zip(others, _categorical(len(others)))}
    kind_labels = short_names([g.kind for g in groups if g.kind != OTHER])
    for k, group in enumerate(groups):
        suffix = "" if k == 0 else str(k + 1)
        col, row = k % cols, k // cols
        x0 = col * (width + gap_x)
        y1 = 1 - row * (height_frac + gap_y)
        layout[f"xaxis{suffix}"] = axis("step" if row == rows - 1 else None,
                                        domain=[x0, x0 + width], anchor=f"y{suffix}",
                                        **({} if k == 0 else {"matches": "x"}))
        layout[f"yaxis{suffix}"] = axis(None, domain=[y1 - height_frac, y1],
                                        anchor=f"x{suffix}",
                                        type="log" if log_y else "linear")
        label = kind_labels.get(group.kind, group.kind)
        annotations.append({
            "text": f"{plot_text(label)} <span style='color:#6c757d'>({len(group.modules)})"
                    "</span>", "x": x0, "y": y1, "xref": "paper", "yref": "paper",
            "xanchor": "left", "yanchor": "bottom", "showarrow": False,
            "font": {"size": 11}, "name": "panel-title"})
    # the lines in depth order inside each panel (natural order of the modules)
    for s in sorted(lines, key=lambda s: (where[s.module], natural_key(s.module),
                                          trials.index(s.trial), s.backward_pass,
                                          s.rank if s.rank is not None else -1)):
        k = where[s.module]
        suffix = "" if k == 0 else str(k + 1)
        index = index_of.get(s.module)
        colour = other_colours.get(s.module) or depth_colour(index, top)
        t = trials.index(s.trial) if s.trial in trials else 0
        cut = breaks(s.steps)
        name = short[s.module] + (f" · {s.trial}" if len(trials) > 1 else "") + (
            f" · rank {s.rank}" if s.rank is not None else "")
        outlier = s.module in marked
        data.append({
            "type": "scatter", "mode": "lines+markers", "x": broken(s.steps, cut),
            "y": broken(s.values, cut), "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
            "meta": _meta(s), "name": plot_text(name),
            "line": {"color": colour, "width": 3 if outlier else 1.3,
                     "dash": TRIAL_DASHES[t % len(TRIAL_DASHES)]},
            "marker": {"color": colour, "size": 5 if outlier else 3},
            "connectgaps": False,
            "hovertemplate": f"{plot_text(name)}" + (" <b>(outlier)</b>" if outlier else "")
                             + f"<br>step %{{x}}<br>{plot_text(metric)} %{{y:.5g}}"
                             "<extra>click: open this step</extra>",
        })
    # the depth scale: an invisible trace with the colour bar
    data.append({
        "type": "scatter", "mode": "markers", "x": [None], "y": [None], "hoverinfo": "skip",
        "name": "layer scale", "showlegend": False,
        "marker": {"color": [0, top], "cmin": 0, "cmax": max(top, 1),
                   "colorscale": [[i / (len(DEPTH_SCALE) - 1), c]
                                  for i, c in enumerate(DEPTH_SCALE)],
                   "showscale": True, "size": 0.1,
                   "colorbar": {"title": {"text": "layer", "side": "right"}, "thickness": 10,
                                "len": 0.6, "x": 1.01}},
    })
    if found:
        annotations.append({"text": outlier_line, "x": 0, "y": 1, "xref": "paper",
                            "yref": "paper", "xanchor": "left", "yanchor": "bottom",
                            "yshift": 16, "showarrow": False, "name": "outliers",
                            "font": {"size": 11, "color": "#b02a37"}})
    layout["annotations"] = annotations
    layout["margin"] = {"l": 48, "r": 60, "t": 64 if found else 48, "b": 36}
    if step is not None:
        layout["shapes"] = [{"type": "line", "xref": "x" if k == 0 else f"x{k + 1}",
                             "yref": f"{'y' if k == 0 else f'y{k + 1}'} domain", "x0": step,
                             "x1": step, "y0": 0, "y1": 1,
                             "line": {"color": "#6c757d", "width": 1, "dash": "dot"}}
                            for k in range(n)]
    return {"data": data, "layout": layout}


def _categorical(n: int) -> list[str]:
    return [COLOURS[i % len(COLOURS)] for i in range(n)]


def heatmap_rows(modules: Sequence[str]) -> list[str]:
    """The heatmap's rows: the modules grouped by type, each type in depth order (the
    order of ``group_modules``)."""
    return [m for g in group_modules(modules, max_panels=10 ** 6) for m in g.modules]


def heatmap_figure(
    frame: pd.DataFrame | None,
    metric: str,
    *,
    modules: Sequence[str] | None = None,
    trial: str = "",
    log_colour: bool | None = None,
    row_height: int = 14,
    max_height: int = 900,
) -> Figure:
    """Module × step: one row per module (grouped by type, in depth order, top down; the
    trace lists them bottom-up, as plotly draws categories),
    one column per computed step, the colour the value (log₁₀ when ``log_colour``, or by
    default when every value is positive and they span more than two decades); blank
    where the metric was not computed. Of one trial (``trial``: the first backward pass,
    lowest rank); the trace's ``meta`` names each row label's module, so that a click on a cell
    opens its step and module (``metric_figures.point_of``)."""
    if frame is None or frame.empty:
        return empty_figure(f"No values of {metric} for this choice yet.", height=320)
    part = frame[frame["metric"] == metric]
    if modules:
        part = part[part["module"].isin(list(modules))]
    if "backward_pass" in part and len(part):
        part = part[part["backward_pass"] == part["backward_pass"].min()]
    if "rank" in part and len(part):
        part = part[part["rank"] == part["rank"].min()]
    if part.empty:
        return empty_figure(f"No values of {metric} for this choice yet.", height=320)
    rows = heatmap_rows(list(dict.fromkeys(str(m) for m in part["module"])))
    steps = np.unique(part["training_step"].to_numpy(dtype=np.int64))
    z = np.full((len(rows), len(steps)), np.nan)
    r = pd.Index(rows).get_indexer(part["module"].astype(str))
    c = np.searchsorted(steps, part["training_step"].to_numpy(dtype=np.int64))
    z[r, c] = part["value"].to_numpy(dtype=np.float64)
    finite = z[np.isfinite(z)]
    if log_colour is None:
        log_colour = bool(finite.size and finite.min() > 0
                          and finite.max() / finite.min() > 100)
    shown = np.log10(np.where(z > 0, z, np.nan)) if log_colour else z
    short = short_names(rows)
    labels = [short[m] for m in rows]
    found = outliers(frame, metric, rows)
    height = int(min(max_height, max(260, 90 + row_height * len(rows))))
    title = (f"<b>{plot_text(metric)}</b> <span style='font-size:11px;color:#6c757d'>· "
             f"{len(rows)} modules × {len(steps)} steps, rows by type and layer</span>")
    layout = base_layout(title=title, height=height, hovermode="closest", uirevision=metric,
                         clickmode="event")
    layout["xaxis"] = axis("step")
    layout["yaxis"] = axis(None, type="category",
                           tickfont={"size": 10 if len(rows) <= 60 else 8})
    annotations = []
    if found:
        annotations.append({"text": _outlier_text(found, short), "x": 0, "y": 1,
                            "xref": "paper", "yref": "paper", "xanchor": "left",
                            "yanchor": "bottom", "showarrow": False, "name": "outliers",
                            "font": {"size": 11, "color": "#b02a37"}})
    layout["annotations"] = annotations
    layout["margin"] = {"l": 48, "r": 12, "t": 56 if found else 40, "b": 36}
    # plotly draws the first category at the bottom: the rows go in bottom-up
    data = [{
        "type": "heatmap", "x": steps.tolist(), "y": labels[::-1],
        "z": [[None if not np.isfinite(v) else float(v) for v in row] for row in shown[::-1]],
        "customdata": [[None if not np.isfinite(v) else float(v) for v in row]
                       for row in z[::-1]],
        "colorscale": "Viridis", "hoverongaps": False,
        # whose each cell is: a click opens its step and module (metric_figures.point_of)
        "meta": [trial, None, int(part["backward_pass"].min())
                 if "backward_pass" in part else 0,
                 int(part["rank"].min()) if "rank" in part else None, None,
                 dict(zip(labels, rows))],
        "colorbar": {"title": {"text": f"log₁₀ {metric}" if log_colour else metric,
                               "side": "right"}, "thickness": 10},
        "hovertemplate": "%{y}<br>step %{x}<br>" + plot_text(metric)
                         + " %{customdata:.5g}<extra></extra>",
        "name": "heatmap",
    }]
    return {"data": data, "layout": layout}
