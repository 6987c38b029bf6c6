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
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, ClientsideFunction, Input, Output, Patch, State, dcc, html, no_update

from comgra_like import vocabulary as vocab
from comgra_like.errors import ComgraError

from .. import figures, ids, selectors, views
from .. import selection as sel
from ..data import AppData
from ..graph_figure import (
    NodeValue,
    Paint,
    build_graph_figure,
    color_scale,
    highlight_updates,
    paint_updates,
)
from ..parts import AppParts
from .page import Page

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


# --- pure pieces ----------------------------------------------------------------------


def paint_statistic_options() -> list[dict[str, str]]:
    return [{"label": "nothing (kind colours)", "value": PAINT_OFF}] + [
        {"label": vocab.STATISTIC_LABELS.get(s, s), "value": s} for s in PAINT_STATISTICS
    ]


def paint_aggregation(current: Mapping[str, Any]) -> str:
    """The batch aggregation painted: the selected one, else the mean over the batch
    (a single sample's values are not painted; tensors without a batch dimension
    always show their own)."""
    aggregation = current.get("aggregation")
    return aggregation if aggregation in vocab.BATCH_AGGREGATIONS else vocab.BATCH_MEAN


def paint_label(statistic: str, recording_type: str) -> str:
    return (f"{vocab.STATISTIC_LABELS.get(statistic, statistic)} · "
            f"{sel.option_label('recording_type', recording_type)}")


def build_paint(
    data: AppData, current: Mapping[str, Any], statistic: str, recording_type: str
) -> Paint | None:
    """What the graph of the selected step shows painted by ``statistic`` of
    ``recording_type`` (None: no graph or no statistics). The colour scale spans every
    recorded step, so that a colour means the same value at every step."""
    trial, step, iteration = (current.get(f) for f in ("trial", "training_step", "iteration"))
    if trial is None or step is None or iteration is None:
        return None
    aggregation = paint_aggregation(current)
    values = data.node_values(trial, step, iteration, statistic, recording_type, aggregation)
    table = data.statistic_table(trial, statistic)
    if values is None or table is None:
        return None
    scale = data.cached(
        ("paint_scale", trial, data.trial_version(trial), statistic, recording_type,
         aggregation),
        lambda: color_scale(table.all_values(recording_type, aggregation)) or False,
    )
    return Paint(
        label=paint_label(statistic, recording_type),
        values={name: NodeValue(*v) for name, v in values.items()},
        scale=scale or None,
        step=step,
    )


def is_painting(statistic: str | None) -> bool:
    return statistic not in (None, PAINT_OFF) and statistic in PAINT_STATISTICS


def next_play_index(index: int | None, last: int | None) -> tuple[int, bool]:
    """▶ play: the slider position after ``index`` and whether to go on (it stops at the
    last recorded step)."""
    last = int(last or 0)
    position = min(last, int(index or 0) + 1)
    return position, position < last


def is_complete(current: Mapping[str, Any] | None) -> bool:
    return bool(current) and all(current.get(f) is not None for f in sel.CHAIN)


def value_header(
    current: Mapping[str, Any], type_of_execution: str | None, kind: str | None, shape: Any
) -> list:
    """The line above the value views: what exactly is shown."""
    items = [
        ("trial", current.get("trial")),
        ("step", current.get("training_step")),
        ("iteration", current.get("iteration")),
        ("type", type_of_execution),
        ("node", current.get("node")),
        ("role", current.get("role")),
        ("kind", kind),
        ("shape", figures.format_shape(shape) if shape is not None else None),
        ("recording", sel.option_label("recording_type", current.get("recording_type") or "")),
        ("of", sel.option_label("aggregation", current.get("aggregation") or "")),
    ]
    return [
        html.Span(
            [
                html.Span(label, className="hdr-label"),
                " ",
                html.Span(str(value), className="hdr-value"),
            ],
            className="hdr-item",
            **{"data-label": label},
        )
        for label, value in items
        if value not in (None, "")
    ]


def statistics_table(stats: Mapping[str, float]) -> html.Table:
    rows = figures.statistics_rows(stats)
    return html.Table(
        html.Tbody(
            [
                html.Tr([html.Th(label, scope="row"), html.Td(value)], **{"data-statistic": name})
                for name, label, value in rows
            ]
        ),
        className="table table-sm stats-table mb-0",
    )


def _message(text: str) -> html.Div:
    return html.Div(text, className="text-muted small p-2")


# --- callbacks ------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data, timings = parts.data, parts.timings
    register_rank_selector(app, data)

    @app.callback(
        Output(ids.dependency_graph(), "figure"),
        Output(ids.GRAPH_KEY, "data"),
        Output(ids.GRAPH_SHOWN, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.GRAPH_KEY, "data"),  # inside the page: fires when the page is shown
        Input(PAINT_STATISTIC, "value"),
        Input(PAINT_TYPE, "value"),
        Input(ids.DATA_STATUS, "data"),  # painted: new data can change values and scale
        State(ids.GRAPH_SHOWN, "data"),
    )
    def draw_graph(
        selection: dict | None,
        shown: dict | None,
        statistic: str | None,
        recording_type: str | None,
        _status: Any,
        drawn: dict | None,
    ) -> tuple:
        started = time.perf_counter()
        current = (selection or {}).get("current") or {}
        trial, step, iteration = (
            current.get("trial"),
            current.get("training_step"),
            current.get("iteration"),
        )
        if trial is None or step is None or iteration is None:
            message = "no recorded steps yet" if trial else "no trials yet"
            key = {"graph": None, "message": message}
            if shown == key:
                return no_update, no_update, no_update
            return figures.empty_figure(message), key, None
        model = views.graph_model(data, trial, step, iteration)
        if model is None:
            key = {"graph": None, "message": "graph not written yet"}
            return (
                (figures.empty_figure("the graph of this step is not written yet"), key, None)
                if shown != key
                else (no_update, no_update, no_update)
            )
        graph_key = [model.graph_hash, iteration]
        node, role = current.get("node"), current.get("role")
        key: dict[str, Any] = {"graph": graph_key, "node": node, "role": role}
        painting = is_painting(statistic)
        what: list = []
        if painting:
            what = [statistic, recording_type or vocab.FORWARD, paint_aggregation(current)]
            # another step, or new data in the trial: other colours (a Patch), same figure
            key["paint"] = {"what": what, "step": step, "version": data.trial_version(trial)}
        # what the figure shows: the browser draws a clicked node itself (comgra.graphClick)
        highlight = {"hash": model.graph_hash, "node": node, "role": role}
        if shown == key and drawn == highlight:
            return no_update, no_update, no_update
        same_figure = (
            shown
            and shown.get("graph") == graph_key
            and (shown.get("paint") or {}).get("what") == (key.get("paint") or {}).get("what")
        )
        if same_figure:
            updates: list = []
            if drawn != highlight:
                updates += highlight_updates(model, node, role)
            paint = None
            if painting and shown.get("paint") != key["paint"]:
                paint = build_paint(data, current, statistic, what[1])
                if paint is not None:
                    updates += paint_updates(model, paint)
            if not updates:
                return no_update, key, no_update
            patch = Patch()
            for trace, path, value in updates:
                target = patch["data"][trace]
                for part in path[:-1]:
                    target = target[part]
                target[path[-1]] = value
            timings.record("graph_paint" if paint is not None else "graph_patch",
                           time.perf_counter() - started)
            return patch, key, highlight if drawn != highlight else no_update
        paint = build_paint(data, current, statistic, what[1]) if painting else None
        figure = build_graph_figure(
            model,
            selected_node=node,
            selected_role=role,
            width_px=GRAPH_WIDTH_PX,
            height_px=GRAPH_HEIGHT_PX,
            paint=paint,
        )
        timings.record("graph_figure", time.perf_counter() - started)
        return figure, key, highlight

    # Inputs are the trial and aggregation selectors, not the selection store: the
    # graph callback waits for this one whenever it may run (PAINT_TYPE is its input),
    # and the selection callback sends a selector's value only when it changed.
    @app.callback(
        Output(PAINT_TYPE, "options"),
        Output(PAINT_TYPE, "value"),
        Output(PAINT_TYPE, "disabled"),
        Input(PAINT_STATISTIC, "value"),
        Input(ids.selector("trial"), "value"),
        Input(ids.selector("aggregation"), "value"),
        State(PAINT_TYPE, "value"),
        State(PAINT_TYPE, "options"),
    )
    def paint_types(
        statistic: str | None, trial: str | None, aggregation: str | None,
        chosen: str | None, listed: Any
    ) -> tuple:
        # The recording types the trial has; when the chosen one has no value of the
        # statistic at all (an update ratio of forward values), the first one that has.
        if not is_painting(statistic):
            return no_update, no_update, True
        current = {"trial": trial, "aggregation": aggregation}
        table = data.statistic_table(current.get("trial"), statistic) if current.get(
            "trial") else None
        if table is None:
            return no_update, no_update, False
        types = sorted(table.recording_types(), key=sel.recording_type_sort_key)
        aggregation = paint_aggregation(current)
        with_values = [t for t in types if table.has_values(t, aggregation)]
        value = chosen if chosen in with_values else (with_values or types or [chosen])[0]
        options = [{"label": sel.option_label("recording_type", t), "value": t} for t in types]
        return (
            options if options != listed else no_update,
            value if value != chosen else no_update,
            False,
        )

    @app.callback(
        Output(PLAY_TICK, "disabled"),
        Output(PLAY, "children"),
        Output(ids.step_slider(ALL), "value", allow_duplicate=True),
        Input(PLAY, "n_clicks"),
        Input(PLAY_TICK, "n_intervals"),
        State(PLAY_TICK, "disabled"),
        State(ids.step_slider(ALL), "value"),
        State(ids.step_slider(ALL), "max"),
        prevent_initial_call=True,
    )
    def play(_clicks: int, _ticks: int, stopped: bool, index: list, last: list) -> tuple:
        # ▶ moves the step slider (the selection follows it like a drag of the slider);
        # at the last step it stops, and ▶ there starts again from the first step.
        if not index:
            return True, PLAY_LABEL, []
        if dash.callback_context.triggered_id == PLAY:
            if not stopped:
                return True, PLAY_LABEL, [no_update] * len(index)
            start = 0 if (index[0] or 0) >= (last[0] or 0) else no_update
            return False, PAUSE_LABEL, [start] * len(index)
        if stopped:
            return no_update, no_update, [no_update] * len(index)
        position, more = next_play_index(index[0], last[0])
        return (not more, PAUSE_LABEL if more else PLAY_LABEL, [position] * len(index))

    app.clientside_callback(
        ClientsideFunction(namespace="comgra", function_name="graphClick"),
        Output(ids.dependency_graph(), "figure", allow_duplicate=True),
        Output(ids.GRAPH_SHOWN, "data", allow_duplicate=True),
        Input(ids.dependency_graph(), "clickData"),
        State(ids.dependency_graph(), "figure"),
        State(ids.SELECTION, "data"),
        State(ids.GRAPH_SHOWN, "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.VALUE_HEADER, "children"),
        Output(ids.STATS_TABLE, "children"),
        Output(ids.NEURONS, "figure"),
        Output(ids.VALUES_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.VALUES_KEY, "data"),  # inside the page: fires when the page is shown
        Input(selectors.RANK_SELECT, "value"),
    )
    def show_values(selection: dict | None, _status: Any, shown: Any, rank: Any) -> tuple:
        started = time.perf_counter()
        current = (selection or {}).get("current") or {}
        key = [current, _live_version(data, current), rank]
        if key == shown:
            return no_update, no_update, no_update, no_update
        info = (
            data.steps(current.get("trial")).get(current.get("training_step"))
            if current.get("trial")
            else None
        )
        toe = info.type_of_execution if info else None
        if not is_complete(current):
            text = (
                "Select a node in the graph."
                if current.get("training_step") is not None
                else "Nothing recorded yet."
            )
            return (
                value_header(current, toe, None, None),
                _message(text),
                figures.empty_figure(text, VIEW_HEIGHT),
                key,
            )
        node = data.graph_node(
            current["trial"], current["training_step"], current["iteration"], current["node"]
        )
        kind = node.kind if node is not None else None
        try:
            record = data.read_tensor(current, rank)
        except ComgraError as exc:
            return (
                value_header(current, toe, kind, None),
                _message(str(exc)),
                figures.empty_figure("not recorded", VIEW_HEIGHT),
                key,
            )
        figure = figures.neuron_figure(record.values, height=VIEW_HEIGHT)
        timings.record("values", time.perf_counter() - started)
        return (
            value_header(current, toe, record.kind or kind, record.shape),
            statistics_table(record.stats),
            figure,
            key,
        )

    @app.callback(
        Output(ids.series_graph(), "figure"),
        Output(ids.SERIES_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SERIES_KEY, "data"),  # inside the page: fires when the page is shown
        Input(selectors.RANK_SELECT, "value"),
    )
    def show_series(selection: dict | None, _status: Any, shown: Any, rank: Any) -> tuple:
        started = time.perf_counter()
        selection = selection or {}
        current = selection.get("current") or {}
        statistic = selection.get("statistic") or "mean"
        step = current.get("training_step")
        what = {f: current.get(f) for f in sel.CHAIN if f != "training_step"}
        key = {
            "what": what,
            "statistic": statistic,
            "version": data.trial_version(current.get("trial")),
            "step": step,
            "rank": rank,
        }
        if key == shown:
            return no_update, no_update
        if shown and {k: v for k, v in shown.items() if k != "step"} == {
            k: v for k, v in key.items() if k != "step"
        }:
            patch = Patch()
            patch["layout"]["shapes"] = figures.step_marker_shapes(step)
            return patch, key
        if not is_complete(current):
            return figures.empty_figure("", VIEW_HEIGHT), key
        try:
            frame = data.read_series(current, statistic, rank)
        except ComgraError as exc:
            return figures.empty_figure(str(exc), VIEW_HEIGHT), key
        figure = figures.series_figure(frame, statistic, step, height=VIEW_HEIGHT)
        figure["layout"]["uirevision"] = str(what)  # zoom survives step changes
        timings.record("series", time.perf_counter() - started)
        return figure, key


def register_rank_selector(app: dash.Dash, data: AppData) -> None:
    """The rank selector follows the selected trial: shown with its ranks when it has
    several, the choice kept while it is one of them."""

    # The trial selector, not the selection store, is the input: the values and series
    # callbacks wait for this one whenever it may run (the rank is their input), and
    # the selection callback sends the trial only when it changed. A change of step or
    # statistic then reaches the series in one round trip after the selection's.
    @app.callback(
        Output(selectors.RANK_SELECT, "options"),
        Output(selectors.RANK_SELECT, "value"),
        Output(selectors.RANK_BOX, "style"),
        Input(ids.selector("trial"), "value"),
        Input(ids.DATA_STATUS, "data"),
        State(selectors.RANK_SELECT, "value"),
        State(selectors.RANK_SELECT, "options"),
    )
    def rank_choices(trial: str | None, _status: Any, value: Any,
                     shown: list | None) -> tuple:
        options = selectors.rank_options(data.ranks(trial))
        chosen = selectors.rank_value(options, value)
        style = selectors.rank_box_style(options)
        return (options if options != (shown or []) else no_update,
                chosen if chosen != value else no_update, style)


def _live_version(data: AppData, current: Mapping[str, Any]) -> int:
    """The trial's data version if the shown step may still be filling, else 0.

    Only the newest step of a trial can get more rows; older steps never change, so
    their views do not re-render when new steps arrive.
    """
    trial, step = current.get("trial"), current.get("training_step")
    if trial is None or step is None:
        return data.trial_version(trial)
    steps = data.steps(trial)
    if steps and step == max(steps):
        return data.trial_version(trial)
    return 0


PAGE = Page(PATH, NAME, layout, register_callbacks)
