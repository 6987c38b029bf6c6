"""Graphs page: the KPI curves of the selected trial, one figure per KPI group."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dcc, html

from comgra_like.errors import ComgraError

from .. import figures, ids
from ..controls.shown import nothing, unchanged
from ..parts import AppParts
from .page import Page

PATH = "/graphs"
NAME = "Graphs"


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(id=ids.KPI_GRAPHS, className="kpi-grid"),
            dcc.Store(id=ids.KPI_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


def kpi_graphs(frame: Any) -> Any:
    pairs = figures.kpi_figures(frame)
    if not pairs:
        return html.P(
            "No KPIs recorded for this trial (record_kpi_in_graph).", className="text-muted"
        )
    return [
        html.Div(
            dcc.Graph(
                figure=fig, config={"displaylogo": False}, id={"type": "kpi", "group": group}
            ),
            className="kpi-card",
        )
        for group, fig in pairs
    ]


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(ids.KPI_GRAPHS, "children"),
        Output(ids.KPI_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.KPI_KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_kpis(selection: dict | None, _status: Any, shown: Any) -> tuple:
        trial = ((selection or {}).get("current") or {}).get("trial")
        if trial is None:
            return html.P("No trial selected.", className="text-muted"), None
        try:
            frame = data.kpis(trial)
        except ComgraError as exc:
            return html.P(str(exc), className="text-danger"), None
        last = float(frame["wall_time"].max()) if len(frame) else None
        key = [trial, len(frame), last]
        if unchanged(key, shown):
            return nothing(2)
        return kpi_graphs(frame), key


PAGE = Page(PATH, NAME, layout, register_callbacks)
