"""The Metrics page's callbacks: the cards' and the figures'."""

from __future__ import annotations

import dash

from ... import other_trials
from ...parts import AppParts
from .card_callbacks import register_card_callbacks
from .figure_callbacks import register_figure_callbacks


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    register_card_callbacks(app, parts)
    other_trials.register_callbacks(app, parts.data)
    register_figure_callbacks(app, parts)
