"""The Flight page's callbacks, thin: each parses its inputs, calls its view
(``views.py``) and returns."""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, State

from ... import ids
from ...parts import AppParts
from .layout import (
    BODY,
    CHART,
    CHART_KEY,
    EMPTY,
    GRAPH,
    GRAPH_KEY,
    GRAPH_NOTE,
    KEY,
    MOVERS,
    PLAY,
    PLAY_TICK,
    ROLE,
    SLIDER,
    STATISTIC,
    STEP_SUMMARY,
    STEP_TEXT,
    TENSOR,
    TITLE,
    TRIGGER,
    TRIGGERS,
    trigger_row_id,
)
from .views import (
    chart_view,
    graph_view,
    play_step,
    selection_from_url,
    tensor_view,
    trigger_view,
    triggers_view,
)


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Input(ids.URL, "search"),
        State(ids.URL, "pathname"),
        State(ids.SELECTION, "data"),
        prevent_initial_call="initial_duplicate",
    )
    def trial_from_url(search: str | None, pathname: str | None, selection: dict | None
                       ) -> Any:
        """A link's trial becomes the selected trial (the top bar follows)."""
        return selection_from_url(data, search, pathname, selection)

    @app.callback(
        Output(TITLE, "children"),
        Output(EMPTY, "children"),
        Output(BODY, "style"),
        Output(TRIGGERS, "children"),
        Output(TRIGGER, "options"),
        Output(TRIGGER, "value"),
        Output(KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.URL, "search"),
        Input(trigger_row_id(ALL), "n_clicks"),
        Input(TRIGGER, "value"),
        Input(KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_triggers(selection: dict | None, _status: Any, search: str | None,
                      _clicks: list, chosen: str | None, shown: Any) -> tuple:
        ctx = dash.callback_context
        clicked = any(t.get("value") for t in ctx.triggered)
        return triggers_view(data, selection, search, ctx.triggered_id, clicked, chosen,
                             shown)

    @app.callback(
        Output(ROLE, "options"),
        Output(ROLE, "value"),
        Output(SLIDER, "min"),
        Output(SLIDER, "max"),
        Output(SLIDER, "marks"),
        Output(SLIDER, "value"),
        Output(MOVERS, "children"),
        Input(TRIGGER, "value"),
        State(ids.SELECTION, "data"),
        State(ROLE, "value"),
    )
    def show_trigger(name: str | None, selection: dict | None, role: str | None) -> tuple:
        return trigger_view(data, name, selection, role)

    @app.callback(
        Output(TENSOR, "options"),
        Output(TENSOR, "value"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        State(ids.SELECTION, "data"),
        State(TENSOR, "value"),
    )
    def tensor_options(name: str | None, role: str | None, selection: dict | None,
                       tensor: str | None) -> tuple:
        new_trigger = dash.callback_context.triggered_id == TRIGGER
        return tensor_view(data, name, role, selection, tensor, new_trigger)

    @app.callback(
        Output(CHART, "figure"),
        Output(CHART_KEY, "data"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        Input(TENSOR, "value"),
        Input(STATISTIC, "value"),
        Input(SLIDER, "value"),
        State(ids.SELECTION, "data"),
        State(CHART_KEY, "data"),
    )
    def show_chart(name: str | None, role: str | None, tensor: str | None,
                   statistic: str | None, step: int | None, selection: dict | None,
                   shown: Any) -> tuple:
        return chart_view(data, name, role, tensor, statistic, step, selection, shown)

    @app.callback(
        Output(GRAPH, "figure"),
        Output(GRAPH_NOTE, "children"),
        Output(STEP_TEXT, "children"),
        Output(STEP_SUMMARY, "children"),
        Output(GRAPH_KEY, "data"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        Input(STATISTIC, "value"),
        Input(SLIDER, "value"),
        State(ids.SELECTION, "data"),
        State(GRAPH_KEY, "data"),
    )
    def paint_graph(name: str | None, role: str | None, statistic: str | None,
                    step: int | None, selection: dict | None, shown: Any) -> tuple:
        return graph_view(data, name, role, statistic, step, selection, shown)

    @app.callback(
        Output(SLIDER, "value", allow_duplicate=True),
        Output(PLAY_TICK, "disabled"),
        Output(PLAY, "children"),
        Input(PLAY, "n_clicks"),
        Input(PLAY_TICK, "n_intervals"),
        Input(CHART, "clickData"),
        State(PLAY_TICK, "disabled"),
        State(SLIDER, "value"),
        State(SLIDER, "min"),
        State(SLIDER, "max"),
        prevent_initial_call=True,
    )
    def play(_clicks: Any, _ticks: Any, click: dict | None, stopped: bool | None,
             step: int | None, first: int | None, last: int | None) -> tuple:
        return play_step(dash.callback_context.triggered_id, click, stopped, step, first,
                         last)
