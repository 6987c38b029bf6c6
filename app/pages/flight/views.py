"""What the Flight page's views show, from its reads (``app/flight_data.py``) and the pure
builders (``app/flight_figures.py``, the painted graph of ``app/graph_figure.py``): the
triggers, the chosen trigger's window, the tensors to pick, the window's chart, the
painted graph and the player's next step. The callbacks parse their inputs, call one of
these and return."""

from __future__ import annotations

from typing import Any

from dash import Patch, no_update

from ... import flight_data as fd
from ... import flight_figures as ff
from ... import ids
from ... import selection as sel
from ...controls.shown import nothing, unchanged
from ...data import AppData
from ...figures import empty_figure
from ...graph_figure import build_graph_figure, paint_updates
from .layout import (
    CHART,
    CHART_HEIGHT,
    GRAPH_HEIGHT_PX,
    GRAPH_WIDTH_PX,
    PATH,
    PAUSE_LABEL,
    PLAY,
    PLAY_LABEL,
    TRIGGER_ROW,
    empty_state,
    movers_text,
    triggers_table,
    url_wish,
)


def current_trial(selection: dict | None) -> str | None:
    return ((selection or {}).get("current") or {}).get("trial")


def start_step(trigger: fd.TriggerRow, finding: dict | None) -> int:
    """Where the player starts: the first bad step the finding names, else the trigger."""
    movers = fd.first_movers(finding)
    step = movers[0].get("step") if movers else None
    if isinstance(step, int) and trigger.window[0] <= step <= trigger.window[1]:
        return step
    return trigger.step


def selection_from_url(data: AppData, search: str | None, pathname: str | None,
                       selection: dict | None) -> Any:
    """A link's trial as the selected trial (``no_update``: none, or it is selected)."""
    trial, _ = url_wish(search)
    if pathname != PATH or not trial or trial == current_trial(selection) \
            or trial not in data.trial_ids():
        return no_update
    return sel.open_where(selection, {"trial": trial}, data.option_source())


def triggers_view(data: AppData, selection: dict | None, search: str | None,
                  triggered: Any, clicked: bool, chosen: str | None, shown: Any) -> tuple:
    """The title, the empty state, the body's style, the triggers' table, the trigger
    dropdown's options and value, and the key (7 values; nothing when the key is the one
    shown). ``triggered``: the input that fired; ``clicked``: it holds a real click."""
    trial = current_trial(selection)
    rows = fd.triggers(data, trial)
    url_trial, url_trigger = url_wish(search)
    if isinstance(triggered, dict) and triggered.get("type") == TRIGGER_ROW:
        index = triggered.get("index")
        if clicked and isinstance(index, int) and index < len(rows):
            chosen = rows[index].name
    elif url_trigger and url_trial == trial and (
            triggered == ids.URL or chosen not in {r.name for r in rows}):
        chosen = url_trigger
    picked = fd.pick_trigger(rows, chosen)
    name = picked.name if picked else None
    key = [trial, [r.name for r in rows], name]
    if unchanged(key, shown):
        return nothing(7)
    title = f"Flight recorder · {trial}" if trial else "Flight recorder"
    if picked is None:
        others = [t for t in fd.trials_with_triggers(data) if t != trial]
        return (title, empty_state(trial, others), {"display": "none"}, None, [],
                None, key)
    options = [{"label": ff.trigger_label(r), "value": r.name} for r in rows]
    return (title, None, {}, triggers_table(rows, name), options, name, key)


def trigger_view(data: AppData, name: str | None, selection: dict | None,
                 role: str | None) -> tuple:
    """The chosen trigger's roles (options, value), the slider over its window (min,
    max, marks, value: where the player starts) and the movers' line (7 values)."""
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


def tensor_view(data: AppData, name: str | None, role: str | None, selection: dict | None,
                tensor: str | None, new_trigger: bool) -> tuple:
    """The window's tensors of the role (options) and the one shown: kept, unless the
    trigger changed (``new_trigger``) or it is not in the window; then the first mover of
    the role, the trigger's tensor or the first."""
    trial = current_trial(selection)
    if not name or not trial or not role:
        return [], None
    rows = fd.window_rows(data, trial, name)
    names = fd.window_tensors(rows, role)
    if not names:
        return [], None
    if new_trigger or tensor not in names:
        trigger = fd.pick_trigger(fd.triggers(data, trial), name)
        movers = [m.get("name") for m in fd.first_movers(fd.trigger_finding(
            data, trial, name)) if m.get("role") == role]
        wished = [t for t in [*(movers), trigger.tensor if trigger else None] if t]
        tensor = next((t for t in wished if t in names), names[0])
    return [{"label": n, "value": n} for n in names], tensor


def chart_view(data: AppData, name: str | None, role: str | None, tensor: str | None,
               statistic: str | None, step: int | None, selection: dict | None,
               shown: Any) -> tuple:
    """The window's chart and its key: the figure, or only the step's marker patched
    when it shows the same tensor and statistic already."""
    trial = current_trial(selection)
    trigger = fd.pick_trigger(fd.triggers(data, trial), name) if name else None
    if trigger is None or not tensor or not role or not statistic:
        return empty_figure("", CHART_HEIGHT), None
    what = [trial, name, role, tensor, statistic]
    if unchanged(what, (shown or {}).get("what")):
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


def graph_view(data: AppData, name: str | None, role: str | None, statistic: str | None,
               step: int | None, selection: dict | None, shown: Any) -> tuple:
    """The painted graph, its note, the step's line and summary, and the key (5 values):
    the figure when the graph or what paints it changed, the colours patched when only
    the step did, nothing but the lines when the step is the one shown."""
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
    if unchanged(key, shown):
        return no_update, no_update, step_text, summary, no_update
    if unchanged(what, (shown or {}).get("what")):
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


def play_step(triggered: Any, click: dict | None, stopped: bool | None, step: int | None,
              first: int | None, last: int | None) -> tuple:
    """The player: the slider's step, whether the tick is off, the button's label, after
    a click on play/pause (``PLAY``), on the chart (``CHART``: its step) or a tick."""
    if first is None or last is None:
        return no_update, True, PLAY_LABEL
    steps = list(range(int(first), int(last) + 1))
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
