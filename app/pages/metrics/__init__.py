"""Metrics page (issue 16): the per-module metrics recorded with
``watch(model, metrics=...)`` (Taiyi's quantities, monitorch's lenses, user metrics).

One figure per metric, one line per module, a marker on every computed step and nowhere
else (each metric runs on its own schedule). The trial is the one the selection shows
(as on the other pages); further trials are overlaid. With a window of more than one
step, each window is a mean point with a band (std, min–max or quartiles), monitorch's
epoch aggregation. A vector metric (a covariance spectrum) has a second figure: its
vector at the step hovered (or clicked) on the first. A click on a point opens the
Modules or the Tensors page at that trial, step and module (found from the clicked
trace and point index: the figure carries no per-point data).

At real size (50-500 modules, issue 27): names in natural order (``h.2`` before
``h.10``); a view per figure: one plot (the default up to 10 modules), a plot per module
type with the layers as a colour scale (beyond), or a module × step heatmap grouped by
type; a search (words a module's name must hold, ``-word`` leaves out) on top of the
module filter; the outliers of a type named above its plots (``metric_groups``).

A distributed recording has a rank selector (hidden for one rank): one rank, or every
rank side by side (the default), a line per rank in the module's colour, since a rank
whose values drift is what one looks for. Metrics are not merged over ranks.

Live: the figures depend on the data status and the reads are cached per data version
of each trial (``metric_data``); a figure keeps its zoom across refreshes (uirevision).

The package: ``layout`` (ids and the pure builders), ``choices`` (pure pieces), ``data``
(the page's reads), ``views`` (what the cards, a figure and a spectrum show),
``card_callbacks`` and ``figure_callbacks``, ``callbacks`` (registers both). Every public name the single module had is importable from here.
"""

from __future__ import annotations

from ...controls.rank_selector import SIDE_BY_SIDE_LABEL
from ..page import Page
from .callbacks import register_callbacks
from .choices import (
    rank_for,
    shown_modules,
    trials_of,
    view_of,
    where_clicked,
    window_of,
)
from .data import frames_of
from .layout import (
    AUTO,
    BAND,
    BY_TYPE,
    CARDS,
    EXECUTION,
    FIGURE_HEIGHT,
    HEATMAP,
    INFO,
    LINES,
    LOG,
    MAX_FIGURES,
    METRICS,
    MODULES,
    NAME,
    OVERLAY,
    PATH,
    RANK,
    RANK_BOX,
    RANKS,
    SEARCH,
    SHOWN,
    TARGET,
    VIEW,
    WINDOW,
    card,
    card_id,
    layout,
)

PAGE = Page(PATH, NAME, layout, register_callbacks)

__all__ = [
    "AUTO",
    "BAND",
    "BY_TYPE",
    "CARDS",
    "EXECUTION",
    "FIGURE_HEIGHT",
    "HEATMAP",
    "INFO",
    "LINES",
    "LOG",
    "MAX_FIGURES",
    "METRICS",
    "MODULES",
    "NAME",
    "OVERLAY",
    "PAGE",
    "PATH",
    "RANK",
    "RANKS",
    "RANK_BOX",
    "SEARCH",
    "SHOWN",
    "SIDE_BY_SIDE_LABEL",
    "TARGET",
    "VIEW",
    "WINDOW",
    "card",
    "card_id",
    "frames_of",
    "layout",
    "rank_for",
    "register_callbacks",
    "shown_modules",
    "trials_of",
    "view_of",
    "where_clicked",
    "window_of",
]
