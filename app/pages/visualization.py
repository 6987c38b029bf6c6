"""Visualization page: the user's plugin (``--visualization-file``) for the current selection."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, dcc, html

from .. import ids
from .. import selection as sel
from ..controls.shown import nothing, unchanged
from ..data import AppData
from ..parts import AppParts
from ..plugin import VisualizationContext
from .page import Page

PATH = "/visualization"
NAME = "Visualization"


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(id=ids.VISUALIZATION, className="visualization-output"),
            dcc.Store(id=ids.VISUALIZATION_KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


def context_for(data: AppData, current: dict) -> VisualizationContext:
    """The plugin's view of the selection (node/role resolved to where the data is stored)."""
    trial, step, iteration = (
        current.get("trial"),
        current.get("training_step"),
        current.get("iteration"),
    )
    info = data.steps(trial).get(step) if trial is not None else None
    node_name, role, data_iteration = current.get("node"), current.get("role"), iteration
    graph_node, graph_role = node_name, role
    node = (
        data.graph_node(trial, step, iteration, node_name)
        if None not in (trial, step, iteration, node_name)
        else None
    )
    if node is not None and role is not None:
        node_name, role, data_iteration = data.data_location(node, role)
    aggregation, sample_index = (
        sel.parse_aggregation(current["aggregation"]) if current.get("aggregation") else (None, -1)
    )
    return VisualizationContext(
        trial_id=trial,
        training_step=step,
        type_of_execution=info.type_of_execution if info else None,
        iteration=iteration,
        node=node_name,
        role=role,
        recording_type=current.get("recording_type"),
        aggregation=aggregation,
        sample_index=sample_index,
        query=data.group,
        data_iteration=data_iteration,
        graph_node=graph_node,
        graph_role=graph_role,
    )


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data, plugin = parts.data, parts.plugin
    if plugin is None:  # the page is not shown without a --visualization-file
        return

    @app.callback(
        Output(ids.VISUALIZATION, "children"),
        Output(ids.VISUALIZATION_KEY, "data"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.VISUALIZATION_KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_visualization(selection: dict | None, status: Any, shown: Any) -> tuple:
        current = (selection or {}).get("current") or {}
        key = [current, plugin.mtime(), data.trial_version(current.get("trial"))]
        if unchanged(key, shown):
            return nothing(2)
        started = time.perf_counter()
        content = plugin.render(context_for(data, current))
        parts.timings.record("plugin", time.perf_counter() - started)
        return html.Div(
            [html.Div(f"{plugin.path.name}", className="text-muted small mb-1"), content]
        ), key


PAGE = Page(PATH, NAME, layout, register_callbacks, needs_plugin=True)
