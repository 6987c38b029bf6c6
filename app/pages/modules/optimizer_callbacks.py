"""A histogram panel's optimizer state (``watch(optimizer=)``): shown under the panel's
histograms when the trial has it, hidden otherwise (app/optimizer_figures.py)."""

from __future__ import annotations

from typing import Any

import dash
from dash import MATCH, Input, Output, State

from ... import ids
from ...optimizer_figures import optimizer_figure, optimizer_state
from ...parts import AppParts
from .layout import panel_id

HIDDEN = {"display": "none"}


def register_optimizer_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(panel_id("optimizer", MATCH), "figure"),
        Output(panel_id("optimizer", MATCH), "style"),
        Input(panel_id("key", MATCH), "data"),
        State(ids.SELECTION, "data"),
    )
    def show_optimizer_state(_key: Any, selection: dict | None) -> tuple:
        module = dash.callback_context.outputs_list[0]["id"]["module"]
        trial = ((selection or {}).get("current") or {}).get("trial")
        frame = optimizer_state(data, trial, module)
        if frame.empty:
            return dash.no_update, HIDDEN
        return optimizer_figure(frame, module), {}
