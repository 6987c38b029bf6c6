"""Compare page: the trials of a group side by side (issue 31).

The trials table (``Group.read_trials``: status, steps, config, the last KPI values,
optionally the findings by severity) with native sort, filter and paging plus a search
over every column; the trials ticked in it are compared: one quantity (a KPI, a
statistic of a tensor, a per-module metric) over the training steps, one line per trial
or, grouped by a config key, each group's mean with a band (std or min–max), smoothed by
an exponential moving average; for the first two ticked trials the first divergence
(``analysis.first_divergence``) with links that open the Tensors page at the named
tensor of either trial, the first trial's graph painted by the relative difference of the
two at a step both recorded (a statistic and recording type chosen beside it; at first
the divergence's), and a link to the Modules page with the second trial beside the
first (``/modules?compare=<trial>``; the Tensors page shows one trial at a time).

Reads go through ``app/compare_data.py``; figures and table rows are built by
``app/compare_figures.py``.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import dash
from dash import Input, Output, State, dash_table, dcc, html, no_update

from comgra_like.vocabulary import FORWARD, STATISTIC_LABELS

from .. import compare_data as data_of
from .. import compare_figures as cf
from .. import ids
from .. import selection as sel
from ..controls.shown import if_changed
from ..data import AppData
from ..graph_figure import build_graph_figure
from ..parts import AppParts
from . import modules
from .page import Page
from .tensors import PATH as TENSORS_PATH

PATH = "/compare"
NAME = "Compare"

# ids of this page
TABLE = "compare-table"
SEARCH = "compare-search"
FINDINGS = "compare-findings"
SUMMARY = "compare-summary"
KIND = "compare-kind"
QUANTITY = "compare-quantity"
STATISTIC = "compare-statistic"
SMOOTHING = "compare-smoothing"
GROUP_BY = "compare-group-by"
BAND = "compare-band"
LOG_Y = "compare-log-y"
OVERLAY = "compare-overlay"  # the overlay's dcc.Graph, made when there is a figure
OVERLAY_BOX = "compare-overlay-box"  # holds it, or a message
OVERLAY_DRAWN = "compare-overlay-drawn"  # dcc.Store: whether the box holds the graph
DIVERGENCE = "compare-divergence"
DIFF_GRAPH = "compare-difference-graph"  # made when there is a graph to paint
DIFF_BOX = "compare-difference-box"  # holds it
DIFF_DRAWN = "compare-difference-drawn"  # dcc.Store: whether the box holds the graph
DIFF_PANEL = "compare-difference"  # the controls, the title and the painted graph
DIFF_STEP = "compare-difference-step"
DIFF_STATISTIC = "compare-difference-statistic"
DIFF_TYPE = "compare-difference-type"
DIFF_TITLE = "compare-difference-title"
DIFF_DEFAULTS = "compare-difference-defaults"  # dcc.Store: the pair and defaults last set
PLACES = "compare-places"  # dcc.Store: where the divergence is, in trial A and B
OPEN_A, OPEN_B = "compare-open-a", "compare-open-b"
OPEN_MODULES = "compare-open-modules"
LINK_NOTE = "compare-link-note"
COUNTING = "compare-counting-tick"  # dcc.Interval: on while findings are being counted
TABLE_KEY = "compare-table-key"  # dcc.Store: what the table shows (trials' data versions, ...)
TICK_TRIALS = "Tick trials in the table."
HIDDEN = {"display": "none"}
NO_GROUPING = "__none__"  # names starting with "__" are reserved: never a config key
#: The table waits at most this many seconds for findings not counted yet; the rest
#: are counted in the background (app/findings_scan.py) and shown at the next ticks.
COUNT_WAIT = 0.3
#: Milliseconds between the table's looks at the background count while it runs.
COUNT_TICK_MS = 1000
#: The query parameter of the Modules page's second trial.
COMPARE_PARAMETER = "compare"


def _label(text: str, first: bool = False) -> html.Span:
    return html.Span(text, className=f"sel-label {'' if first else 'ms-3 '}me-2")


def layout() -> html.Div:
    session = {"persistence": True, "persistence_type": "session"}
    controls = html.Div([
        _label("Show", True),
        dcc.RadioItems(id=KIND, options=[{"label": " KPI", "value": data_of.KPI},
                                         {"label": " tensor statistic", "value": data_of.TENSOR},
                                         {"label": " module metric", "value": data_of.METRIC}],
                       value=data_of.KPI, inline=True, inputClassName="me-1",
                       labelClassName="me-2", **session),
        dcc.Dropdown(id=QUANTITY, options=[], value=None, clearable=False,
                     placeholder="tick trials in the table", className="sel-dropdown",
                     style={"minWidth": "22rem"}),
        dcc.Dropdown(id=STATISTIC, options=list(sel.SERIES_STATISTICS), value="mean",
                     clearable=False, className="sel-dropdown ms-2",
                     style={"minWidth": "7rem"}, **session),
        _label("smoothing"),
        html.Div(dcc.Slider(id=SMOOTHING, min=0, max=0.99, step=0.01, value=0,
                            marks={0: "0", 0.6: "0.6", 0.9: "0.9", 0.99: ".99"},
                            tooltip={"placement": "bottom"}, **session),
                 style={"width": "12rem"}),
        _label("group by"),
        dcc.Dropdown(id=GROUP_BY, options=[{"label": "no grouping", "value": NO_GROUPING}],
                     value=NO_GROUPING, clearable=False, className="sel-dropdown",
                     style={"minWidth": "11rem"}, **session),
        dcc.RadioItems(id=BAND, options=[{"label": " std", "value": cf.BAND_STD},
                                         {"label": " min–max", "value": cf.BAND_MINMAX},
                                         {"label": " none", "value": cf.BAND_NONE}],
                       value=cf.BAND_STD, inline=True, className="ms-2",
                       inputClassName="me-1", labelClassName="me-2", **session),
        dcc.Checklist(id=LOG_Y, options=[{"label": " log y", "value": "log"}], value=[],
                      className="ms-2", inputClassName="me-1", **session),
    ], className="d-flex align-items-center flex-wrap mb-1 compare-controls")
    links = html.Div([
        html.Button("Modules page: first trial next to the second", id=OPEN_MODULES,
                    n_clicks=0, disabled=True, className="btn btn-sm btn-outline-primary me-2"),
        html.Span(id=LINK_NOTE, className="text-muted small"),
    ], className="d-flex align-items-center mb-1")
    difference = html.Div([
        html.Div([
            _label("Paint the difference at step", True),
            dcc.Dropdown(id=DIFF_STEP, options=[], value=None, clearable=False,
                         className="sel-dropdown", style={"minWidth": "7rem"}),
            _label("of"),
            dcc.Dropdown(id=DIFF_STATISTIC, options=[
                {"label": STATISTIC_LABELS.get(s, s), "value": s}
                for s in sel.SERIES_STATISTICS], value="mean", clearable=False,
                className="sel-dropdown", style={"minWidth": "8rem"}),
            dcc.Dropdown(id=DIFF_TYPE, options=[], value=FORWARD, clearable=False,
                         className="sel-dropdown ms-2", style={"minWidth": "9rem"}),
        ], className="d-flex align-items-center flex-wrap mt-2 difference-controls"),
        html.Div(id=DIFF_TITLE, className="text-muted mt-1 difference-title"),
        html.Div(id=DIFF_BOX),
    ], id=DIFF_PANEL, style={"display": "none"})
    divergence = html.Div([
        html.Div(id=DIVERGENCE, className="small compare-divergence mb-1"),
        html.Button("open in Tensors: first trial", id=OPEN_A, n_clicks=0, disabled=True,
                    className="btn btn-sm btn-outline-secondary me-2"),
        html.Button("open in Tensors: second trial", id=OPEN_B, n_clicks=0, disabled=True,
                    className="btn btn-sm btn-outline-secondary"),
        difference,
    ], className="border rounded p-2 mb-2")
    return html.Div([
        html.Div([
            _label("Search", True),
            dcc.Input(id=SEARCH, type="search", debounce=True, placeholder="words; -word: not",
                      className="form-control form-control-sm", style={"width": "16rem"},
                      **session),
            dcc.Checklist(id=FINDINGS, options=[{"label": " count findings", "value": "on"}],
                          value=[], className="ms-3", inputClassName="me-1", **session),
            html.Span(id=SUMMARY, className="text-muted small ms-3"),
        ], className="d-flex align-items-center mb-1"),
        dash_table.DataTable(
            id=TABLE, columns=[{"name": "trial id", "id": "trial_id"}], data=[],
            row_selectable="multi", selected_row_ids=[], sort_action="native",
            sort_mode="multi", filter_action="native", page_action="native", page_size=15,
            style_table={"overflowX": "auto"}, style_cell={"fontSize": "12px",
                                                           "padding": "2px 6px",
                                                           "maxWidth": "14rem"},
            style_header={"fontWeight": "600"}, persisted_props=["selected_row_ids"],
            persistence=True, persistence_type="session"),
        html.Div(className="mb-2"),
        controls,
        dcc.Loading(html.Div(message(TICK_TRIALS), id=OVERLAY_BOX), delay_show=400),
        links,
        dcc.Loading(divergence, delay_show=400),
        dcc.Store(id=PLACES, storage_type="memory"),
        dcc.Store(id=DIFF_DEFAULTS, storage_type="memory"),
        dcc.Store(id=TABLE_KEY, storage_type="memory"),
        dcc.Store(id=OVERLAY_DRAWN, data=False, storage_type="memory"),
        dcc.Store(id=DIFF_DRAWN, data=False, storage_type="memory"),
        dcc.Interval(id=COUNTING, interval=COUNT_TICK_MS, disabled=True),
    ], className="page-padded")


def modules_search(trial_b: str) -> str:
    """The Modules page's URL query that puts ``trial_b`` beside the selected trial."""
    return "?" + urlencode({COMPARE_PARAMETER: trial_b}, quote_via=quote)


def compare_trial(search: str | None) -> str | None:
    """The second trial a Modules page URL asks for (``?compare=<trial>``), or None."""
    values = parse_qs((search or "").lstrip("?")).get(COMPARE_PARAMETER)
    return values[0] if values else None


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    # The table answers at once when the page is shown (not after the shell's refresh, on
    # which DATA_STATUS inputs wait: 0.1-0.6 s with 200 trials), and again after each
    # refresh that found new data (sending nothing when its rows did not change).
    def table_outputs(duplicate: bool) -> list:
        return [Output(TABLE, "data", allow_duplicate=duplicate),
                Output(TABLE, "columns", allow_duplicate=duplicate),
                Output(SUMMARY, "children", allow_duplicate=duplicate),
                Output(GROUP_BY, "options", allow_duplicate=duplicate),
                Output(COUNTING, "disabled", allow_duplicate=duplicate),
                Output(TABLE_KEY, "data", allow_duplicate=duplicate)]

    def table_answer(search: str | None, findings: list | None, shown_columns: list | None,
                     shown_key: str | None) -> tuple:
        rows, columns, summary, options, waiting, key = table_view(
            data, parts.timings, search, bool(findings), COUNT_WAIT)
        if key == shown_key:
            return (no_update,) * 6
        return (rows, if_changed(columns, shown_columns), summary, options, not waiting,
                key)

    @app.callback(*table_outputs(False), Input(SEARCH, "value"), Input(FINDINGS, "value"),
                  Input(COUNTING, "n_intervals"), State(TABLE, "columns"))
    def show_table(search: str | None, findings: list | None, _counting: Any,
                   shown_columns: list | None) -> tuple:
        return table_answer(search, findings, shown_columns, None)

    @app.callback(*table_outputs(True), Input(ids.DATA_STATUS, "data"), State(SEARCH, "value"),
                  State(FINDINGS, "value"), State(TABLE, "columns"), State(TABLE_KEY, "data"),
                  prevent_initial_call=True)
    def refresh_table(_status: Any, search: str | None, findings: list | None,
                      shown_columns: list | None, shown_key: str | None) -> tuple:
        return table_answer(search, findings, shown_columns, shown_key)

    @app.callback(
        Output(QUANTITY, "options"), Output(QUANTITY, "value"), Output(STATISTIC, "disabled"),
        Input(TABLE, "selected_row_ids"), Input(KIND, "value"), Input(ids.DATA_STATUS, "data"),
        State(QUANTITY, "value"))
    def quantities(trials: list | None, kind: str, _status: Any, value: str | None) -> tuple:
        options = data_of.quantity_options(data, trials or [], kind)
        values = [o["value"] for o in options]
        chosen = value if value in values else (values[0] if values else None)
        return options, chosen, kind != data_of.TENSOR

    # The plots are made when there is something to draw (plotly is not loaded before:
    # the page's first load is faster) and then stay: a mount callback puts the dcc.Graph
    # in its box once, which runs the figure callback (its output appeared); later changes
    # go to the graph's figure alone, so that its zoom stays (uirevision). A new children
    # value would make the graph anew.
    @app.callback(
        Output(OVERLAY_BOX, "children"), Output(OVERLAY_DRAWN, "data"),
        Input(TABLE, "selected_row_ids"), Input(QUANTITY, "value"), State(OVERLAY_DRAWN, "data"))
    def mount_overlay(trials: list | None, value: str | None, drawn: bool | None) -> tuple:
        text = overlay_message(data, trials, value)
        if text is not None:
            return message(text), False
        if drawn:
            return no_update, no_update
        return dcc.Graph(id=OVERLAY, config={"displaylogo": False}), True

    @app.callback(
        Output(OVERLAY, "figure"),
        Input(TABLE, "selected_row_ids"), Input(QUANTITY, "value"), Input(STATISTIC, "value"),
        Input(SMOOTHING, "value"), Input(GROUP_BY, "value"), Input(BAND, "value"),
        Input(LOG_Y, "value"), Input(ids.DATA_STATUS, "data"))
    def overlay(trials: list | None, value: str | None, statistic: str | None,
                weight: float | None, group_by: str | None, band: str | None,
                log_y: list | None, _status: Any) -> Any:
        shown = overlay_view(data, parts.timings, trials, value, statistic, weight, group_by,
                             band, log_y)
        return no_update if isinstance(shown, str) else shown  # a message: mount_overlay's

    @app.callback(
        Output(DIVERGENCE, "children"), Output(PLACES, "data"), Output(OPEN_A, "disabled"),
        Output(OPEN_B, "disabled"), Output(OPEN_MODULES, "disabled"), Output(LINK_NOTE, "children"),
        Output(DIFF_PANEL, "style"), Output(DIFF_STEP, "options"), Output(DIFF_STEP, "value"),
        Output(DIFF_STATISTIC, "value"), Output(DIFF_TYPE, "value"), Output(DIFF_DEFAULTS, "data"),
        Input(TABLE, "selected_row_ids"), Input(ids.DATA_STATUS, "data"),
        State(DIFF_STEP, "options"), State(DIFF_DEFAULTS, "data"))
    def first_divergence(trials: list | None, _status: Any, listed: list | None,
                         defaults: list | None) -> tuple:
        return divergence_view(data, parts.timings, trials, listed, defaults)

    @app.callback(
        Output(DIFF_BOX, "children"), Output(DIFF_DRAWN, "data"),
        Input(TABLE, "selected_row_ids"), Input(DIFF_STEP, "value"), State(DIFF_DRAWN, "data"))
    def mount_difference(trials: list | None, step: int | None, drawn: bool | None) -> tuple:
        if len(known(data, trials)) < 2 or step is None:
            return [], False
        if drawn:
            return no_update, no_update
        return dcc.Graph(id=DIFF_GRAPH, style=HIDDEN,
                         config={"displaylogo": False, "scrollZoom": True}), True

    difference_inputs = (
        Input(TABLE, "selected_row_ids"), Input(DIFF_STEP, "value"),
        Input(DIFF_STATISTIC, "value"), Input(DIFF_TYPE, "value"), Input(ids.DATA_STATUS, "data"))

    @app.callback(Output(DIFF_GRAPH, "figure"), Output(DIFF_GRAPH, "style"), *difference_inputs)
    def paint_difference(trials: list | None, step: int | None, statistic: str | None,
                         recording_type: str | None, _status: Any) -> tuple:
        painted, _, _ = difference_view(data, parts.timings, trials, step, statistic,
                                        recording_type)
        if painted is None:
            return no_update, HIDDEN
        return difference_figure(painted), {"height": "380px"}

    @app.callback(Output(DIFF_TITLE, "children"), Output(DIFF_TYPE, "options"),
                  *difference_inputs, State(DIFF_TYPE, "options"))
    def difference_title(trials: list | None, step: int | None, statistic: str | None,
                         recording_type: str | None, _status: Any, listed: list | None
                         ) -> tuple:
        _, title, options = difference_view(data, parts.timings, trials, step, statistic,
                                            recording_type)
        return title, if_changed(options, listed)

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.URL, "pathname", allow_duplicate=True),
        Output(ids.URL, "search", allow_duplicate=True),
        Input(OPEN_A, "n_clicks"), Input(OPEN_B, "n_clicks"), Input(OPEN_MODULES, "n_clicks"),
        State(PLACES, "data"), State(TABLE, "selected_row_ids"), State(ids.SELECTION, "data"),
        prevent_initial_call=True)
    def open_page(_a: int, _b: int, _m: int, places: list | None, trials: list | None,
                  selection: dict | None) -> tuple:
        trigger = dash.callback_context.triggered_id
        if trigger == OPEN_MODULES:
            trials = known(data, trials)
            if len(trials) < 2:
                return no_update, no_update, no_update
            new = sel.open_where(selection, {"trial": trials[0]}, data.option_source())
            return new, modules.PATH, modules_search(trials[1])
        place = (places or [None, None])[0 if trigger == OPEN_A else 1]
        if not place:
            return no_update, no_update, no_update
        return sel.open_where(selection, place, data.option_source()), TENSORS_PATH, ""

    @app.callback(
        Output(modules.COMPARE, "value", allow_duplicate=True),
        Input(ids.URL, "search"), State(modules.COMPARE, "value"),
        prevent_initial_call="initial_duplicate")
    def second_trial_from_url(search: str | None, value: str | None) -> Any:
        # the Modules page's "next to trial" from /modules?compare=<trial>
        wanted = compare_trial(search)
        if wanted is None or wanted == value or wanted not in data.trial_ids():
            return no_update
        return wanted


def message(text: str) -> html.Div:
    """What a plot's place shows instead of a plot (no figure: plotly is not loaded
    before there is something to draw, which makes the page's first load faster)."""
    return html.Div(text, className="text-muted compare-message d-flex align-items-center "
                    "justify-content-center", style={"height": "120px"})


def known(data: AppData, trials: list | None) -> list[str]:
    """The ticked trials the group has, in their order."""
    have = set(data.trial_ids())
    return [t for t in trials or [] if t in have]


def table_view(data: AppData, timings: Any, search: str | None, count_findings: bool,
               wait: float) -> tuple[list, list, Any, list, int, str]:
    """The trials table: its rows (those the search keeps), columns, the summary above
    it, the group-by options, how many trials still wait for their findings to be
    counted, and a key of what it shows (the same key: the same rows). The counts
    (``count_findings``) come from the background scan: the table answers after at most
    ``wait`` seconds with the trials scanned so far counted and the others' cells empty;
    the page asks again every second while some wait."""
    started = time.perf_counter()
    frame = data_of.trials_frame(data)
    waiting: list[str] = []
    if count_findings:
        counts, waiting = data_of.findings_counts(data, frame["trial_id"].tolist(), wait)
        frame = data_of.with_findings(frame, counts)
    timings.record("compare.table", time.perf_counter() - started)
    rows = cf.table_rows(frame, search)
    keys = data_of.config_keys(frame)
    options = [{"label": "no grouping", "value": NO_GROUPING}] + [
        {"label": k, "value": k} for k in keys]
    summary: Any = (f"{len(rows)} of {len(frame)} trials" if search else
                    f"{len(frame)} trials") + " · tick trials to compare them"
    if waiting:
        summary = [summary, html.Span(
            f" · counting findings: {len(frame) - len(waiting)} of {len(frame)} trials "
            "scanned", className="compare-counting")]
    key = repr((data_of.versions(data, frame["trial_id"].tolist()), search, count_findings,
                len(waiting)))
    return (rows, cf.table_columns(frame), summary, options, len(waiting),
            hashlib.sha1(key.encode()).hexdigest())


def overlay_view(data: AppData, timings: Any, trials: list | None, value: str | None,
                 statistic: str | None, weight: float | None, group_by: str | None,
                 band: str | None, log_y: list | None) -> Any:
    """The ticked trials' quantity over the steps, overlaid (grouped by a config key), or
    the message shown instead."""
    text = overlay_message(data, trials, value)
    if text is not None:
        return text
    trials, quantity = known(data, trials), data_of.decode(value)
    statistic = statistic or "mean"
    started = time.perf_counter()
    series = data_of.series_of(data, trials, quantity, statistic)
    timings.record("compare.series", time.perf_counter() - started)
    figure = overlay_figure(data, series, quantity, statistic, weight, group_by, band)
    if log_y and figure["data"]:
        figure["layout"]["yaxis"]["type"] = "log"
    timings.record("compare.overlay", time.perf_counter() - started)
    return figure


def overlay_message(data: AppData, trials: list | None, value: str | None) -> str | None:
    """What the overlay's place says instead of a plot (None: there is a plot)."""
    if not known(data, trials):
        return TICK_TRIALS
    if data_of.decode(value) is None:
        return "Nothing of this kind in the ticked trials."
    return None


def overlay_figure(data: AppData, series: dict, quantity: list, statistic: str, weight: Any,
                   group_by: str | None, band: str | None) -> Any:
    groups = None
    if group_by and group_by != NO_GROUPING:
        frame = data_of.trials_frame(data)
        groups = cf.group_trials(list(series), data_of.config_values(frame, group_by))
    return cf.overlay_figure(series, data_of.quantity_label(quantity, statistic),
                             weight=float(weight or 0), groups=groups,
                             band=band or cf.BAND_STD,
                             group_key=None if groups is None else group_by)


def divergence_view(data: AppData, timings: Any, trials: list | None,
                    listed_steps: list | None = None, defaults: list | None = None) -> tuple:
    """Where the first two ticked trials first differ: the text, the places the buttons
    open, the buttons' states, the note; the difference panel's style, its steps (those
    both trials recorded) and, when the pair or its first divergence is new, the step,
    statistic and recording type to paint (the divergence's, else the last step's mean
    of the forward values; otherwise what the user chose stays) and the defaults set."""
    trials = known(data, trials)
    hidden = {"display": "none"}
    if len(trials) < 2:
        text = "Tick two trials to see where they first differ."
        return (text, None, True, True, True, "", hidden, no_update, no_update, no_update,
                no_update, no_update)
    a, b = trials[:2]
    started = time.perf_counter()
    found = data_of.divergence(data, a, b)
    timings.record("compare.divergence", time.perf_counter() - started)
    places = [found.get("where_a"), found.get("where_b")]
    note = (f"first trial {a!r}, second {b!r}; the Tensors page shows one trial at "
            "a time")
    header = html.B(f"First divergence of {a} and {b}: ")
    steps = data_of.common_steps(data, a, b)
    options = [{"label": str(s), "value": s} for s in steps]
    step, statistic, recording_type = data_of.difference_defaults(found, steps)
    # the pair and its divergence (not the last step: a running pair's grows)
    marker = [a, b, [step, statistic, recording_type] if places[0] else None]
    values: tuple = (no_update,) * 4
    if marker != defaults:  # another pair, or its divergence moved: its defaults
        values = (step, statistic, recording_type, marker)
    return ([header, html.Span(found["text"], className="divergence-text")], places,
            places[0] is None, places[1] is None, False, note, {} if steps else hidden,
            if_changed(options, listed_steps), *values)


def difference_view(data: AppData, timings: Any, trials: list | None, step: int | None,
                    statistic: str | None, recording_type: str | None) -> tuple:
    """The first ticked trial's graph at ``step`` painted by the relative difference of
    ``statistic`` of ``recording_type`` between the first two ticked trials: (the graph's
    model and its Paint, None when there is nothing to draw; the title above it; the
    recording types the first trial has). :func:`difference_figure` draws it."""
    trials = known(data, trials)
    if len(trials) < 2 or step is None:
        return None, "", []
    a, b = trials[:2]
    statistic = statistic or "mean"
    recording_type = recording_type or FORWARD
    types = data_of.recording_types(data, a, statistic)
    options = [{"label": sel.option_label("recording_type", t), "value": t} for t in types]
    started = time.perf_counter()
    painted = data_of.difference_graph(data, a, b, int(step), statistic, recording_type)
    timings.record("compare.difference", time.perf_counter() - started)
    quantity = (f"{STATISTIC_LABELS.get(statistic, statistic)} · "
                f"{sel.option_label('recording_type', recording_type)}")
    if painted is None:
        why = f"Nothing to paint: no graph, or no {quantity} in one of the trials at step {step}."
        return None, why, options
    paint = painted[1]
    compared, differing = cf.compared_nodes(paint)
    what = data_of.difference_label(statistic, recording_type)
    if not compared:
        verdict = f"no node has a value of {quantity} in both trials at this step"
    elif differing:
        verdict = f"{differing} of {compared} nodes differ"
    else:
        verdict = f"the two trials are equal here: all {compared} nodes differ by 0"
    title = (f"{a}'s graph at step {step}, painted by the {what} between the two trials "
             f"({verdict}).")
    return painted, title, options


def difference_figure(painted: tuple) -> Any:
    """The graph painted by the difference (``painted``: :func:`difference_view`'s)."""
    return build_graph_figure(painted[0], paint=painted[1], width_px=1200, height_px=360)


PAGE = Page(PATH, NAME, layout, register_callbacks)
