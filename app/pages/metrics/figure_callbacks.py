"""The Metrics page's figure callbacks: a metric's figure, a vector metric's spectrum at
the hovered step, and a click that opens the Modules or the Tensors page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, no_update

from ... import ids, metric_data
from ... import metric_figures as mfig
from ... import metric_groups as mg
from ... import selection as sel
from ...controls.shown import nothing, unchanged
from ...figures import empty_figure
from ...natural import natural_sorted
from ...parts import AppParts
from ..modules import PATH as MODULES_PATH
from ..tensors import PATH as TENSORS_PATH
from .choices import shown_modules, trials_of, view_of, where_clicked, window_of
from .data import frames_of
from .layout import (
    BAND,
    BY_TYPE,
    EXECUTION,
    FIGURE_HEIGHT,
    HEATMAP,
    LOG,
    MODULES,
    OVERLAY,
    RANK,
    SEARCH,
    TARGET,
    VIEW,
    WINDOW,
    card_id,
)


def register_figure_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

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
        if unchanged(key, shown):
            return nothing(3)
        frames = frames_of(data, trials, metric, execution, rank)
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
        frames = frames_of(data, trials, metric, execution, rank)
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

