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
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode

import dash
from dash import ALL, Input, Output, Patch, State, dcc, html, no_update

from .. import flight_data as fd
from .. import flight_figures as ff
from .. import ids
from .. import selection as sel
from ..figures import empty_figure
from ..graph_figure import build_graph_figure, paint_updates
from ..parts import AppParts
from .page import Page

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
    return {"type": "flight-trigger-row", "index": index}


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


def start_step(trigger: fd.TriggerRow, finding: dict | None) -> int:
    """Where the player starts: the first bad step the finding names, else the trigger."""
    movers = fd.first_movers(finding)
    step = movers[0].get("step") if movers else None
    if isinstance(step, int) and trigger.window[0] <= step <= trigger.window[1]:
        return step
    return trigger.step


# --- callbacks --------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    def current_trial(selection: dict | None) -> str | None:
        return ((selection or {}).get("current") or {}).get("trial")

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Input(ids.URL, "search"),
        State(ids.URL, "pathname"),
        State(ids.SELECTION, "data"),
        prevent_initial_call="initial_duplicate",
    )
    def trial_from_url(search: str | None, pathname: str | None, selection: dict | None
                       ) -> Any:
        """A link's trial becomes the selected trial (the top bar follows)."""
        trial, _ = url_wish(search)
        if pathname != PATH or not trial or trial == current_trial(selection) \
                or trial not in data.trial_ids():
            return no_update
        return sel.open_where(selection, {"trial": trial}, data.option_source())

    @app.callback(
        Output(TITLE, "children"),
        Output(EMPTY, "children"),
        Output(BODY, "style"),
        Output(TRIGGERS, "children"),
        Output(TRIGGER, "options"),
        Output(TRIGGER, "value"),
        Output(KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.URL, "search"),
        Input(trigger_row_id(ALL), "n_clicks"),
        Input(TRIGGER, "value"),
        Input(KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_triggers(selection: dict | None, _status: Any, search: str | None,
                      _clicks: list, chosen: str | None, shown: Any) -> tuple:
        trial = current_trial(selection)
        rows = fd.triggers(data, trial)
        ctx = dash.callback_context
        url_trial, url_trigger = url_wish(search)
        triggered = ctx.triggered_id
        if isinstance(triggered, dict) and triggered.get("type") == "flight-trigger-row":
            index = triggered.get("index")
            if any(t.get("value") for t in ctx.triggered) and isinstance(index, int) \
                    and index < len(rows):
                chosen = rows[index].name
        elif url_trigger and url_trial == trial and (
                triggered == ids.URL or chosen not in {r.name for r in rows}):
            chosen = url_trigger
        picked = fd.pick_trigger(rows, chosen)
        name = picked.name if picked else None
        key = [trial, [r.name for r in rows], name]
        if key == shown:
            return (no_update,) * 7
        title = f"Flight recorder · {trial}" if trial else "Flight recorder"
        if picked is None:
            others = [t for t in fd.trials_with_triggers(data) if t != trial]
            return (title, empty_state(trial, others), {"display": "none"}, None, [],
                    None, key)
        options = [{"label": ff.trigger_label(r), "value": r.name} for r in rows]
        return (title, None, {}, triggers_table(rows, name), options, name, key)

    @app.callback(
        Output(ROLE, "options"),
        Output(ROLE, "value"),
        Output(SLIDER, "min"),
        Output(SLIDER, "max"),
        Output(SLIDER, "marks"),
        Output(SLIDER, "value"),
        Output(MOVERS, "children"),
        Input(TRIGGER, "value"),
        State(ids.SELECTION, "data"),
        State(ROLE, "value"),
    )
    def show_trigger(name: str | None, selection: dict | None, role: str | None) -> tuple:
        trial = current_trial(selection)
        trigger = fd.pick_trigger(fd.triggers(data, trial), name) if name else None
        if trigger is None or trigger.name != name:
            return [], no_update, 0, 1, None, 0, None
        rows = fd.window_rows(data, trial, name)
        roles = fd.window_roles(rows)
        if trigger.role in roles:
            role = trigger.role
        elif role not in roles:
            role = roles[0] if roles else "value"
        finding = fd.trigger_finding(data, trial, name)
        first, last = trigger.window
        marks = {first: str(first), last: str(last)}
        marks[trigger.step] = {"label": f"{trigger.step} ⚑", "style": {"color": ff.FLIGHT_COLOR}}
        options = [{"label": ff.ROLE_LABELS.get(r, r), "value": r} for r in roles]
        return (options, role, first, last, marks, start_step(trigger, finding),
                movers_text(finding, trigger))

    @app.callback(
        Output(TENSOR, "options"),
        Output(TENSOR, "value"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        State(ids.SELECTION, "data"),
        State(TENSOR, "value"),
    )
    def tensor_options(name: str | None, role: str | None, selection: dict | None,
                       tensor: str | None) -> tuple:
        trial = current_trial(selection)
        if not name or not trial or not role:
            return [], None
        rows = fd.window_rows(data, trial, name)
        names = fd.window_tensors(rows, role)
        if not names:
            return [], None
        if dash.callback_context.triggered_id == TRIGGER or tensor not in names:
            trigger = fd.pick_trigger(fd.triggers(data, trial), name)
            movers = [m.get("name") for m in fd.first_movers(fd.trigger_finding(
                data, trial, name)) if m.get("role") == role]
            wished = [t for t in [*(movers), trigger.tensor if trigger else None] if t]
            tensor = next((t for t in wished if t in names), names[0])
        return [{"label": n, "value": n} for n in names], tensor

    @app.callback(
        Output(CHART, "figure"),
        Output(CHART_KEY, "data"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        Input(TENSOR, "value"),
        Input(STATISTIC, "value"),
        Input(SLIDER, "value"),
        State(ids.SELECTION, "data"),
        State(CHART_KEY, "data"),
    )
    def show_chart(name: str | None, role: str | None, tensor: str | None,
                   statistic: str | None, step: int | None, selection: dict | None,
                   shown: Any) -> tuple:
        trial = current_trial(selection)
        trigger = fd.pick_trigger(fd.triggers(data, trial), name) if name else None
        if trigger is None or not tensor or not role or not statistic:
            return empty_figure("", CHART_HEIGHT), None
        what = [trial, name, role, tensor, statistic]
        if shown and shown.get("what") == what:
            patch = Patch()
            patch["layout"]["shapes"] = ff.window_shapes(trigger.window, trigger.step, step)
            return patch, {"what": what, "step": step}
        rows = fd.window_rows(data, trial, name)
        window = fd.window_series(rows, tensor, role, statistic)
        recorded, aggregation = fd.recorded_series(data, trial, rows, tensor, role, statistic)
        figure = ff.window_figure(window, recorded, statistic=statistic, tensor=tensor,
                                  role=role, window=trigger.window, trigger_step=trigger.step,
                                  current_step=step, aggregation=aggregation,
                                  height=CHART_HEIGHT)
        figure["layout"]["uirevision"] = str(what)
        return figure, {"what": what, "step": step}

    @app.callback(
        Output(GRAPH, "figure"),
        Output(GRAPH_NOTE, "children"),
        Output(STEP_TEXT, "children"),
        Output(STEP_SUMMARY, "children"),
        Output(GRAPH_KEY, "data"),
        Input(TRIGGER, "value"),
        Input(ROLE, "value"),
        Input(STATISTIC, "value"),
        Input(SLIDER, "value"),
        State(ids.SELECTION, "data"),
        State(GRAPH_KEY, "data"),
    )
    def paint_graph(name: str | None, role: str | None, statistic: str | None,
                    step: int | None, selection: dict | None, shown: Any) -> tuple:
        trial = current_trial(selection)
        trigger = fd.pick_trigger(fd.triggers(data, trial), name) if name else None
        if trigger is None or not role or not statistic or step is None:
            return empty_figure("", GRAPH_HEIGHT_PX), "", "", "", None
        step_text = f"step {step}" + (" · the trigger" if step == trigger.step else "")
        rows = fd.window_rows(data, trial, name)
        summary = " · ".join(p for p in (
            ff.step_summary(rows, step, statistic, role),
            ff.samples_text(trigger.sample_ids.get(int(step)))) if p)
        graph_step, model = fd.window_graph(data, trial, trigger)
        if model is None:
            return (empty_figure("no recorded dependency graph in this trial",
                                 GRAPH_HEIGHT_PX), "", step_text, summary, None)
        what = [trial, name, role, statistic, model.graph_hash]
        scale = data.cached(("flight_scale", trial, name, role, statistic),
                            lambda: ff.window_scale(rows, statistic, role) or False) or None
        paint = ff.window_paint(rows, step, statistic, role, scale)
        key = {"what": what, "step": step}
        if shown and shown.get("what") == what:
            if shown.get("step") == step:
                return no_update, no_update, step_text, summary, no_update
            patch = Patch()
            for trace, path, value in paint_updates(model, paint):
                target = patch["data"][trace]
                for part in path[:-1]:
                    target = target[part]
                target[path[-1]] = value
            return patch, no_update, step_text, summary, key
        note = (f"The dependency graph of recorded step {graph_step}, painted with the "
                f"window's {ff.statistic_label(statistic)} of the "
                f"{ff.ROLE_LABELS.get(role, role)} at each step (one colour scale for "
                "the whole window; red: NaN/Inf; grey: no data).")
        figure = build_graph_figure(model, width_px=GRAPH_WIDTH_PX, height_px=GRAPH_HEIGHT_PX,
                                    paint=paint)
        return figure, note, step_text, summary, key

    @app.callback(
        Output(SLIDER, "value", allow_duplicate=True),
        Output(PLAY_TICK, "disabled"),
        Output(PLAY, "children"),
        Input(PLAY, "n_clicks"),
        Input(PLAY_TICK, "n_intervals"),
        Input(CHART, "clickData"),
        State(PLAY_TICK, "disabled"),
        State(SLIDER, "value"),
        State(SLIDER, "min"),
        State(SLIDER, "max"),
        prevent_initial_call=True,
    )
    def play(_clicks: Any, _ticks: Any, click: dict | None, stopped: bool | None,
             step: int | None, first: int | None, last: int | None) -> tuple:
        if first is None or last is None:
            return no_update, True, PLAY_LABEL
        steps = list(range(int(first), int(last) + 1))
        triggered = dash.callback_context.triggered_id
        if triggered == CHART:
            point = ((click or {}).get("points") or [{}])[0]
            x = point.get("x")
            if isinstance(x, (int, float)) and first <= x <= last:
                return int(x), True, PLAY_LABEL
            return no_update, no_update, no_update
        if triggered == PLAY:
            if not stopped:  # pause
                return no_update, True, PLAY_LABEL
            start = step if step is not None and step < last else first
            return start, False, PAUSE_LABEL
        following = ff.next_step(steps, step)
        if following is None:
            return no_update, True, PLAY_LABEL
        return following, no_update, no_update


PAGE = Page(PATH, NAME, layout, register_callbacks)
