"""The rank selector of a distributed recording: one component for the Tensors, Modules,
Metrics and Notes pages, and the one set of values a rank choice can take.

A page makes one :class:`RankSelector` (its ids, which choices it offers in which order,
its default), puts :meth:`RankSelector.layout` into its layout and calls
:meth:`RankSelector.register` once with the function that lists the ranks of a trial.
The selector is hidden while the trial has one rank (or none), shown with its choices
when it has several, and keeps the choice while it is one of them.

The ids are plain strings given by the page (the pages' tests, stylesheets and links
know them), rather than the pattern-matching ids of Dash's all-in-one components, so the
component registers one callback per page that uses it, through this one function.

The box is never given one of Bootstrap's display classes (``d-flex``, ``d-block``,
...): they are ``!important`` and beat the ``display: none`` of :func:`box_style`,
which showed an empty "Ranks" dropdown on every recording made by one process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from .. import ids
from .shown import if_changed

#: Every rank: side by side (the Modules and Metrics pages, a ``rank`` column in the
#: reads) or, on the Notes page, every rank's notes.
EVERY_RANK = "all"
#: Every rank merged into one (the combined batch's statistics, the ranks' histogram
#: counts added).
MERGED = "merged"
#: In :attr:`RankSelector.choices`: each rank of the trial, in order.
EACH_RANK = "each"
#: The class of every rank box.
BOX_CLASS = "align-items-center"

MERGED_LABEL = "all ranks merged"
SIDE_BY_SIDE_LABEL = "all ranks side by side"


def box_style(options: Sequence[Any]) -> dict[str, str]:
    """A rank box's style: shown (a flex row) when there are ranks to choose from."""
    return {"display": "flex" if options else "none"}


def trial_of_selection(selection: Mapping | None) -> str | None:
    """The selection store's trial."""
    return ((selection or {}).get("current") or {}).get("trial")


@dataclass(frozen=True)
class RankSelector:
    """One page's rank selector.

    Attributes:
        select_id, box_id: the dropdown's id and the id of the box around it.
        choices: the options in order: :data:`EACH_RANK` (``rank 0``, ``rank 1``, ...),
            :data:`EVERY_RANK`, :data:`MERGED`.
        default: the value when the kept one is not an option (None: the first option).
        default_without_ranks: the value while the trial has a single rank.
        every_label: the label of :data:`EVERY_RANK`.
        label: the text before the dropdown; inline: in a row of controls (a span with
            the row's label style) rather than a block of its own.
        width: the dropdown's minimum width.
    """

    select_id: str
    box_id: str
    choices: tuple[str, ...]
    default: str | None = None
    default_without_ranks: str | None = None
    every_label: str = SIDE_BY_SIDE_LABEL
    label: str = "ranks"
    inline: bool = True
    width: str = "13rem"

    def layout(self) -> html.Div | html.Span:
        """The labelled dropdown, hidden until the trial has several ranks."""
        if self.inline:
            return html.Span(
                [html.Span(self.label, className="sel-label ms-3 me-2"),
                 dcc.Dropdown(id=self.select_id, options=[],
                              value=self.default_without_ranks, clearable=False,
                              className="sel-dropdown", style={"minWidth": self.width})],
                id=self.box_id, className=BOX_CLASS, style=box_style([]))
        return html.Div(
            [html.Span(self.label, className="me-2"),
             dcc.Dropdown(id=self.select_id, options=[], value=self.default_without_ranks,
                          clearable=False, searchable=True,
                          className="sel-dropdown rank-dropdown",
                          style={"minWidth": self.width})],
            id=self.box_id, className=BOX_CLASS, style=box_style([]))

    def options(self, ranks: Sequence[int]) -> list[dict[str, Any]]:
        """The options for a trial of ``ranks``: none for a single rank."""
        if len(ranks) <= 1:
            return []
        out: list[dict[str, Any]] = []
        for choice in self.choices:
            if choice == EACH_RANK:
                out += [{"label": f"rank {r}", "value": int(r)} for r in ranks]
            elif choice == EVERY_RANK:
                out.append({"label": self.every_label, "value": EVERY_RANK})
            elif choice == MERGED:
                out.append({"label": MERGED_LABEL, "value": MERGED})
        return out

    def value(self, options: Sequence[Mapping[str, Any]], value: Any) -> Any:
        """The chosen value kept while it is an option, else the default."""
        values = [o["value"] for o in options]
        if value in values:
            return value
        if not values:
            return self.default_without_ranks
        return self.default if self.default is not None else values[0]

    def register(self, app: dash.Dash, ranks_of: Callable[[str | None], Sequence[int]],
                 trial: Input | None = None) -> None:
        """Adds the callback that follows the trial: ``ranks_of(trial)`` lists its ranks;
        ``trial`` is the input that names it (default: the selection store; its
        ``data`` is a selection, any other input's value is the trial id)."""
        source = trial if trial is not None else Input(ids.SELECTION, "data")
        from_selection = trial is None

        @app.callback(
            Output(self.select_id, "options"),
            Output(self.select_id, "value"),
            Output(self.box_id, "style"),
            source,
            Input(ids.DATA_STATUS, "data"),
            State(self.select_id, "value"),
            State(self.select_id, "options"),
        )
        def rank_choices(named: Any, _status: Any, value: Any, shown: list | None) -> tuple:
            chosen_trial = trial_of_selection(named) if from_selection else named
            options = self.options(ranks_of(chosen_trial))
            chosen = self.value(options, value)
            return (if_changed(options, shown or []), if_changed(chosen, value),
                    box_style(options))
