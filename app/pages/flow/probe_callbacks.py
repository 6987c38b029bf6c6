"""The Flow page's callbacks of the probe loop: the button that asks for a unit's row and
the state of that request, the input editor and Save. Their writes go through
``FlowData`` (the page's one write seam)."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, no_update

from ... import ids
from . import views
from .data import FlowData
from .layout import (
    CHAIN,
    EDIT,
    EDIT_STATUS,
    EDITOR,
    MODE,
    NOTE,
    ORIGIN,
    RESET,
    ROW_ASKED,
    ROW_BUTTON,
    ROW_STATUS,
    SAVE,
    SAVE_STATUS,
    SAVED,
    UNIT,
    Z_VALUE,
)
from .pieces import trial_of


def register_probe_callbacks(app: dash.Dash, reads: FlowData) -> None:
    @app.callback(
        Output(ROW_ASKED, "data"),
        Input(ROW_BUTTON, "n_clicks"),
        State(UNIT, "data"),
        State(CHAIN, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def ask_row(clicks: int | None, unit: dict | None, chain: str | None,
                selection: dict | None) -> Any:
        trial = trial_of(selection)
        if not clicks or trial is None:
            return no_update
        return views.ask_row(reads, trial, chain, unit)

    @app.callback(
        Output(ROW_STATUS, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ROW_ASKED, "data"),
    )
    def row_status(_tick: Any, asked: dict | None) -> Any:
        return views.row_status(reads, asked)

    @app.callback(
        Output(EDIT, "data"),
        Output(EDITOR, "figure"),
        Output(EDIT_STATUS, "children"),
        Input(CHAIN, "value"),
        Input(EDITOR, "clickData"),
        Input(RESET, "n_clicks"),
        State(EDIT, "data"),
        State(Z_VALUE, "value"),
        State(MODE, "value"),
        State(ids.SELECTION, "data"),
    )
    def edit(chain: str | None, click: Any, _reset: Any, state: Any, z: Any,
             mode: str | None, selection: dict | None) -> tuple:
        on_editor = dash.callback_context.triggered_id == EDITOR
        return views.edit_view(reads, trial_of(selection), chain, on_editor, click, state,
                               z, mode)

    @app.callback(
        Output(SAVED, "data"),
        Output(SAVE_STATUS, "children"),
        Output(ORIGIN, "value", allow_duplicate=True),
        Input(SAVE, "n_clicks"),
        State(EDIT, "data"),
        State(NOTE, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def save(clicks: int | None, state: Any, note: Any, selection: dict | None) -> tuple:
        return views.save_view(reads, trial_of(selection), clicks, state, note)
