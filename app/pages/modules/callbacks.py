"""The Modules page's callbacks: the module graph's and the histogram panels'."""

from __future__ import annotations

import dash

from ... import other_trials
from ...parts import AppParts
from .histogram_callbacks import register_histogram_callbacks
from .level_callbacks import register_level_callbacks
from .optimizer_callbacks import register_optimizer_callbacks


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    register_level_callbacks(app, parts)
    other_trials.register_callbacks(app, parts.data)
    register_histogram_callbacks(app, parts)
    register_optimizer_callbacks(app, parts)
