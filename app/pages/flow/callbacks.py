"""The Flow page's callbacks of the chain: the lists (origins, steps, chains; read again
at every tick), the history's buttons, the Sankey, and the heatmaps with a picked unit.
Each parses its inputs, calls one function of ``views`` and returns."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import Input, Output, State, no_update

from ... import ids, other_trials
from ...parts import AppParts
from . import views
from .data import FlowData
from .layout import (
    BEFORE,
    BEFORE_BOX,
    BEFORE_CHAIN,
    CHAIN,
    FOLLOWING,
    HEATMAPS,
    HISTORY,
    LISTS_KEY,
    MAX_UNITS,
    ORIGIN,
    PREVIOUS,
    ROW_BOX,
    ROW_TEXT,
    SANKEY,
    STEP,
    SUMMARY,
    THRESHOLD,
    UNIT,
    UNIT_INFO,
)
from .pieces import trial_of
from .probe_callbacks import register_probe_callbacks


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    reads = FlowData(parts)
    register_chain_callbacks(app, parts, reads)
    other_trials.register_callbacks(app, parts.data)
    register_probe_callbacks(app, reads)


def register_chain_callbacks(app: dash.Dash, parts: AppParts, reads: FlowData) -> None:
    @app.callback(
        Output(ORIGIN, "options"),
        Output(ORIGIN, "value"),
        Output(STEP, "options"),
        Output(STEP, "value"),
        Output(CHAIN, "options"),
        Output(CHAIN, "value"),
        Output(BEFORE_CHAIN, "data"),
        Output(HISTORY, "children"),
        Output(LISTS_KEY, "data"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.SELECTION, "data"),
        Input(ORIGIN, "value"),
        Input(STEP, "value"),
        Input(CHAIN, "value"),
        State(LISTS_KEY, "data"),
    )
    def lists(_tick: Any, selection: dict | None, origin: str | None, step: int | None,
              chain: str | None, shown: Any) -> tuple:
        chain = chain if isinstance(chain, str) else None  # the browser's: a key below
        return views.lists_view(reads, trial_of(selection), origin, step, chain, shown)

    # The history's buttons and Save set the origin in callbacks of their own: a click
    # sent while a tick's call of ``lists`` is on its way would be dropped with it.
    @app.callback(
        Output(ORIGIN, "value", allow_duplicate=True),
        Input(PREVIOUS, "n_clicks"),
        Input(FOLLOWING, "n_clicks"),
        State(ORIGIN, "value"),
        State(ORIGIN, "options"),
        prevent_initial_call=True,
    )
    def step_history(_p: Any, _f: Any, origin: str | None, options: list | None) -> Any:
        values = [o.get("value") for o in options if isinstance(o, Mapping)] if isinstance(
            options, list) else []
        if origin not in values:
            return no_update
        at = values.index(origin)
        triggered = set(dash.callback_context.triggered_prop_ids)
        if f"{PREVIOUS}.n_clicks" in triggered and at > 0:
            return values[at - 1]
        if f"{FOLLOWING}.n_clicks" in triggered and at < len(values) - 1:
            return values[at + 1]
        return no_update

    @app.callback(
        Output(SANKEY, "figure"),
        Output(BEFORE, "figure"),
        Output(BEFORE_BOX, "style"),
        Output(SUMMARY, "children"),
        Input(CHAIN, "value"),
        Input(BEFORE_CHAIN, "data"),
        Input(THRESHOLD, "value"),
        Input(MAX_UNITS, "value"),
        Input(HISTORY, "children"),
        Input(LISTS_KEY, "data"),  # rows served on demand join the chain
        State(ids.SELECTION, "data"),
    )
    def show_sankey(chain: str | None, before: str | None, slider: float | None,
                    max_units: int | None, history_text: Any, _lists: Any,
                    selection: dict | None) -> tuple:
        started = time.perf_counter()
        result = views.sankey_view(reads, trial_of(selection), chain, before, slider,
                                   max_units, history_text)
        parts.timings.record("flow.sankey", time.perf_counter() - started)
        return result

    @app.callback(
        Output(UNIT, "data"),
        Input(HEATMAPS, "clickData"),
        State(CHAIN, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def pick_unit(click: Any, chain: str | None, selection: dict | None) -> Any:
        return views.picked_unit(reads, trial_of(selection), chain, click)

    @app.callback(
        Output(HEATMAPS, "figure"),
        Output(UNIT_INFO, "children"),
        Output(ROW_BOX, "style"),
        Output(ROW_TEXT, "children"),
        Input(CHAIN, "value"),
        Input(UNIT, "data"),
        Input(LISTS_KEY, "data"),  # a row served on demand: outline with it
        State(ids.SELECTION, "data"),
    )
    def show_heatmaps(chain: str | None, unit: dict | None, _lists: Any,
                      selection: dict | None) -> tuple:
        return views.heatmaps_view(reads, trial_of(selection), chain, unit)
