"""The value views' callbacks: the header, statistics table and per-neuron values of the
selected tensor, and its series across steps (the step marker patched when only the step
changed)."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, Patch

from comgra_like.errors import ComgraError

from ... import figures, ids, selectors
from ... import selection as sel
from ...controls.shown import nothing, unchanged
from ...parts import AppParts
from .data import live_version
from .layout import VIEW_HEIGHT
from .value_views import is_complete, message, statistics_table, value_header


def register_value_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data, timings = parts.data, parts.timings

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
        key = [current, live_version(data, current), rank]
        if unchanged(key, shown):
            return nothing(4)
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
                message(text),
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
                message(str(exc)),
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
        if unchanged(key, shown):
            return nothing(2)
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

