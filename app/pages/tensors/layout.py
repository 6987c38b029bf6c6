"""The Tensors page's layout: its ids, the plot settings and the pure layout builders
(the selector panel is ``selectors.selector_panel``; the callbacks fill the controls)."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from comgra_like import vocabulary as vocab

from ... import figures, ids, selectors
from ... import selection as sel

PATH = "/"
NAME = "Tensors"

GRAPH_CONFIG = {
    "displaylogo": False,
    "scrollZoom": True,
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toImage"],
    # plotly takes two clicks within 500 ms (anywhere) for a double click, which resets
    # the zoom: clicking one node and then another quickly lost the zoom
    "doubleClickDelay": 300,
}
# Value views: no mode bar (it would cover the legend); scroll to zoom, double-click resets.
VIEW_CONFIG = {"displaylogo": False, "displayModeBar": False, "scrollZoom": True}
VIEW_HEIGHT = None  # the CSS (.view-graph) sizes the value views
# The plot size the graph figure is laid out for (labels and markers scale with it).
GRAPH_WIDTH_PX = 960
GRAPH_HEIGHT_PX = 420

# The painted graph: its controls (ids of this page only)
PAINT_STATISTIC = "paint-statistic"
PAINT_TYPE = "paint-recording-type"
PLAY = "paint-play"
PLAY_TICK = "paint-play-tick"
PAINT_OFF = "off"
#: Statistics the graph can be painted with (the number of values does not change).
PAINT_STATISTICS: tuple[str, ...] = sel.SERIES_STATISTICS
#: Milliseconds between the steps of ▶ play.
PLAY_INTERVAL_MS = 700
PLAY_LABEL = "▶\ufe0e play"
PAUSE_LABEL = "❚❚ pause"


def card(title: Any, body: Any, class_name: str = "") -> html.Div:
    return html.Div(
        [html.Div(title, className="view-title"), html.Div(body, className="view-body")],
        className=f"view-card {class_name}".strip(),
    )


def layout() -> html.Div:
    """The page layout (controls are filled by the selection callback)."""
    statistic = dcc.Dropdown(
        id=ids.selector("statistic"),
        options=[{"label": s, "value": s} for s in sel.SERIES_STATISTICS],
        value="mean",
        clearable=False,
        searchable=False,
        className="sel-dropdown statistic-dropdown",
    )
    return html.Div(
        [
            html.Aside(selectors.selector_panel(), className="tensors-left"),
            html.Section(
                [
                    paint_bar(),
                    html.Div(
                        dcc.Graph(
                            id=ids.dependency_graph(),
                            figure=figures.empty_figure("loading the dependency graph…"),
                            config=GRAPH_CONFIG,
                            responsive=True,
                            className="dependency-graph",
                        ),
                        id=ids.GRAPH_CONTAINER,
                        className="graph-box",
                    ),
                    html.Div(id=ids.VALUE_HEADER, className="value-header"),
                    selectors.rank_selector(),
                    html.Div(
                        [
                            card("Statistics", html.Div(id=ids.STATS_TABLE), "stats-card"),
                            card(
                                "Values",
                                dcc.Graph(
                                    id=ids.NEURONS,
                                    config=VIEW_CONFIG,
                                    responsive=True,
                                    figure=figures.empty_figure(""),
                                    className="view-graph",
                                    style={"height": "var(--view-height)"},
                                ),
                                "neurons-card",
                            ),
                            card(
                                html.Div(
                                    [html.Span("Across steps", className="me-2"), statistic],
                                    className="d-flex align-items-center",
                                ),
                                dcc.Graph(
                                    id=ids.series_graph(),
                                    config=VIEW_CONFIG,
                                    responsive=True,
                                    figure=figures.empty_figure(""),
                                    className="view-graph",
                                    style={"height": "var(--view-height)"},
                                ),
                                "series-card",
                            ),
                        ],
                        className="value-views",
                    ),
                    dcc.Store(id=ids.GRAPH_KEY, storage_type="memory"),
                    dcc.Store(id=ids.GRAPH_SHOWN, storage_type="memory"),
                    dcc.Store(id=ids.VALUES_KEY, storage_type="memory"),
                    dcc.Store(id=ids.SERIES_KEY, storage_type="memory"),
                ],
                className="tensors-main",
            ),
        ],
        className="tensors-page",
    )


def paint_bar() -> html.Div:
    """Paint the graph by a statistic (off by default; the choice lasts the browser
    session), of which recording type, and ▶ play through the steps."""
    return html.Div(
        [
            html.Label("Paint nodes by", htmlFor=PAINT_STATISTIC, className="sel-label me-2"),
            dcc.Dropdown(
                id=PAINT_STATISTIC,
                options=paint_statistic_options(),
                value=PAINT_OFF,
                clearable=False,
                searchable=False,
                persistence=True,
                persistence_type="session",
                className="sel-dropdown paint-dropdown",
            ),
            html.Label("of", htmlFor=PAINT_TYPE, className="sel-label mx-2"),
            dcc.Dropdown(
                id=PAINT_TYPE,
                options=[{"label": "forward", "value": vocab.FORWARD}],
                value=vocab.FORWARD,
                clearable=False,
                searchable=False,
                persistence=True,
                persistence_type="session",
                disabled=True,
                className="sel-dropdown paint-dropdown",
            ),
            html.Button(
                PLAY_LABEL,
                id=PLAY,
                n_clicks=0,
                className="btn btn-outline-secondary btn-sm ms-2 paint-play",
                title="step through the recorded steps (the step slider moves)",
            ),
            dcc.Interval(id=PLAY_TICK, interval=PLAY_INTERVAL_MS, disabled=True),
        ],
        className="paint-bar d-flex align-items-center",
    )


def paint_statistic_options() -> list[dict[str, str]]:
    return [{"label": "nothing (kind colours)", "value": PAINT_OFF}] + [
        {"label": vocab.STATISTIC_LABELS.get(s, s), "value": s} for s in PAINT_STATISTICS
    ]

