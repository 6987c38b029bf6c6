"""The Metrics page's cards callback (which metrics have a card, the filters' options)
and its rank selector."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, State

from ... import ids
from ...parts import AppParts
from . import views
from .layout import (
    CARDS,
    EXECUTION,
    INFO,
    METRICS,
    MODULES,
    OVERLAY,
    RANK,
    RANKS,
    SEARCH,
    SHOWN,
)


def register_card_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

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
        return views.cards_view(data, parts.timings, started, selection, overlay, chosen, rank,
                                search, picked_modules, execution, shown)

    RANKS.register(app, lambda trial: data.ranks(trial) if trial in data.trial_ids() else [])
