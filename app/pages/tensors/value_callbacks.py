"""The value views' callbacks: the header, statistics table and per-neuron values of the
selected tensor, and its series across steps (the step marker patched when only the step
changed)."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output

from ... import ids, selectors
from ...parts import AppParts
from . import views as tensor_views


def register_value_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data, timings = parts.data, parts.timings

    @app.callback(
        Output(ids.VALUE_HEADER, "children"),
        Output(ids.STATS_TABLE, "children"),
        Output(ids.NEURONS, "figure"),
        Output(ids.VALUES_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.VALUES_KEY, "data"),  # inside the page: fires when the page is shown
        Input(selectors.RANK_SELECT, "value"),
    )
    def show_values(selection: dict | None, _status: Any, shown: Any, rank: Any) -> tuple:
        started = time.perf_counter()
        return tensor_views.values_view(data, timings, started, selection, shown, rank)

    @app.callback(
        Output(ids.series_graph(), "figure"),
        Output(ids.SERIES_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SERIES_KEY, "data"),  # inside the page: fires when the page is shown
        Input(selectors.RANK_SELECT, "value"),
    )
    def show_series(selection: dict | None, _status: Any, shown: Any, rank: Any) -> tuple:
        started = time.perf_counter()
        return tensor_views.series_view(data, timings, started, selection, shown, rank)
