"""The module graph's callbacks: where a click, a breadcrumb or the picked modules lead
(the view store), the level shown, and a panel's way to the Tensors page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, Input, Output, State, no_update

from comgra_like.vocabulary import ANY_TYPE

from ... import ids, module_data, module_sharing, other_trials
from ... import module_figures as mf
from ... import selection as sel
from ...controls.shown import if_changed, nothing, unchanged
from ...figures import empty_figure
from ...parts import AppParts
from ..tensors import PATH as TENSORS_PATH
from .grids import most_common_type
from .layout import (
    COMPARE,
    CRUMBS,
    EXECUTION,
    GRAPH,
    INFO,
    KEY,
    NO_TRIAL,
    PICK,
    REPORT,
    VIEW,
    breadcrumb_bar,
    crumb_id,
    panel_id,
    report_view,
)
from .navigation import navigate


def current(selection: Mapping | None) -> Mapping:
    """The selection's fields (trial, step, node, ...)."""
    return (selection or {}).get("current") or {}


def register_level_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(VIEW, "data"),
        Output(PICK, "value"),
        Output(PICK, "options", allow_duplicate=True),
        Input(GRAPH, "clickData"),
        Input(crumb_id(ALL), "n_clicks"),
        Input(PICK, "value"),
        Input(ids.SELECTION, "data"),
        State(VIEW, "data"),
        State(PICK, "options"),
        prevent_initial_call="initial_duplicate",
    )
    def move(click: Any, _crumbs: list, picked: list | None, selection: dict | None,
             view: dict | None, options: list | None) -> tuple:
        ctx = dash.callback_context
        trigger = ctx.triggered_id
        shown = current(selection)
        trial = shown.get("trial")
        kwargs: dict[str, Any] = {}
        if trigger == GRAPH:
            points = (click or {}).get("points") or [{}]
            kwargs["clicked"] = points[0].get("customdata")
        elif isinstance(trigger, Mapping) and trigger.get("type") == "modules-crumb":
            if not any(t.get("value") for t in ctx.triggered):
                return no_update, no_update, no_update  # a breadcrumb that appears
            kwargs["crumb"] = trigger["module"]
        elif trigger == PICK:
            offered = {o.get("value") for o in options or ()}
            dropped = set((view or {}).get("picked") or ()) - set(picked or ())
            if dropped - offered:
                # the dropdown dropped values its options did not have yet: not the user
                return no_update, no_update, no_update
            kwargs["picked"] = picked or []
        elif shown.get("node") is not None:
            kwargs["node"] = shown.get("node")
        graph = None
        if "node" in kwargs and trial is not None:
            graph = module_data.module_graph(data, trial, shown.get("training_step"))[1]
        new = navigate(view, graph, trial, **kwargs)
        # the picked modules among the options as the value arrives: a dropdown drops
        # values its options do not have (a module picked by a link from another page
        # arrives before this level's options)
        offered = [o.get("value") for o in options or ()]
        missing = [{"label": m, "value": m} for m in new["picked"] if m not in offered]
        return (if_changed(new, view), if_changed(new["picked"], picked or []),
                list(options or []) + missing if missing else no_update)

    @app.callback(
        Output(GRAPH, "figure"),
        Output(CRUMBS, "children"),
        Output(INFO, "children"),
        Output(REPORT, "children"),
        Output(PICK, "options"),
        Output(COMPARE, "options"),
        Output(EXECUTION, "options"),
        Output(EXECUTION, "value"),
        Output(KEY, "data"),
        Input(VIEW, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        State(EXECUTION, "value"),
        State(KEY, "data"),
    )
    def show_level(view: dict | None, status: Any, selection: dict | None,
                   execution: str | None, shown: Any) -> tuple:
        started = time.perf_counter()
        result = level(view, selection, execution, shown)
        if result[0] is not no_update:
            parts.timings.record("modules.level", time.perf_counter() - started)
        return result

    def level(view: dict | None, selection: dict | None, execution: str | None,
              shown: Any) -> tuple:
        shown_fields = current(selection)
        trial = shown_fields.get("trial")
        trials = data.trial_ids()
        view = view or {}
        # lists, not tuples: the key comes back from the store as JSON
        key = [trial, list(module_data.data_version(data, trial)) if trial else None,
               view.get("parent"), view.get("picked"),
               shown_fields.get("training_step"), trials, execution]
        if unchanged(key, shown):
            return nothing(9)
        compare = [{"label": "none", "value": NO_TRIAL}] + [
            {"label": t, "value": t} for t in trials if t != trial]
        types = data.types_of_execution(trial) if trial else ()
        executions = [{"label": "every type", "value": ANY_TYPE}] + [
            {"label": t, "value": t} for t in types]
        if execution not in [o["value"] for o in executions]:
            execution = most_common_type(data.steps(trial)) if trial else ANY_TYPE
        if trial is None:
            message = empty_figure("No trial selected.", 200)
            return message, [], "", None, [], compare, executions, execution, key
        step, graph = module_data.module_graph(data, trial, shown_fields.get("training_step"))
        if graph is None:
            message = empty_figure(
                "No module graph in this trial: record with comgra_like.watch(model)."
                + other_trials.hint(other_trials.with_module_graphs(data), trial,
                                    "module graphs"), 200)
            return message, [], "", None, [], compare, executions, execution, key
        level = mf.level_view(graph, view.get("parent"))
        figure = mf.module_graph_figure(level, selected=view.get("picked") or ())
        options = [{"label": i, "value": i} for i in mf.invocations(graph) if i != mf.root_id(graph)]
        for m in view.get("picked") or ():
            if m not in mf.invocations(graph):
                options.append({"label": f"{m} (not in step {step})", "value": m})
        count = sum(1 for n in level.nodes if n.kind == "module")
        info = (f"structure of step {step} · {count} module call{'s' if count != 1 else ''} "
                "at this level · click a module to show its histograms (▸ opens it)")
        return (figure, breadcrumb_bar(level.breadcrumb), info,
                report_view(module_data.watch_report(data, trial),
                            module_sharing.sharing(graph)), options, compare,
                executions, execution, key)

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.URL, "pathname", allow_duplicate=True),
        Input(panel_id("open", ALL), "n_clicks"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def open_in_tensors(_clicks: list, selection: dict | None) -> tuple:
        ctx = dash.callback_context
        trigger = ctx.triggered_id
        if not isinstance(trigger, Mapping) or not any(t.get("value") for t in ctx.triggered):
            return no_update, no_update  # a panel that appears, not a click
        module = trigger["module"]
        shown = current(selection)
        where = {"trial": shown.get("trial"), "node": module, "role": "output 0",
                 "training_step": shown.get("training_step")}
        return sel.open_where(selection, where, data.option_source()), TENSORS_PATH

