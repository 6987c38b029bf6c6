"""The Metrics page's figure callbacks: a metric's figure, a vector metric's spectrum at
the hovered step, and a click that opens the Modules or the Tensors page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, no_update

from ... import ids
from ... import metric_figures as mfig
from ... import selection as sel
from ...parts import AppParts
from ..modules import PATH as MODULES_PATH
from ..tensors import PATH as TENSORS_PATH
from . import views
from .choices import where_clicked
from .layout import (
    BAND,
    EXECUTION,
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
        return views.metric_view(data, parts.timings, started, metric, overlay, modules,
                                 execution, window, how, log, selection, rank, search, view,
                                 module_options, shown)

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
        return views.spectrum_view(data, metric, hover, overlay, modules, execution,
                                   selection, rank, search, module_options, traces)

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

