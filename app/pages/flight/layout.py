"""The Flight page's layout: its ids, links to a trigger, the pure layout and the pure
pieces the views fill it with (the empty state, the triggers' table, the movers' line)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

from dash import dcc, html

from ... import flight_data as fd
from ... import flight_figures as ff

PATH = "/flight"
NAME = "Flight"

# ids of this page
TITLE = "flight-title"
EMPTY = "flight-empty"
BODY = "flight-body"
TRIGGERS = "flight-triggers"
TRIGGER = "flight-trigger"
ROLE = "flight-role"
TENSOR = "flight-tensor"
STATISTIC = "flight-statistic"
CHART = "flight-chart"
MOVERS = "flight-movers"
SLIDER = "flight-slider"
STEP_TEXT = "flight-step"
PLAY = "flight-play"
PLAY_TICK = "flight-play-tick"
GRAPH = "flight-graph"
GRAPH_NOTE = "flight-graph-note"
STEP_SUMMARY = "flight-step-summary"
KEY = "flight-key"
CHART_KEY = "flight-chart-key"
GRAPH_KEY = "flight-graph-key"
TRIGGER_ROW = "flight-trigger-row"  # the type of a row's id (trigger_row_id)

PLAY_LABEL, PAUSE_LABEL = "▶ play", "❚❚ pause"
PLAY_MS = 600
CHART_HEIGHT = 320
GRAPH_WIDTH_PX, GRAPH_HEIGHT_PX = 960, 440
#: The URL parameters of a link to a trigger.
TRIAL_PARAMETER, TRIGGER_PARAMETER = "trial", "trigger"

USAGE = """from comgra_like import ComgraRecorder, FlightRecorder
recorder = ComgraRecorder(..., flight_recorder=FlightRecorder(window=64, full_steps=2, after=8))
# or: comgra_like.watch(model, flight_recorder=FlightRecorder())"""


def trigger_row_id(index: Any) -> dict:
    return {"type": TRIGGER_ROW, "index": index}


def link(trial: str, trigger: str | None = None) -> str:
    """The Flight page at a trial's trigger: ``/flight?trial=...&trigger=...``."""
    query = {TRIAL_PARAMETER: trial}
    if trigger:
        query[TRIGGER_PARAMETER] = trigger
    return f"{PATH}?{urlencode(query)}"


def url_wish(search: str | None) -> tuple[str | None, str | None]:
    """(trial, trigger) a URL's query asks for."""
    query = parse_qs((search or "").lstrip("?"))
    return ((query.get(TRIAL_PARAMETER) or [None])[0],
            (query.get(TRIGGER_PARAMETER) or [None])[0])


def layout() -> html.Div:
    radio = {"inline": True, "inputClassName": "me-1", "labelClassName": "me-3"}
    return html.Div(
        [
            html.H5(id=TITLE, className="mb-2"),
            html.Div(id=EMPTY),
            html.Div(
                [
                    html.Div(id=TRIGGERS, className="flight-triggers mb-2"),
                    html.Div(
                        [
                            html.Span("Trigger", className="sel-label me-2"),
                            dcc.Dropdown(id=TRIGGER, options=[], clearable=False,
                                         className="sel-dropdown flight-trigger",
                                         style={"minWidth": "22rem"}),
                            html.Span("Tensor", className="sel-label ms-3 me-2"),
                            dcc.Dropdown(id=TENSOR, options=[], clearable=False,
                                         className="sel-dropdown flight-tensor",
                                         style={"minWidth": "14rem"}),
                        ],
                        className="d-flex align-items-center flex-wrap mb-1",
                    ),
                    html.Div(
                        [
                            html.Span("Of the", className="sel-label me-2"),
                            dcc.RadioItems(id=ROLE, options=[], value="value", **radio),
                            html.Span("Statistic", className="sel-label ms-3 me-2"),
                            dcc.RadioItems(
                                id=STATISTIC,
                                options=[{"label": ff.statistic_label(s), "value": s}
                                         for s in fd.STATISTICS],
                                value="norm", persistence=True,
                                persistence_type="session", **radio),
                        ],
                        className="d-flex align-items-center flex-wrap mb-1",
                    ),
                    dcc.Graph(id=CHART, config={"displaylogo": False},
                              style={"height": f"{CHART_HEIGHT}px"}),
                    html.Div(id=MOVERS, className="flight-movers small mb-2"),
                    html.Div(
                        [
                            html.Button(PLAY_LABEL, id=PLAY, n_clicks=0,
                                        className="btn btn-sm btn-outline-secondary me-2"),
                            html.Span(id=STEP_TEXT, className="me-3 flight-step"),
                            html.Div(dcc.Slider(id=SLIDER, min=0, max=1, step=1, value=0,
                                                marks=None, updatemode="drag"),
                                     style={"flex": "1"}),
                        ],
                        className="d-flex align-items-center mb-1",
                    ),
                    html.Div(id=GRAPH_NOTE, className="text-muted small"),
                    html.Div(id=STEP_SUMMARY, className="small flight-step-summary"),
                    dcc.Graph(id=GRAPH, config={"displaylogo": False},
                              style={"height": f"{GRAPH_HEIGHT_PX}px"}),
                    dcc.Interval(id=PLAY_TICK, interval=PLAY_MS, disabled=True),
                ],
                id=BODY,
            ),
            dcc.Store(id=KEY, storage_type="memory"),
            dcc.Store(id=CHART_KEY, storage_type="memory"),
            dcc.Store(id=GRAPH_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


# --- pure pieces ------------------------------------------------------------------------


def empty_state(trial: str | None, others: list[str]) -> html.Div:
    """What the page says without a window: how to arm the flight recorder, and the
    trials that have windows."""
    head = ("No trials yet." if trial is None else
            f"Trial {trial} has no flight recorder windows: nothing triggered, or the "
            "flight recorder was not armed.")
    parts: list[Any] = [
        html.P(head, className="text-muted"),
        html.P([("The flight recorder keeps a few numbers of every tensor on every step "
                 "and writes the last steps when a NaN, an Inf or a spike appears. Arm it "
                 "(see "), html.Code("docs/FLIGHT.md"), "):"], className="mb-1"),
        html.Pre(USAGE, className="flight-usage small bg-light p-2"),
    ]
    if others:
        parts.append(html.P(["Trials with windows: ", *[
            html.Span([dcc.Link(t, href=link(t), className="flight-other-trial"),
                       " " if i < len(others) - 1 else ""]) for i, t in enumerate(others)]]))
    return html.Div(parts, className="flight-empty")


def triggers_table(rows: list[fd.TriggerRow], chosen: str | None) -> html.Table:
    """One clickable row per trigger (``trigger_row_id(i)``), the chosen one marked."""
    head = html.Thead(html.Tr([html.Th(h) for h in (
        "kind", "step", "tensor", "value", "window", "when")]))
    body = []
    for i, row in enumerate(rows):
        kind = ff.kind_label(row.kind) + (
            f" (+ {', '.join(ff.kind_label(k) for k in row.others)})" if row.others else "")
        tensor = row.tensor or ""
        if row.tensor and row.role and row.role != "value":
            tensor += f" ({row.role})"
        body.append(html.Tr(
            [html.Td(kind), html.Td(str(row.step)), html.Td(tensor),
             html.Td(ff.value_text(row.value)),
             html.Td(f"{row.window[0]}–{row.window[1]}"), html.Td(ff.when_text(row.time))],
            id=trigger_row_id(i), n_clicks=0,
            className="flight-trigger-row" + (" table-active" if row.name == chosen else ""),
            style={"cursor": "pointer"}, title="show this window",
            **{"data-name": row.name}))
    return html.Table([head, html.Tbody(body)],
                      className="table table-sm table-hover mb-0 flight-trigger-table")


def movers_text(finding: dict | None, trigger: fd.TriggerRow) -> list:
    """The origin the finder named: the first non-finite tensor, or those that moved
    first."""
    movers = fd.first_movers(finding)
    if finding is None:
        return [html.Span("The finding of this trigger is not scanned yet.",
                          className="text-muted")]
    if not movers:
        return [html.Span("No tensor's statistics left their range before the trigger in "
                          "the window.", className="text-muted")]
    if movers[0].get("non_finite"):
        m = movers[0]
        return [html.Strong("First non-finite: "),
                (f"the {m.get('role')} of {m.get('name')} at step {m.get('step')} "
                 f"(the trigger fired at step {trigger.step}).")]
    items = [f"the {m.get('role')} of {m.get('name')} at step {m.get('step')} "
             f"({m.get('statistic', '')} {ff.value_text(_num(m.get('value')))} against "
             f"a median of {ff.value_text(_num(m.get('median')))})" for m in movers]
    return [html.Strong("Moved first: "), "; ".join(items), "."]


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
