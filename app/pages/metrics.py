"""Metrics page (issue 16): the per-module metrics recorded with
``watch(model, metrics=...)`` (Taiyi's quantities, monitorch's lenses, user metrics).

One figure per metric, one line per module, a marker on every computed step and nowhere
else (each metric runs on its own schedule). The trial is the one the selection shows
(as on the other pages); further trials are overlaid. With a window of more than one
step, each window is a mean point with a band (std, min–max or quartiles), monitorch's
epoch aggregation. A vector metric (a covariance spectrum) has a second figure: its
vector at the step hovered (or clicked) on the first. A click on a point opens the
Modules or the Tensors page at that trial, step and module (found from the clicked
trace and point index: the figure carries no per-point data).

At real size (50-500 modules, issue 27): names in natural order (``h.2`` before
``h.10``); a view per figure: one plot (the default up to 10 modules), a plot per module
type with the layers as a colour scale (beyond), or a module × step heatmap grouped by
type; a search (words a module's name must hold, ``-word`` leaves out) on top of the
module filter; the outliers of a type named above its plots (``metric_groups``).

A distributed recording has a rank selector (hidden for one rank): one rank, or every
rank side by side (the default), a line per rank in the module's colour, since a rank
whose values drift is what one looks for. Metrics are not merged over ranks.

Live: the figures depend on the data status and the reads are cached per data version
of each trial (``metric_data``); a figure keeps its zoom across refreshes (uirevision).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, dcc, html, no_update

from comgra_like.vocabulary import ANY_TYPE

from .. import ids, metric_data, other_trials
from .. import metric_figures as mfig
from .. import metric_groups as mg
from .. import selection as sel
from ..figures import empty_figure
from ..natural import natural_sorted
from ..parts import AppParts
from .modules import PATH as MODULES_PATH
from .page import Page
from .tensors import PATH as TENSORS_PATH

PATH = "/metrics"
NAME = "Metrics"

# ids of this page
INFO = "metrics-info"
OVERLAY = "metrics-overlay"     # further trials, overlaid on the selection's trial
MODULES = "metrics-modules"     # module filter (empty: every module)
METRICS = "metrics-metrics"     # metric filter (empty: every metric)
EXECUTION = "metrics-execution"
WINDOW = "metrics-window"       # steps per aggregation window (1: the points as computed)
BAND = "metrics-band"
LOG = "metrics-log"
TARGET = "metrics-target"       # where a click leads: the Modules or the Tensors page
CARDS = "metrics-cards"
SHOWN = "metrics-shown"         # dcc.Store: the metrics the cards are for
RANK = "metrics-rank"           # one rank, or every rank side by side
RANK_BOX = "metrics-rank-box"
SIDE_BY_SIDE_LABEL = "all ranks side by side"
SEARCH = "metrics-search"       # words a module's name must hold (-word: must not)
VIEW = "metrics-view"           # one plot, small multiples by type, or a heatmap
AUTO, LINES, BY_TYPE, HEATMAP = "auto", "lines", "types", "heatmap"

#: At most this many metric figures at once (the metric filter picks others).
MAX_FIGURES = 24
FIGURE_HEIGHT = 320


def card_id(kind: str, metric: Any) -> dict:
    """The ids of a metric's card: kind in graph, spectrum, key, traces (whose each trace
    of the graph is, for clicks and hovers)."""
    return {"type": f"metrics-{kind}", "metric": metric}


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Span("overlay trials", className="sel-label me-2"),
                    dcc.Dropdown(id=OVERLAY, options=[], value=[], multi=True,
                                 placeholder="none", className="sel-dropdown",
                                 style={"minWidth": "12rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("modules", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=MODULES, options=[], value=[], multi=True,
                                 placeholder="every module", className="sel-dropdown",
                                 style={"minWidth": "14rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("search", className="sel-label ms-3 me-2",
                              title="words every module shown must hold (h.1 mlp); "
                                    "-word leaves out the modules that hold it"),
                    dcc.Input(id=SEARCH, type="text", value="", debounce=True,
                              placeholder="e.g. h.1 mlp -c_proj",
                              style={"width": "11rem"}, persistence=True,
                              persistence_type="session"),
                    html.Span("metrics", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=METRICS, options=[], value=[], multi=True,
                                 placeholder="every metric", className="sel-dropdown",
                                 style={"minWidth": "14rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("steps", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=EXECUTION, options=[], value=ANY_TYPE, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "9rem"},
                                 persistence=True, persistence_type="session"),
                    html.Span(
                        [html.Span("ranks", className="sel-label ms-3 me-2"),
                         dcc.Dropdown(id=RANK, options=[], value=metric_data.SIDE_BY_SIDE,
                                      clearable=False, className="sel-dropdown",
                                      style={"minWidth": "13rem"})],
                        id=RANK_BOX, className="align-items-center",  # no d-flex
                        style={"display": "none"}),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            html.Div(
                [
                    html.Span("window", className="sel-label me-2",
                              title="steps per aggregation window: 1 shows the points as "
                                    "computed, more draws the mean per window with a band"),
                    dcc.Input(id=WINDOW, type="number", min=1, step=1, value=1,
                              debounce=True, style={"width": "5rem"}, persistence=True,
                              persistence_type="session"),
                    html.Span("band", className="sel-label ms-3 me-2"),
                    dcc.RadioItems(id=BAND, options=[{"label": f" {b}", "value": b}
                                                     for b in mfig.BAND_CHOICES],
                                   value="std", inline=True, inputClassName="me-1",
                                   labelClassName="me-2", persistence=True,
                                   persistence_type="session"),
                    dcc.Checklist(id=LOG, options=[{"label": " log y", "value": "log"}],
                                  value=[], className="ms-3", inputClassName="me-1",
                                  persistence=True, persistence_type="session"),
                    html.Span("view", className="sel-label ms-3 me-2",
                              title="auto: one plot up to 10 modules, else a plot per "
                                    "module type with the layers as colours"),
                    dcc.RadioItems(id=VIEW, options=[
                        {"label": " auto", "value": AUTO},
                        {"label": " one plot", "value": LINES},
                        {"label": " by type", "value": BY_TYPE},
                        {"label": " heatmap", "value": HEATMAP}],
                        value=AUTO, inline=True, inputClassName="me-1",
                        labelClassName="me-2", persistence=True,
                        persistence_type="session"),
                    html.Span("a click opens", className="sel-label ms-3 me-2"),
                    dcc.RadioItems(id=TARGET, options=[
                        {"label": " Modules page", "value": MODULES_PATH},
                        {"label": " Tensors page", "value": TENSORS_PATH}],
                        value=MODULES_PATH, inline=True, inputClassName="me-1",
                        labelClassName="me-2", persistence=True,
                        persistence_type="session"),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            html.Div(id=INFO, className="small text-muted mb-2"),
            html.Div(id=CARDS, className="metrics-cards"),
            dcc.Store(id=SHOWN, storage_type="memory"),
        ],
        className="page-padded",
    )


# --- pure pieces ----------------------------------------------------------------------


def card(metric: str, vector: bool) -> html.Div:
    """One metric: its figure, and for a vector metric the vector at a step beside it."""
    graph = dcc.Graph(id=card_id("graph", metric),
                      figure=empty_figure("Loading…", FIGURE_HEIGHT),
                      config={"displaylogo": False},
                      style={"flex": "3 1 560px", "minWidth": "420px"})
    parts = [graph]
    if vector:
        parts.append(dcc.Graph(id=card_id("spectrum", metric),
                               figure=empty_figure("Loading…", FIGURE_HEIGHT),
                               config={"displaylogo": False},
                               style={"flex": "2 1 360px", "minWidth": "320px"}))
    parts.append(dcc.Store(id=card_id("key", metric), storage_type="memory"))
    parts.append(dcc.Store(id=card_id("traces", metric), storage_type="memory"))
    return html.Div(parts, className="metrics-card d-flex flex-wrap border rounded p-1 mb-2",
                    **{"data-metric": metric})


def trials_of(selection: Mapping | None, overlay: list | None, known: list[str]) -> list[str]:
    """The trials drawn: the selection's trial first, then the overlaid ones (known only)."""
    trial = ((selection or {}).get("current") or {}).get("trial")
    out = [trial] if trial in known else []
    return out + [t for t in (overlay or []) if t in known and t not in out]


def rank_options(ranks: list[int]) -> list[dict]:
    """The rank selector's options: none for one rank, else every rank side by side and
    each rank."""
    if len(ranks) <= 1:
        return []
    return [{"label": SIDE_BY_SIDE_LABEL, "value": metric_data.SIDE_BY_SIDE},
            *({"label": f"rank {r}", "value": int(r)} for r in ranks)]


def rank_for(rank: Any, ranks: list[int]) -> Any:
    """What a trial is read with: the chosen rank when the trial has it (or side by side
    when it has several ranks), else None (its only, or lowest, rank)."""
    if rank == metric_data.SIDE_BY_SIDE:
        return rank if len(ranks) > 1 else None
    return rank if rank in ranks else None


def window_of(value: Any) -> int:
    """The aggregation window typed in: a whole number of steps, at least 1."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def view_of(view: Any, modules: int) -> str:
    """The view drawn: the choice, or for ``auto`` one plot up to ``mg.LINES_UP_TO``
    modules and a plot per module type beyond."""
    if view in (LINES, BY_TYPE, HEATMAP):
        return view
    return LINES if modules <= mg.LINES_UP_TO else BY_TYPE


def shown_modules(options: list | None, chosen: list | None, search: str | None) -> list[str]:
    """The modules drawn: the chosen ones (every module when none is), those the search
    matches, in natural order."""
    every = natural_sorted(o["value"] for o in options or [])
    picked = [m for m in every if m in set(chosen or [])] or every
    return mg.search_modules(picked, search)


def where_clicked(point: Mapping[str, Any], target: str) -> dict:
    """The selection's fields a clicked point opens: its trial, step and module (the
    module's output on the Tensors page)."""
    where = {"trial": point["trial"], "node": point["module"],
             "training_step": point["training_step"]}
    if target == TENSORS_PATH:
        where["role"] = "output 0"
    return where


# --- callbacks ------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    def frames_of(trials: list[str], metric: str, execution: str | None,
                  rank: Any = None) -> dict:
        frames = {}
        for t in trials:
            frame = metric_data.rows(data, t, metric, rank_for(rank, data.ranks(t)))
            if execution not in (None, ANY_TYPE) and not frame.empty:
                frame = frame[frame["type_of_execution"] == execution]
            frames[t] = frame
        return frames

    @app.callback(
        Output(OVERLAY, "options"),
        Output(MODULES, "options"),
        Output(METRICS, "options"),
        Output(EXECUTION, "options"),
        Output(EXECUTION, "value"),
        Output(INFO, "children"),
        Output(CARDS, "children"),
        Output(SHOWN, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(OVERLAY, "value"),
        Input(METRICS, "value"),
        Input(RANK, "value"),
        Input(SEARCH, "value"),
        Input(MODULES, "value"),
        State(EXECUTION, "value"),
        State(SHOWN, "data"),
    )
    def show_cards(_status: Any, selection: dict | None, overlay: list | None,
                   chosen: list | None, rank: Any, search: str | None,
                   picked_modules: list | None, execution: str | None,
                   shown: Any) -> tuple:
        started = time.perf_counter()
        known = data.trial_ids()
        trials = trials_of(selection, overlay, known)
        main = trials[0] if trials else None
        overlay_options = [{"label": t, "value": t} for t in known if t != main]
        listings = {t: metric_data.listing(data, t, rank_for(rank, data.ranks(t)))
                    for t in trials}
        reason = mfig.empty_reason(trials, listings)
        if reason is not None and trials:
            reason += other_trials.hint(other_trials.with_metrics(data), trials[0], "metrics")
        if reason is not None:
            cards = [html.Div(reason, className="alert alert-secondary metrics-empty")]
            key = ["empty", reason]
            return (overlay_options, [], [], [], no_update, "",
                    cards if key != shown else no_update, key)
        every = [f for f in listings.values() if f is not None and not f.empty]
        names: list[str] = []
        modules: list[str] = []
        points = 0
        for frame in every:
            names += [m for m in mfig.metric_order(frame) if m not in names]
            modules += [m for m in dict.fromkeys(str(x) for x in frame["module"])
                        if m not in modules]
            points += int(frame["n_points"].sum())
        types = sorted({t for trial in trials for t in data.types_of_execution(trial)})
        executions = [{"label": "every type", "value": ANY_TYPE}] + [
            {"label": t, "value": t} for t in types]
        if execution not in [o["value"] for o in executions]:
            execution = ANY_TYPE
        modules = natural_sorted(modules)
        matching = shown_modules([{"value": m} for m in modules], picked_modules, search)
        wanted = [m for m in (chosen or []) if m in names] or names
        drawn = wanted[:MAX_FIGURES]
        vectors = {m: mfig.is_vector(metric_data.rows(
            data, main, m, rank_for(rank, data.ranks(main))) if main else None, m)
            for m in drawn}
        key = [[m, vectors[m]] for m in drawn]
        info = (f"{len(names)} metric{'s' if len(names) != 1 else ''} of "
                f"{len(modules)} module{'s' if len(modules) != 1 else ''}, {points} points"
                + (f" · {len(matching)} module{'s' if len(matching) != 1 else ''} shown"
                   if len(matching) != len(modules) else "")
                + (f" · the first {MAX_FIGURES} shown (pick others above)"
                   if len(wanted) > MAX_FIGURES else "")
                + " · markers: the steps each metric was computed at · click a point to open "
                  "that step and module · a spectrum shows the step hovered on its left")
        cards = [card(m, vectors[m]) for m in drawn] if key != shown else no_update
        parts.timings.record("metrics.cards", time.perf_counter() - started)
        return (overlay_options, [{"label": m, "value": m} for m in modules],
                [{"label": m, "value": m} for m in names], executions, execution, info, cards,
                key)

    @app.callback(
        Output(RANK, "options"),
        Output(RANK, "value"),
        Output(RANK_BOX, "style"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        State(RANK, "value"),
        State(RANK, "options"),
    )
    def rank_choices(selection: dict | None, _status: Any, value: Any,
                     shown: list | None) -> tuple:
        trial = ((selection or {}).get("current") or {}).get("trial")
        options = rank_options(data.ranks(trial) if trial in data.trial_ids() else [])
        values = [o["value"] for o in options]
        chosen = value if value in values else metric_data.SIDE_BY_SIDE
        style = {"display": "flex" if options else "none"}
        return (options if options != (shown or []) else no_update,
                chosen if chosen != value else no_update, style)

    @app.callback(
        Output(card_id("graph", MATCH), "figure"),
        Output(card_id("key", MATCH), "data"),
        Output(card_id("traces", MATCH), "data"),
        Input(OVERLAY, "value"),
        Input(MODULES, "value"),
        Input(EXECUTION, "value"),
        Input(WINDOW, "value"),
        Input(BAND, "value"),
        Input(LOG, "value"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(RANK, "value"),
        Input(SEARCH, "value"),
        Input(VIEW, "value"),
        State(MODULES, "options"),
        State(card_id("key", MATCH), "data"),
    )
    def show_metric(overlay: list | None, modules: list | None, execution: str | None,
                    window: Any, how: str | None, log: list | None, _status: Any,
                    selection: dict | None, rank: Any, search: str | None, view: Any,
                    module_options: list | None, shown: Any) -> tuple:
        metric = dash.callback_context.outputs_list[0]["id"]["metric"]
        started = time.perf_counter()
        trials = trials_of(selection, overlay, data.trial_ids())
        window = window_of(window)
        key = [[[t, *metric_data.data_version(data, t)] for t in trials], modules,
               execution, window, how, log, rank, search, view]
        if key == shown:
            return no_update, no_update, no_update
        frames = frames_of(trials, metric, execution, rank)
        every = natural_sorted(o["value"] for o in module_options or [])
        drawn = shown_modules(module_options, modules, search)
        if not drawn:
            figure = empty_figure(f"No module matches {search!r}.", FIGURE_HEIGHT)
            return figure, key, []
        colours = mfig.module_colours(every)
        filtered = drawn if len(drawn) != len(every) else None
        chosen_view = view_of(view, len(drawn))
        if chosen_view == BY_TYPE:
            figure = mg.grouped_figure(frames, metric, modules=filtered,
                                       log_y="log" in (log or []))
        elif chosen_view == HEATMAP:
            figure = mg.heatmap_figure(next(iter(frames.values()), None), metric,
                                       modules=filtered, trial=trials[0] if trials else "")
        else:
            figure = mfig.metric_figure(
                frames, metric, modules=filtered, colours=colours, window=window,
                how=how if how in mfig.BAND_CHOICES else "std", log_y="log" in (log or []),
                height=FIGURE_HEIGHT)
        parts.timings.record("metrics.figure", time.perf_counter() - started)
        return figure, key, mfig.trace_meta(figure)

    @app.callback(
        Output(card_id("spectrum", MATCH), "figure"),
        Input(card_id("graph", MATCH), "hoverData"),
        Input(OVERLAY, "value"),
        Input(MODULES, "value"),
        Input(EXECUTION, "value"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(RANK, "value"),
        Input(SEARCH, "value"),
        State(MODULES, "options"),
        State(card_id("traces", MATCH), "data"),
    )
    def show_spectrum(hover: dict | None, overlay: list | None, modules: list | None,
                      execution: str | None, _status: Any, selection: dict | None,
                      rank: Any, search: str | None, module_options: list | None,
                      traces: list | None) -> Any:
        metric = dash.callback_context.outputs_list["id"]["metric"]
        trials = trials_of(selection, overlay, data.trial_ids())
        point = mfig.point_of(hover, traces)
        colours = mfig.module_colours(natural_sorted(o["value"] for o in module_options or []))
        frames = frames_of(trials, metric, execution, rank)
        for t, frame in frames.items():
            # one rank's vectors: the hovered line's, else the lowest rank's
            if "rank" in frame.columns and not frame.empty:
                shown = point["rank"] if point and point["rank"] is not None else None
                frames[t] = frame[frame["rank"] == (shown if shown is not None
                                                    else frame["rank"].min())]
        return mfig.spectrum_figure(
            frames, metric,
            point["training_step"] if point else None,
            modules=shown_modules(module_options, modules, search) or None,
            colours=colours, height=FIGURE_HEIGHT)

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.URL, "pathname", allow_duplicate=True),
        Input(card_id("graph", ALL), "clickData"),
        State(card_id("traces", ALL), "data"),
        # optional: leaving the page removes the cards (which fires this) and the radio
        State(TARGET, "value", allow_optional=True),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def open_point(clicks: list, traces: list, target: str | None,
                   selection: dict | None) -> tuple:
        ctx = dash.callback_context
        trigger = ctx.triggered_id
        if not isinstance(trigger, Mapping):
            return no_update, no_update
        graphs = [i["id"] for i in ctx.inputs_list[0]]
        stores = [i["id"]["metric"] for i in ctx.states_list[0]]
        metric = trigger.get("metric")
        if metric not in stores or trigger not in graphs:
            return no_update, no_update
        point = mfig.point_of(clicks[graphs.index(trigger)], traces[stores.index(metric)])
        if point is None:
            return no_update, no_update  # a figure that appears, or a click off the points
        target = target if target in (MODULES_PATH, TENSORS_PATH) else MODULES_PATH
        where = where_clicked(point, target)
        return sel.open_where(selection, where, data.option_source()), target


PAGE = Page(PATH, NAME, layout, register_callbacks)
