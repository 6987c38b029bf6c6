"""Network page: the module tree of the selected trial with parameter names, shapes and counts."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dcc, html

from comgra_like.errors import ComgraError

from .. import figures, ids
from ..controls.shown import nothing, unchanged
from ..parts import AppParts
from .page import Page

PATH = "/network"
NAME = "Network"


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(id=ids.NETWORK_TABLE, className="network-table"),
            dcc.Store(id=ids.NETWORK_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


def network_table(modules: list[Any]) -> html.Div:
    """The module tree as a table; module rows show the total of their subtree."""
    rows = figures.module_rows(modules)
    if not rows:
        return html.P(
            "No modules recorded for this trial (track_module was not called yet).",
            className="text-muted",
        )
    total = sum(r["count"] for r in rows if r["kind"] == "module" and r["depth"] == 0)
    body = []
    for row in rows:
        indent = {"paddingLeft": f"{0.4 + 1.2 * row['depth']}rem"}
        if row["kind"] == "module":
            body.append(
                html.Tr(
                    [
                        html.Td(
                            row["name"].rsplit(".", 1)[-1],
                            style=indent,
                            className="fw-semibold",
                            title=row["full_name"],
                        ),
                        html.Td(""),
                        html.Td(f"{row['count']:,}", className="text-end fw-semibold"),
                        html.Td(
                            f"{row['own']:,}" if row["own"] else "", className="text-end text-muted"
                        ),
                    ],
                    className="module-row",
                )
            )
        else:
            body.append(
                html.Tr(
                    [
                        html.Td(row["name"], style=indent, title=row["full_name"]),
                        html.Td(row["shape"]),
                        html.Td(f"{row['count']:,}", className="text-end"),
                        html.Td(""),
                    ],
                    className="parameter-row",
                )
            )
    return html.Div(
        [
            html.P([html.Strong(f"{total:,}"), " parameters in total"], className="mb-2"),
            html.Table(
                [
                    html.Thead(
                        html.Tr(
                            [
                                html.Th("module / parameter"),
                                html.Th("shape"),
                                html.Th("parameters", className="text-end"),
                                html.Th("own", className="text-end"),
                            ]
                        )
                    ),
                    html.Tbody(body),
                ],
                className="table table-sm table-hover module-table",
            ),
        ]
    )


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(ids.NETWORK_TABLE, "children"),
        Output(ids.NETWORK_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.NETWORK_KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_network(selection: dict | None, _status: Any, shown: Any) -> tuple:
        trial = ((selection or {}).get("current") or {}).get("trial")
        if trial is None:
            return html.P("No trial selected.", className="text-muted"), None
        try:
            modules = data.modules(trial)
        except ComgraError as exc:
            return html.P(str(exc), className="text-danger"), None
        key = [trial, repr(modules)]
        if unchanged(key, shown):
            return nothing(2)
        return network_table(modules), key


PAGE = Page(PATH, NAME, layout, register_callbacks)
