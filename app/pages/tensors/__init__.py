"""Tensors page: selectors, the dependency graph, and the value views of the selection.

Three view callbacks, each listening to the selection store and the data status:
the graph (full figure only when the graph structure changes, else a highlight Patch),
the values (header, statistics table, per-neuron heatmap) and the series across steps
(the step marker is patched when only the step changed). Each keeps a small key of
what it shows and returns ``no_update`` when the key did not change.

A click on a node is highlighted in the browser at once (``comgra.graphClick`` in
assets/comgra.js, a clientside callback), which notes the highlight it drew in the
``GRAPH_SHOWN`` store; the graph callback sends its patch only when the selection the
server made differs from that (another role, or a node that cannot be selected).

The package: ``layout`` (ids and the pure layout), ``paint`` and ``value_views`` (pure
pieces), ``data`` (the page's reads beyond the selection's), ``views`` (what the graph,
the values and the series show), ``graph_callbacks`` and ``value_callbacks`` (thin
callbacks), ``callbacks`` (registers them all, and the rank selector). Every public name
the single module had is importable from here.
"""

from __future__ import annotations

from ..page import Page
from .callbacks import register_callbacks, register_rank_selector
from .data import build_paint, live_version
from .layout import (
    GRAPH_CONFIG,
    GRAPH_HEIGHT_PX,
    GRAPH_WIDTH_PX,
    NAME,
    PAINT_OFF,
    PAINT_STATISTIC,
    PAINT_STATISTICS,
    PAINT_TYPE,
    PATH,
    PAUSE_LABEL,
    PLAY,
    PLAY_INTERVAL_MS,
    PLAY_LABEL,
    PLAY_TICK,
    VIEW_CONFIG,
    VIEW_HEIGHT,
    card,
    layout,
    paint_bar,
    paint_statistic_options,
)
from .paint import is_painting, next_play_index, paint_aggregation, paint_label
from .value_views import is_complete, message, statistics_table, value_header

PAGE = Page(PATH, NAME, layout, register_callbacks)

__all__ = [
    "GRAPH_CONFIG", "GRAPH_HEIGHT_PX", "GRAPH_WIDTH_PX", "NAME", "PAGE", "PAINT_OFF",
    "PAINT_STATISTIC", "PAINT_STATISTICS", "PAINT_TYPE", "PATH", "PAUSE_LABEL", "PLAY",
    "PLAY_INTERVAL_MS", "PLAY_LABEL", "PLAY_TICK", "VIEW_CONFIG", "VIEW_HEIGHT",
    "build_paint", "card", "is_complete", "is_painting", "layout", "live_version",
    "message", "next_play_index", "paint_aggregation", "paint_bar", "paint_label",
    "paint_statistic_options", "register_callbacks", "register_rank_selector",
    "statistics_table", "value_header",
]
