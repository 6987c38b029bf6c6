"""The selector controls and the one callback that turns user actions into a selection.

Every way of changing the selection (a dropdown, ◀ ▶, the step slider or typed step, a
click on the dependency graph or on the series, an arrow key, new data) arrives at
:func:`register_callbacks`' callback, becomes one pure ``selection.choose``/``nudge``/
``refresh`` call, and leaves as the new selection store plus the options and values of
every control. The store only changes when the selection does, so the views (which
listen to the store) only work when something they show changed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import dash
from dash import ALL, Input, Output, State, dcc, html, no_update

from comgra_like.vocabulary import ANY_TYPE, SAMPLE

from . import ids, views
from . import selection as sel
from .controls import rank_selector as ranks
from .controls.rank_selector import EACH_RANK, MERGED, RankSelector
from .data import AppData
from .graph_figure import neighbor_in_direction
from .parts import AppParts

#: Selector fields drawn as a labelled dropdown with ◀ ▶, in the order of the panel.
PANEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("recording_type", "Recording type"),
    ("type_of_execution", "Type of execution"),
    ("training_step", "Training step"),
    ("iteration", "Iteration"),
    ("node", "Node"),
    ("aggregation", "Batch or sample"),
    ("role", "Role of tensor"),
)
#: Fields with a dropdown (the step has a typed field and a slider instead: its thousands
#: of options are never labelled).
DROPDOWN_FIELDS: tuple[str, ...] = tuple(f for f in sel.CHAIN if f != "training_step")
_KEY_DIRECTIONS = {"left", "right", "up", "down"}
_MAX_STEP_MARKS = 6


#: The Tensors page's rank selector of a distributed recording (shown only when a trial
#: has several ranks): "all ranks merged" (the default) or one rank.
RANK_SELECT = "rank-select"
RANK_BOX = "rank-box"
RANKS = RankSelector(RANK_SELECT, RANK_BOX, choices=(MERGED, EACH_RANK), default=MERGED,
                     label="Ranks", inline=False, width="12rem")
MERGED_LABEL = ranks.MERGED_LABEL
#: The class of every page's rank box, and its style (``controls.rank_selector``).
RANK_BOX_CLASS = ranks.BOX_CLASS
rank_box_style = ranks.box_style
#: The Tensors page's options and value for a trial's ranks.
rank_options = RANKS.options
rank_value = RANKS.value


def rank_selector() -> html.Div:
    """A labelled dropdown, hidden until the trial has several ranks."""
    return RANKS.layout()


def nav_button(field: str, forward: bool, label: str) -> html.Button:
    return html.Button(
        "▶\ufe0e" if forward else "◀\ufe0e",  # \ufe0e: the text glyph, not an emoji
        id=ids.following(field) if forward else ids.previous(field),
        n_clicks=0,
        className="btn btn-outline-secondary btn-sm sel-nav",
        title=f"{'next' if forward else 'previous'} {label.lower()}",
        **{"aria-label": f"{'next' if forward else 'previous'} {label.lower()}"},
    )


def _dom_for(field: str) -> str:
    return ids.dom_id(ids.step_input() if field == "training_step" else ids.selector(field))


def selector_row(field: str, label: str) -> html.Div:
    """Label, then ◀ control ▶ on one line (the step adds a slider below)."""
    if field == "training_step":
        control = dcc.Input(
            id=ids.step_input(),
            type="number",
            debounce=True,
            className="form-control form-control-sm sel-step-input",
            placeholder="step",
        )
    else:
        control = dcc.Dropdown(
            id=ids.selector(field),
            options=[],
            clearable=False,
            searchable=field in ("node", "trial", "aggregation"),
            className="sel-dropdown",
            placeholder="–",
        )
    children = [
        html.Label(label, className="sel-label", htmlFor=_dom_for(field)),
        html.Div(
            [
                nav_button(field, False, label),
                html.Div(control, className="sel-control"),
                nav_button(field, True, label),
            ],
            className="sel-line",
        ),
    ]
    if field == "training_step":
        children.append(
            dcc.Slider(
                id=ids.step_slider(),
                min=0,
                max=0,
                step=1,
                value=0,
                marks=None,
                included=False,
                allow_direct_input=False,
                updatemode="mouseup",
                className="sel-slider",
            )
        )
    return html.Div(children, className="sel-row", **{"data-field": field})


def selector_panel() -> html.Div:
    """The left column of the Tensors page."""
    return html.Div(
        [selector_row(field, label) for field, label in PANEL_FIELDS]
        + [
            html.P(
                [
                    "Click a node in the graph. ",
                    html.Kbd("←"),
                    html.Kbd("→"),
                    html.Kbd("↑"),
                    html.Kbd("↓"),
                    " move along it.",
                ],
                className="sel-help",
            )
        ],
        className="selector-panel",
        role="group",
        **{"aria-label": "selection"},
    )


def trial_selector() -> html.Div:
    """The trial selector of the top bar (on every page)."""
    return html.Div(
        [
            nav_button("trial", False, "Trial"),
            html.Div(
                dcc.Dropdown(
                    id=ids.selector("trial"),
                    options=[],
                    clearable=False,
                    searchable=True,
                    className="sel-dropdown trial-dropdown",
                    placeholder="no trials yet",
                ),
                className="sel-control",
            ),
            nav_button("trial", True, "Trial"),
        ],
        className="sel-line trial-selector",
        title="trial",
    )


# --- the callback ---------------------------------------------------------------------


def step_marks(steps: Sequence[int]) -> dict:
    """Slider marks (positions are indexes into ``steps``): first, last and a few between."""
    if not steps:
        return {}
    count = len(steps)
    if count <= _MAX_STEP_MARKS:
        positions = range(count)
    else:
        positions = sorted(
            {round(i * (count - 1) / (_MAX_STEP_MARKS - 1)) for i in range(_MAX_STEP_MARKS)}
        )
    return {int(p): str(steps[p]) for p in positions}


def nearest(options: Sequence[int], value: float) -> int | None:
    if not options:
        return None
    # bisection: the options are 100,000 steps in a long trial
    return next(sel.nearest_first(options, value), None)


def _triggered_event(ctx: Any) -> tuple[str, Any] | None:
    """The user action behind this call: (kind, payload), or None for a refresh/initial call."""
    triggered = [t for t in ctx.triggered if t.get("prop_id") not in (".", "")]
    if len(triggered) != 1:
        return None  # initial call of a newly inserted page, or several at once
    tid = ctx.triggered_id
    value = triggered[0].get("value")
    if tid == ids.KEY_EVENT:
        return ("key", value)
    if tid == ids.DATA_STATUS or not isinstance(tid, Mapping):
        return None
    kind = tid.get("type")
    if kind == "sel":
        return ("choose", (tid["field"], value))
    if kind in ("sel-prev", "sel-next"):
        if not value:
            return None
        return ("nudge", (tid["field"], -1 if kind == "sel-prev" else 1))
    if kind == "step-slider":
        return ("step-index", value)
    if kind == "step-input":
        return ("step-typed", value)
    if kind == "dependency-graph":
        return ("node-click", value)
    if kind == "series-graph":
        return ("step-click", value)
    return None


def _clicked(click_data: Any) -> Any:
    try:
        point = click_data["points"][0]
    except (TypeError, KeyError, IndexError):
        return None
    data = point.get("customdata")
    if isinstance(data, list):
        data = data[0] if data else None
    return data


def apply_event(
    data: AppData, selection: Mapping[str, Any] | None, event: tuple[str, Any] | None
) -> sel.Selection:
    """The new selection for one user action (pure apart from reading options via ``data``)."""
    source = data.option_source()
    if event is None:
        return sel.refresh(selection, source)
    kind, payload = event
    current = sel.refresh(selection, source)["current"]
    if kind == "choose":
        field, value = payload
        if value is None or (field != "statistic" and value == current.get(field)):
            return sel.refresh(selection, source)
        if field == "statistic" and value == (selection or {}).get("statistic"):
            return sel.refresh(selection, source)
        return sel.choose(selection, field, value, source)
    if kind == "nudge":
        field, delta = payload
        return sel.nudge(selection, field, delta, source)
    if kind in ("step-index", "step-typed", "step-click"):
        steps = sel.field_options(current, "training_step", source)
        if kind == "step-index":
            if payload is None or not steps:
                return sel.refresh(selection, source)
            step = steps[max(0, min(len(steps) - 1, int(payload)))]
        elif kind == "step-typed":
            if payload is None:
                return sel.refresh(selection, source)
            step = nearest(steps, float(payload))
        else:
            step = _clicked(payload)
            if step is not None and step not in steps:  # another type of execution
                return sel.choose(
                    sel.choose(selection, "type_of_execution", ANY_TYPE, source),
                    "training_step",
                    int(step),
                    source,
                )
        if step is None or step == current.get("training_step"):
            return sel.refresh(selection, source)
        return sel.choose(selection, "training_step", int(step), source)
    if kind == "node-click":
        node = _clicked(payload)
        if node is None:
            return sel.refresh(selection, source)
        return sel.choose(selection, "node", str(node), source)
    if kind == "key":
        direction = (payload or {}).get("direction")
        if direction not in _KEY_DIRECTIONS or current.get("node") is None:
            return sel.refresh(selection, source)
        model = views.graph_model(
            data, current["trial"], current["training_step"], current["iteration"]
        )
        target = neighbor_in_direction(model, current["node"], direction) if model else None
        if target is None:
            return sel.refresh(selection, source)
        return sel.choose(selection, "node", target, source)
    return sel.refresh(selection, source)


def control_values(data: AppData, selection: Mapping[str, Any]) -> dict[str, Any]:
    """Options and values of every control for a selection."""
    source = data.option_source()
    current = selection["current"]
    options = sel.all_options(current, source)
    info = (
        data.steps(current["trial"]).get(current.get("training_step"))
        if current.get("trial")
        else None
    )
    categories = info.sample_categories if info is not None else {}
    dropdowns = {}
    for field in DROPDOWN_FIELDS:
        labels = []
        for value in options[field]:
            label = value if field == "node" else sel.option_label(field, value)
            if field == "aggregation":
                aggregation, index = sel.parse_aggregation(value)
                if aggregation == SAMPLE and categories.get(index):
                    label = f"{label} ({categories[index]})"
            labels.append({"label": label, "value": value})
        dropdowns[field] = labels
    dropdowns["statistic"] = [{"label": s, "value": s} for s in sel.SERIES_STATISTICS]
    values = dict(current) | {"statistic": selection.get("statistic", "mean")}
    steps = options["training_step"]
    step = current.get("training_step")
    return {
        "options": dropdowns,
        "values": values,
        "steps": steps,
        "step_index": steps.index(step) if step in steps else 0,
        "at_first": {f: not options.get(f) or current.get(f) == options[f][0] for f in sel.CHAIN},
        "at_last": {f: not options.get(f) or current.get(f) == options[f][-1] for f in sel.CHAIN},
    }


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(ids.SELECTION, "data"),
        Output(ids.selector(ALL), "options"),
        Output(ids.selector(ALL), "value"),
        Output(ids.previous(ALL), "disabled"),
        Output(ids.following(ALL), "disabled"),
        Output(ids.step_slider(ALL), "max"),
        Output(ids.step_slider(ALL), "marks"),
        Output(ids.step_slider(ALL), "value"),
        Output(ids.step_input(ALL), "value"),
        Input(ids.selector(ALL), "value"),
        Input(ids.previous(ALL), "n_clicks"),
        Input(ids.following(ALL), "n_clicks"),
        Input(ids.step_slider(ALL), "value"),
        Input(ids.step_input(ALL), "value"),
        Input(ids.dependency_graph(ALL), "clickData"),
        Input(ids.series_graph(ALL), "clickData"),
        Input(ids.KEY_EVENT, "data"),
        Input(ids.DATA_STATUS, "data"),
        State(ids.SELECTION, "data"),
    )
    def update_selection(*args: Any) -> tuple:
        started = time.perf_counter()
        ctx = dash.callback_context
        selection = args[-1]
        event = _triggered_event(ctx)
        new = apply_event(data, selection, event)
        controls = control_values(data, new)
        # After a user action on data the page already shows, only send what changed:
        # every control sent is re-rendered in the browser (~5 ms each).
        old = (
            control_values(data, selection)
            if event is not None and selection and selection.get("current")
            else None
        )
        # The control the user just used shows what the selection made of it (a typed
        # step snaps to a recorded one), even when the selection did not change.
        touched = ctx.triggered_id.get("field") if isinstance(ctx.triggered_id, Mapping) else None
        outputs = ctx.outputs_list

        def changed(key: str, field: str, value: Any, default: Any = None) -> bool:
            return old is None or field == touched or value != old[key].get(field, default)

        def column(key: str, specs: list, default: Any = None) -> list:
            out = []
            for spec in specs:
                field = spec["id"]["field"]
                value = controls[key].get(field, default)
                out.append(value if changed(key, field, value, default) else no_update)
            return out

        steps = controls["steps"]
        steps_changed = old is None or old["steps"] != steps
        index_changed = (
            steps_changed
            or touched == "training_step"
            or old["step_index"] != controls["step_index"]
        )
        step = new["current"].get("training_step")
        step_changed = changed("values", "training_step", step)
        # A clicked node is highlighted in the browser before this answers (comgra.graphClick):
        # when the selection cannot take it, the store is sent even unchanged, so that the
        # graph callback puts the highlight back on the selected node.
        rejected_click = (
            event is not None
            and event[0] == "node-click"
            and _clicked(event[1]) not in (None, new["current"].get("node"))
        )
        result = (
            new if new != selection or rejected_click else no_update,
            column("options", outputs[1], []),
            column("values", outputs[2]),
            column("at_first", outputs[3], True),
            column("at_last", outputs[4], True),
            [max(0, len(steps) - 1) if steps_changed else no_update for _ in outputs[5]],
            [step_marks(steps) if steps_changed else no_update for _ in outputs[6]],
            [controls["step_index"] if index_changed else no_update for _ in outputs[7]],
            [step if step_changed else no_update for _ in outputs[8]],
        )
        if parts.prefetch is not None:
            parts.prefetch.neighbours_of(new["current"].get("trial"), step, steps)
        parts.timings.record("selection", time.perf_counter() - started)
        return result
