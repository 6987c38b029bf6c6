"""The Tensors page's callbacks: the graph's, the value views' and the rank selector."""

from __future__ import annotations

import dash
from dash import Input

from ... import ids, selectors
from ...data import AppData
from ...parts import AppParts
from .graph_callbacks import register_graph_callbacks
from .value_callbacks import register_value_callbacks


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    register_rank_selector(app, parts.data)
    register_graph_callbacks(app, parts)
    register_value_callbacks(app, parts)


def register_rank_selector(app: dash.Dash, data: AppData) -> None:
    """The rank selector follows the selected trial: shown with its ranks when it has
    several, the choice kept while it is one of them."""
    # The trial selector, not the selection store, is the input: the values and series
    # callbacks wait for this one whenever it may run (the rank is their input), and
    # the selection callback sends the trial only when it changed. A change of step or
    # statistic then reaches the series in one round trip after the selection's.
    selectors.RANKS.register(app, data.ranks, trial=Input(ids.selector("trial"), "value"))
