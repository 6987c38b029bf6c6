"""Notes page: the recorder's notes of the selected trial, oldest first, searchable."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, dcc, html, no_update

from comgra_like.errors import ComgraError

from .. import figures, ids
from ..parts import AppParts
from .page import Page

PATH = "/notes"
NAME = "Notes"


def layout() -> html.Div:
    return html.Div(
        [
            dcc.Input(
                id=ids.NOTES_SEARCH,
                type="search",
                debounce=0.3,
                placeholder="search notes…",
                className="form-control form-control-sm notes-search mb-2",
            ),
            html.Div(id=ids.NOTES_LIST, className="notes-list"),
            dcc.Store(id=ids.NOTES_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


def notes_list(notes: list[Any], query: str | None) -> html.Div:
    shown = figures.filter_notes(notes, query)
    summary = f"{len(shown)} of {len(notes)} notes" if query else f"{len(notes)} notes"
    items = [
        html.Li(
            [
                html.Span(
                    time.strftime("%H:%M:%S", time.localtime(n.wall_time)), className="note-time"
                ),
                html.Span(n.text, className="note-text"),
            ],
            className="note",
        )
        for n in shown
    ]
    return html.Div(
        [
            html.Div(summary, className="text-muted small mb-1"),
            html.Ol(items, className="notes", start=1),
        ]
    )


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(ids.NOTES_LIST, "children"),
        Output(ids.NOTES_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.NOTES_SEARCH, "value"),
        Input(ids.NOTES_KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_notes(selection: dict | None, _status: Any, query: str | None, shown: Any) -> tuple:
        trial = ((selection or {}).get("current") or {}).get("trial")
        if trial is None:
            return html.P("No trial selected.", className="text-muted"), None
        try:
            notes = data.notes(trial)
        except ComgraError as exc:
            return html.P(str(exc), className="text-danger"), None
        key = [trial, len(notes), query or ""]
        if key == shown:
            return no_update, no_update
        return notes_list(notes, query), key


PAGE = Page(PATH, NAME, layout, register_callbacks)
