"""Flight page (issue 30): what the flight recorder wrote for the selected trial.

The trial's triggers (kind, step, tensor, value, when); for the chosen trigger its
window, which holds EVERY step before the trigger where the regular recording kept one
in N: a tensor's statistic per step over the window with the regularly recorded steps
of the same tensor beside it (:func:`app.flight_figures.window_figure`), the tensors
that moved first (the trigger's finding, ``analysis/flight.py``), and a player that
paints the dependency graph with the statistic at each step of the window (the Tensors
page's painted graph, ``graph_figure.Paint``), a step at a time or played.

``/flight?trial=T&trigger=NAME`` opens trial ``T`` at trigger ``NAME`` (the Findings
page links a flight finding there). Reads: ``app/flight_data.py``; figures:
``app/flight_figures.py``.

The package: ``layout`` (ids, links, the pure layout and pieces), ``views`` (what each
view shows from the reads and the builders), ``callbacks`` (thin). Every public name the
single module had is importable from here.
"""

from __future__ import annotations

from ... import flight_data as fd  # noqa: F401  (flight.fd, as the single module had it)
from ..page import Page
from .callbacks import register_callbacks
from .layout import (
    BODY,
    CHART,
    CHART_HEIGHT,
    CHART_KEY,
    EMPTY,
    GRAPH,
    GRAPH_HEIGHT_PX,
    GRAPH_KEY,
    GRAPH_NOTE,
    GRAPH_WIDTH_PX,
    KEY,
    MOVERS,
    NAME,
    PATH,
    PAUSE_LABEL,
    PLAY,
    PLAY_LABEL,
    PLAY_MS,
    PLAY_TICK,
    ROLE,
    SLIDER,
    STATISTIC,
    STEP_SUMMARY,
    STEP_TEXT,
    TENSOR,
    TITLE,
    TRIAL_PARAMETER,
    TRIGGER,
    TRIGGER_PARAMETER,
    TRIGGER_ROW,
    TRIGGERS,
    USAGE,
    empty_state,
    layout,
    link,
    movers_text,
    trigger_row_id,
    triggers_table,
    url_wish,
)
from .views import start_step

PAGE = Page(PATH, NAME, layout, register_callbacks)

__all__ = [
    "BODY", "CHART", "CHART_HEIGHT", "CHART_KEY", "EMPTY", "GRAPH", "GRAPH_HEIGHT_PX",
    "GRAPH_KEY", "GRAPH_NOTE", "GRAPH_WIDTH_PX", "KEY", "MOVERS", "NAME", "PAGE", "PATH",
    "PAUSE_LABEL", "PLAY", "PLAY_LABEL", "PLAY_MS", "PLAY_TICK", "ROLE", "SLIDER",
    "STATISTIC", "STEP_SUMMARY", "STEP_TEXT", "TENSOR", "TITLE", "TRIAL_PARAMETER",
    "TRIGGER", "TRIGGERS", "TRIGGER_PARAMETER", "TRIGGER_ROW", "USAGE", "empty_state",
    "layout", "link", "movers_text", "register_callbacks", "start_step", "trigger_row_id",
    "triggers_table", "url_wish",
]
