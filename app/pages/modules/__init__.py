"""Modules page (issue 15): what ``comgra_like.watch`` recorded, module by module.

Top: one level of the module graph (torchexplorer's explorer): the viewed module's
inputs and outputs, one node per child invocation, an edge where an autograd path leads
from one to the other. A click on a module picks it for the histograms and, when it has
modules inside, opens it; the breadcrumb goes back up. Below: one panel per picked
module, side by side, its histograms over time (io / io_grad / params / params_grad, the
role and the recording types chosen per panel: several gradient groups, e.g. a second
backward pass, together), optionally with the same module of a second trial; the
trials and groups of a panel side by side or overlaid in one plot (the first as
colours, the others as contour lines).

A module's outputs are nodes of the dependency graph (node = the invocation's id), so
"Tensors page" on a panel opens that node there; coming back, the page opens the level
of the node the Tensors page shows. Live: every view depends on the data status, and
the reads are cached per data version of the trial (``module_data``).

A distributed recording has a rank selector (hidden for one rank): the lowest rank by
default, any one rank, every rank side by side (one grid per rank in a panel, or
overlaid) or every rank merged (counts added; re-binned where the ranks' bin edges
differ, as each rank bins its own range: said in the panel's title).

The package: ``layout`` (ids and the pure builders), ``navigation`` and ``grids`` (pure
pieces), ``views`` (what a level and a panel show), ``level_callbacks`` (the module
graph) and ``histogram_callbacks`` (the panels, the rank selector), ``callbacks``
(registers both). Every public name the single module had is importable
from here.
"""

from __future__ import annotations

from ..page import Page
from .callbacks import register_callbacks
from .grids import (
    most_common_type,
    panel_grid,
    per_rank,
    rank_for,
    steps_of_execution,
)
from .layout import (
    COMPARE,
    CRUMBS,
    EXECUTION,
    GRAPH,
    INFO,
    KEY,
    LOG,
    MAX_PANELS,
    MODE,
    NAME,
    NO_TRIAL,
    OVERLAID,
    PANELS,
    PANELS_SIDE_BY_SIDE,
    PATH,
    PICK,
    RANK,
    RANK_BOX,
    RANKS,
    REPORT,
    VIEW,
    breadcrumb_bar,
    crumb_id,
    layout,
    panel,
    panel_id,
    report_view,
)
from .navigation import navigate

PAGE = Page(PATH, NAME, layout, register_callbacks)

#: The name the page's tests know the grid of a panel by.
_grid = panel_grid

__all__ = [
    "COMPARE",
    "CRUMBS",
    "EXECUTION",
    "GRAPH",
    "INFO",
    "KEY",
    "LOG",
    "MAX_PANELS",
    "MODE",
    "NAME",
    "NO_TRIAL",
    "OVERLAID",
    "PAGE",
    "PANELS",
    "PANELS_SIDE_BY_SIDE",
    "PATH",
    "PICK",
    "RANK",
    "RANKS",
    "RANK_BOX",
    "REPORT",
    "VIEW",
    "breadcrumb_bar",
    "crumb_id",
    "layout",
    "most_common_type",
    "navigate",
    "panel",
    "panel_grid",
    "panel_id",
    "per_rank",
    "rank_for",
    "register_callbacks",
    "report_view",
    "steps_of_execution",
]
