"""Notes page: the recorder's notes of the selected trial, oldest first, searchable.

In a distributed recording each note says the rank that took it, and a rank filter
(hidden for one rank) shows every rank's notes or one rank's.
"""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, State, dcc, html, no_update

from comgra_like.errors import ComgraError

from .. import figures, ids
from ..controls.rank_selector import EACH_RANK, EVERY_RANK, RankSelector, box_style
from ..controls.shown import if_changed, unchanged
from ..parts import AppParts
from .page import Page

PATH = "/notes"
NAME = "Notes"
RANK = "notes-rank"
RANK_BOX = "notes-rank-box"
#: The rank filter: every rank's notes (``EVERY_RANK``, the default) or one rank's.
RANKS = RankSelector(RANK, RANK_BOX, choices=(EVERY_RANK, EACH_RANK), default=EVERY_RANK,
                     default_without_ranks=EVERY_RANK, every_label="every rank",
                     width="10rem")


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    dcc.Input(
                        id=ids.NOTES_SEARCH,
                        type="search",
                        debounce=0.3,
                        placeholder="search notes…",
                        className="form-control form-control-sm notes-search",
                    ),
                    RANKS.layout(),
                ],
                className="d-flex align-items-center mb-2",
            ),
            html.Div(id=ids.NOTES_LIST, className="notes-list"),
            dcc.Store(id=ids.NOTES_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


def ranks_of(notes: list[Any]) -> list[int]:
    """The ranks that took notes, sorted."""
    return sorted({int(getattr(n, "rank", 0)) for n in notes})


def notes_list(notes: list[Any], query: str | None, rank: Any = EVERY_RANK) -> html.Div:
    several = len(ranks_of(notes)) > 1
    if rank not in (None, EVERY_RANK):
        notes = [n for n in notes if getattr(n, "rank", 0) == rank]
    shown = figures.filter_notes(notes, query)
    summary = f"{len(shown)} of {len(notes)} notes" if query else f"{len(notes)} notes"
    items = [
        html.Li(
            [
                html.Span(
                    time.strftime("%H:%M:%S", time.localtime(n.wall_time)), className="note-time"
                ),
                *([html.Span(f"rank {n.rank}", className="note-rank badge bg-light text-dark "
                                                          "me-1")] if several else []),
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
        Output(RANK, "options"),
        Output(RANK, "value"),
        Output(RANK_BOX, "style"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.NOTES_SEARCH, "value"),
        Input(ids.NOTES_KEY, "data"),  # inside the page: fires when the page is shown
        Input(RANK, "value"),
        State(RANK, "options"),
    )
    def show_notes(selection: dict | None, _status: Any, query: str | None, shown: Any,
                   rank: Any, rank_shown: list | None) -> tuple:
        trial = ((selection or {}).get("current") or {}).get("trial")
        if trial is None:
            return (html.P("No trial selected.", className="text-muted"), None, no_update,
                    no_update, box_style([]))
        try:
            notes = data.notes(trial)
        except ComgraError as exc:
            return (html.P(str(exc), className="text-danger"), None, no_update, no_update,
                    box_style([]))
        # the ranks that took notes (not the trial's): the filter is this callback's
        options = RANKS.options(ranks_of(notes))
        chosen = RANKS.value(options, rank)
        key = [trial, len(notes), query or "", chosen]
        style = box_style(options)
        new_options = if_changed(options, rank_shown or [])
        new_rank = if_changed(chosen, rank)
        if unchanged(key, shown):
            return no_update, no_update, new_options, new_rank, style
        return notes_list(notes, query, chosen), key, new_options, new_rank, style


PAGE = Page(PATH, NAME, layout, register_callbacks)
