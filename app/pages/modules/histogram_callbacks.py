"""The histogram panels' callbacks: the rank selector, the panels of the picked modules
and each panel's figure."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import MATCH, Input, Output, State, html, no_update

from ... import ids
from ...parts import AppParts
from . import views
from .layout import (
    COMPARE,
    EXECUTION,
    LOG,
    MODE,
    PANELS,
    PICK,
    RANK,
    RANKS,
    panel,
    panel_id,
)


def register_histogram_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    RANKS.register(app, lambda trial: data.ranks(trial) if trial in data.trial_ids() else [])

    @app.callback(Output(PANELS, "children"), Input(PICK, "value"))
    def show_panels(picked: list | None) -> list:
        if not picked:
            return [html.P("Click a module in the graph to see its histograms over time.",
                           className="text-muted")]
        return [panel(m) for m in picked]

    @app.callback(
        Output(panel_id("graph", MATCH), "figure"),
        Output(panel_id("role", MATCH), "options"),
        Output(panel_id("role", MATCH), "value"),
        Output(panel_id("what", MATCH), "options"),
        Output(panel_id("groups", MATCH), "options"),
        Output(panel_id("groups", MATCH), "value"),
        Output(panel_id("key", MATCH), "data"),
        Input(panel_id("what", MATCH), "value"),
        Input(panel_id("role", MATCH), "value"),
        Input(panel_id("groups", MATCH), "value"),
        Input(COMPARE, "value"),
        Input(MODE, "value"),
        Input(EXECUTION, "value"),
        Input(LOG, "value"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(RANK, "value"),
        State(panel_id("key", MATCH), "data"),
    )
    def show_histograms(what: str | None, role: str | None, groups: list | None,
                        compare: str | None, mode: str | None, execution: str | None,
                        log: list | None, _status: Any, selection: dict | None,
                        rank: Any, shown: Any) -> tuple:
        module = dash.callback_context.outputs_list[0]["id"]["module"]
        started = time.perf_counter()
        result = views.histograms_view(data, module, what, role, groups, compare, mode,
                                       execution, log, selection, rank, shown)
        if result[0] is not no_update:
            parts.timings.record("modules.histograms", time.perf_counter() - started)
        return result
