"""The module graph's callbacks: where a click, a breadcrumb or the picked modules lead
(the view store), the level shown, and a panel's way to the Tensors page."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, Input, Output, State, no_update

from ... import ids, module_data
from ... import selection as sel
from ...controls.shown import if_changed
from ...parts import AppParts
from ..tensors import PATH as TENSORS_PATH
from . import views
from .layout import (
    COMPARE,
    CRUMBS,
    EXECUTION,
    GRAPH,
    INFO,
    KEY,
    PICK,
    REPORT,
    VIEW,
    crumb_id,
    panel_id,
)
from .navigation import current, navigate


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
        result = views.level_view(data, view, selection, execution, shown)
        if result[0] is not no_update:
            parts.timings.record("modules.level", time.perf_counter() - started)
        return result

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

