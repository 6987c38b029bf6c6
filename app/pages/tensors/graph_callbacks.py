"""The dependency graph's callbacks: the figure (a full figure when the graph changes,
else a highlight or paint Patch), the painted recording types, ▶ play, and the click the
browser highlights at once (``comgra.graphClick``)."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import ALL, ClientsideFunction, Input, Output, State, no_update

from ... import ids
from ... import selection as sel
from ...controls.shown import if_changed
from ...parts import AppParts
from . import views as tensor_views
from .layout import (
    PAINT_STATISTIC,
    PAINT_TYPE,
    PAUSE_LABEL,
    PLAY,
    PLAY_LABEL,
    PLAY_TICK,
)
from .paint import is_painting, next_play_index, paint_aggregation


def register_graph_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data, timings = parts.data, parts.timings

    @app.callback(
        Output(ids.dependency_graph(), "figure"),
        Output(ids.GRAPH_KEY, "data"),
        Output(ids.GRAPH_SHOWN, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.GRAPH_KEY, "data"),  # inside the page: fires when the page is shown
        Input(PAINT_STATISTIC, "value"),
        Input(PAINT_TYPE, "value"),
        Input(ids.DATA_STATUS, "data"),  # painted: new data can change values and scale
        State(ids.GRAPH_SHOWN, "data"),
    )
    def draw_graph(
        selection: dict | None,
        shown: dict | None,
        statistic: str | None,
        recording_type: str | None,
        _status: Any,
        drawn: dict | None,
    ) -> tuple:
        started = time.perf_counter()
        return tensor_views.graph_view(data, timings, started, selection, shown, statistic,
                                recording_type, drawn)

    # Inputs are the trial and aggregation selectors, not the selection store: the
    # graph callback waits for this one whenever it may run (PAINT_TYPE is its input),
    # and the selection callback sends a selector's value only when it changed.
    @app.callback(
        Output(PAINT_TYPE, "options"),
        Output(PAINT_TYPE, "value"),
        Output(PAINT_TYPE, "disabled"),
        Input(PAINT_STATISTIC, "value"),
        Input(ids.selector("trial"), "value"),
        Input(ids.selector("aggregation"), "value"),
        State(PAINT_TYPE, "value"),
        State(PAINT_TYPE, "options"),
    )
    def paint_types(
        statistic: str | None, trial: str | None, aggregation: str | None,
        chosen: str | None, listed: Any
    ) -> tuple:
        # The recording types the trial has; when the chosen one has no value of the
        # statistic at all (an update ratio of forward values), the first one that has.
        if not is_painting(statistic):
            return no_update, no_update, True
        current = {"trial": trial, "aggregation": aggregation}
        table = data.statistic_table(current.get("trial"), statistic) if current.get(
            "trial") else None
        if table is None:
            return no_update, no_update, False
        types = sorted(table.recording_types(), key=sel.recording_type_sort_key)
        aggregation = paint_aggregation(current)
        with_values = [t for t in types if table.has_values(t, aggregation)]
        value = chosen if chosen in with_values else (with_values or types or [chosen])[0]
        options = [{"label": sel.option_label("recording_type", t), "value": t} for t in types]
        return if_changed(options, listed), if_changed(value, chosen), False

    @app.callback(
        Output(PLAY_TICK, "disabled"),
        Output(PLAY, "children"),
        Output(ids.step_slider(ALL), "value", allow_duplicate=True),
        Input(PLAY, "n_clicks"),
        Input(PLAY_TICK, "n_intervals"),
        State(PLAY_TICK, "disabled"),
        State(ids.step_slider(ALL), "value"),
        State(ids.step_slider(ALL), "max"),
        prevent_initial_call=True,
    )
    def play(_clicks: int, _ticks: int, stopped: bool, index: list, last: list) -> tuple:
        # ▶ moves the step slider (the selection follows it like a drag of the slider);
        # at the last step it stops, and ▶ there starts again from the first step.
        if not index:
            return True, PLAY_LABEL, []
        if dash.callback_context.triggered_id == PLAY:
            if not stopped:
                return True, PLAY_LABEL, [no_update] * len(index)
            start = 0 if (index[0] or 0) >= (last[0] or 0) else no_update
            return False, PAUSE_LABEL, [start] * len(index)
        if stopped:
            return no_update, no_update, [no_update] * len(index)
        position, more = next_play_index(index[0], last[0])
        return (not more, PAUSE_LABEL if more else PLAY_LABEL, [position] * len(index))

    app.clientside_callback(
        ClientsideFunction(namespace="comgra", function_name="graphClick"),
        Output(ids.dependency_graph(), "figure", allow_duplicate=True),
        Output(ids.GRAPH_SHOWN, "data", allow_duplicate=True),
        Input(ids.dependency_graph(), "clickData"),
        State(ids.dependency_graph(), "figure"),
        State(ids.SELECTION, "data"),
        State(ids.GRAPH_SHOWN, "data"),
        prevent_initial_call=True,
    )
