"""The Metrics page's layout: its ids and the pure builders of the page and a metric's
card."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from comgra_like.vocabulary import ANY_TYPE

from ... import metric_figures as mfig
from ...controls.rank_selector import (
    EACH_RANK,
    EVERY_RANK,
    RankSelector,
)
from ...figures import empty_figure
from ..modules import PATH as MODULES_PATH
from ..tensors import PATH as TENSORS_PATH

PATH = "/metrics"
NAME = "Metrics"

# ids of this page
INFO = "metrics-info"
OVERLAY = "metrics-overlay"     # further trials, overlaid on the selection's trial
MODULES = "metrics-modules"     # module filter (empty: every module)
METRICS = "metrics-metrics"     # metric filter (empty: every metric)
EXECUTION = "metrics-execution"
WINDOW = "metrics-window"       # steps per aggregation window (1: the points as computed)
BAND = "metrics-band"
LOG = "metrics-log"
TARGET = "metrics-target"       # where a click leads: the Modules or the Tensors page
CARDS = "metrics-cards"
SHOWN = "metrics-shown"         # dcc.Store: the metrics the cards are for
RANK = "metrics-rank"           # one rank, or every rank side by side
RANK_BOX = "metrics-rank-box"
#: The rank selector: every rank side by side (``EVERY_RANK``, the default) or one rank.
RANKS = RankSelector(RANK, RANK_BOX, choices=(EVERY_RANK, EACH_RANK), default=EVERY_RANK,
                     default_without_ranks=EVERY_RANK)
SEARCH = "metrics-search"       # words a module's name must hold (-word: must not)
VIEW = "metrics-view"           # one plot, small multiples by type, or a heatmap
AUTO, LINES, BY_TYPE, HEATMAP = "auto", "lines", "types", "heatmap"

#: At most this many metric figures at once (the metric filter picks others).
MAX_FIGURES = 24
FIGURE_HEIGHT = 320


def card_id(kind: str, metric: Any) -> dict:
    """The ids of a metric's card: kind in graph, spectrum, key, traces (whose each trace
    of the graph is, for clicks and hovers)."""
    return {"type": f"metrics-{kind}", "metric": metric}


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Span("overlay trials", className="sel-label me-2"),
                    dcc.Dropdown(id=OVERLAY, options=[], value=[], multi=True,
                                 placeholder="none", className="sel-dropdown",
                                 style={"minWidth": "12rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("modules", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=MODULES, options=[], value=[], multi=True,
                                 placeholder="every module", className="sel-dropdown",
                                 style={"minWidth": "14rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("search", className="sel-label ms-3 me-2",
                              title="words every module shown must hold (h.1 mlp); "
                                    "-word leaves out the modules that hold it"),
                    dcc.Input(id=SEARCH, type="text", value="", debounce=True,
                              placeholder="e.g. h.1 mlp -c_proj",
                              style={"width": "11rem"}, persistence=True,
                              persistence_type="session"),
                    html.Span("metrics", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=METRICS, options=[], value=[], multi=True,
                                 placeholder="every metric", className="sel-dropdown",
                                 style={"minWidth": "14rem"}, persistence=True,
                                 persistence_type="session"),
                    html.Span("steps", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=EXECUTION, options=[], value=ANY_TYPE, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "9rem"},
                                 persistence=True, persistence_type="session"),
                    RANKS.layout(),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            html.Div(
                [
                    html.Span("window", className="sel-label me-2",
                              title="steps per aggregation window: 1 shows the points as "
                                    "computed, more draws the mean per window with a band"),
                    dcc.Input(id=WINDOW, type="number", min=1, step=1, value=1,
                              debounce=True, style={"width": "5rem"}, persistence=True,
                              persistence_type="session"),
                    html.Span("band", className="sel-label ms-3 me-2"),
                    dcc.RadioItems(id=BAND, options=[{"label": f" {b}", "value": b}
                                                     for b in mfig.BAND_CHOICES],
                                   value="std", inline=True, inputClassName="me-1",
                                   labelClassName="me-2", persistence=True,
                                   persistence_type="session"),
                    dcc.Checklist(id=LOG, options=[{"label": " log y", "value": "log"}],
                                  value=[], className="ms-3", inputClassName="me-1",
                                  persistence=True, persistence_type="session"),
                    html.Span("view", className="sel-label ms-3 me-2",
                              title="auto: one plot up to 10 modules, else a plot per "
                                    "module type with the layers as colours"),
                    dcc.RadioItems(id=VIEW, options=[
                        {"label": " auto", "value": AUTO},
                        {"label": " one plot", "value": LINES},
                        {"label": " by type", "value": BY_TYPE},
                        {"label": " heatmap", "value": HEATMAP}],
                        value=AUTO, inline=True, inputClassName="me-1",
                        labelClassName="me-2", persistence=True,
                        persistence_type="session"),
                    html.Span("a click opens", className="sel-label ms-3 me-2"),
                    dcc.RadioItems(id=TARGET, options=[
                        {"label": " Modules page", "value": MODULES_PATH},
                        {"label": " Tensors page", "value": TENSORS_PATH}],
                        value=MODULES_PATH, inline=True, inputClassName="me-1",
                        labelClassName="me-2", persistence=True,
                        persistence_type="session"),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            html.Div(id=INFO, className="small text-muted mb-2"),
            html.Div(id=CARDS, className="metrics-cards"),
            dcc.Store(id=SHOWN, storage_type="memory"),
        ],
        className="page-padded",
    )


def card(metric: str, vector: bool) -> html.Div:
    """One metric: its figure, and for a vector metric the vector at a step beside it."""
    graph = dcc.Graph(id=card_id("graph", metric),
                      figure=empty_figure("Loading…", FIGURE_HEIGHT),
                      config={"displaylogo": False},
                      style={"flex": "3 1 560px", "minWidth": "420px"})
    parts = [graph]
    if vector:
        parts.append(dcc.Graph(id=card_id("spectrum", metric),
                               figure=empty_figure("Loading…", FIGURE_HEIGHT),
                               config={"displaylogo": False},
                               style={"flex": "2 1 360px", "minWidth": "320px"}))
    parts.append(dcc.Store(id=card_id("key", metric), storage_type="memory"))
    parts.append(dcc.Store(id=card_id("traces", metric), storage_type="memory"))
    return html.Div(parts, className="metrics-card d-flex flex-wrap border rounded p-1 mb-2",
                    **{"data-metric": metric})

