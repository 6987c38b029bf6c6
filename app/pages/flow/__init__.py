"""Flow page (issue 18): how gradient moves along a chain of nodes, and the probe loop.

For the trial of the top bar: an origin (the recorded run, or one edit of the input in
the history of probes), a step and a chain of stored flows. The Sankey draws the flows
between the units of consecutive nodes above a threshold (a slider, relative to the
largest link), units grouped in blocks when a node has more than the chosen number; the
summary says the threshold, the grouping and the links of each pair, and which pairs
are partial (only some units' rows computed). Beside it, when the origin is an edit,
the same chain before that edit. Below: the gradient at each node as heatmaps; a click
on a unit outlines the units it exchanges gradient with in the other nodes.

The probe loop: the input of the chain's first node for the sample is an editable
heatmap (a click toggles a cell between 0 and z, or paints z); Save stores it with
``comgra_like.format.flows.submit_input`` (no torch) for the process running
``comgra_like.probe.serve``; the page selects the new edit and shows its flows once that
process has stored them (the lists are read again at every refresh tick).

Rows on demand: a flow above the bound of entries is stored without its matrix. A click
on a unit of its target says so and offers to compute that unit's row; the button writes
a request (``comgra_like.format.flow_requests``, no torch) that the same serving process
answers with one backward pass, and the row joins the flow at the next tick (Sankey,
outline). The serving process's heartbeat tells the page whether anyone will answer:
when nobody serves the trial, the page says how to start a serving process.

The package: ``layout`` (ids and the pure layout), ``pieces`` (pure pieces), ``data``
(``FlowData``: the reads through the query API and the one write seam), ``views`` (what
each view shows), ``callbacks`` and ``probe_callbacks`` (thin callbacks). Every public
name the single module had is importable from here.
"""

from __future__ import annotations

from ..page import Page
from .callbacks import register_callbacks
from .data import FlowData
from .layout import (
    BEFORE,
    BEFORE_BOX,
    BEFORE_CHAIN,
    CHAIN,
    DEFAULT_SLIDER,
    EDIT,
    EDIT_STATUS,
    EDITOR,
    FOLLOWING,
    HEATMAPS,
    HISTORY,
    LISTS_KEY,
    MAX_UNITS,
    MAX_UNITS_CHOICES,
    MODE,
    NAME,
    NOTE,
    ORIGIN,
    PATH,
    PREVIOUS,
    RESET,
    ROW_ASKED,
    ROW_BOX,
    ROW_BUTTON,
    ROW_STATUS,
    ROW_TEXT,
    RUN,
    SANKEY,
    SAVE,
    SAVE_STATUS,
    SAVED,
    STEP,
    SUMMARY,
    THRESHOLD,
    UNIT,
    UNIT_INFO,
    Z_VALUE,
    layout,
)
from .pieces import (
    chain_label,
    chain_names,
    chains_of,
    clicked_point,
    history,
    newest_unseen,
    origin_of,
    probe_text,
    trial_of,
    unit_of_point,
)

PAGE = Page(PATH, NAME, layout, register_callbacks)

__all__ = [
    "BEFORE",
    "BEFORE_BOX",
    "BEFORE_CHAIN",
    "CHAIN",
    "DEFAULT_SLIDER",
    "EDIT",
    "EDITOR",
    "EDIT_STATUS",
    "FOLLOWING",
    "HEATMAPS",
    "HISTORY",
    "LISTS_KEY",
    "MAX_UNITS",
    "MAX_UNITS_CHOICES",
    "MODE",
    "NAME",
    "NOTE",
    "ORIGIN",
    "PAGE",
    "PATH",
    "PREVIOUS",
    "RESET",
    "ROW_ASKED",
    "ROW_BOX",
    "ROW_BUTTON",
    "ROW_STATUS",
    "ROW_TEXT",
    "RUN",
    "SANKEY",
    "SAVE",
    "SAVED",
    "SAVE_STATUS",
    "STEP",
    "SUMMARY",
    "THRESHOLD",
    "UNIT",
    "UNIT_INFO",
    "Z_VALUE",
    "FlowData",
    "chain_label",
    "chain_names",
    "chains_of",
    "clicked_point",
    "history",
    "layout",
    "newest_unseen",
    "origin_of",
    "probe_text",
    "register_callbacks",
    "trial_of",
    "unit_of_point",
]
