"""What the Tensors page's views show, from its reads (``AppData``, ``data``) and the
pure builders (``graph_figure``, ``figures``): the dependency graph, the values of the
selected tensor and its series across steps. The callbacks parse their inputs, call
one of these and return."""

from __future__ import annotations

import time
from typing import Any

from dash import Patch, no_update

from comgra_like import vocabulary as vocab
from comgra_like.errors import ComgraError

from ... import figures, flight_data, flight_figures
from ... import selection as sel
from ...controls.shown import if_changed, nothing, unchanged
from ...data import AppData
from ...graph_figure import build_graph_figure, highlight_updates, paint_updates
from ...views import graph_model
from .data import build_paint, live_version
from .layout import GRAPH_HEIGHT_PX, GRAPH_WIDTH_PX, VIEW_HEIGHT
from .paint import is_painting, paint_aggregation
from .value_views import is_complete, message, statistics_table, value_header


def graph_view(data: AppData, timings: Any, started: float, selection: dict | None,
               shown: dict | None, statistic: str | None, recording_type: str | None,
               drawn: dict | None) -> tuple:
    """The dependency graph's figure (a Patch of the highlight or the paint when the
    figure stays), its key and the highlight it shows (3 values; nothing when both the
    key and the highlight are the ones shown)."""
    current = (selection or {}).get("current") or {}
    trial, step, iteration = (
        current.get("trial"),
        current.get("training_step"),
        current.get("iteration"),
    )
    if trial is None or step is None or iteration is None:
        message = "no recorded steps yet" if trial else "no trials yet"
        key = {"graph": None, "message": message}
        if unchanged(key, shown):
            return nothing(3)
        return figures.empty_figure(message), key, None
    model = graph_model(data, trial, step, iteration)
    if model is None:
        key = {"graph": None, "message": "graph not written yet"}
        if unchanged(key, shown):
            return nothing(3)
        return figures.empty_figure("the graph of this step is not written yet"), key, None
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
    if unchanged(key, shown) and unchanged(highlight, drawn):
        return nothing(3)
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
        return patch, key, if_changed(highlight, drawn)
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


def values_view(data: AppData, timings: Any, started: float, selection: dict | None,
                shown: Any, rank: Any) -> tuple:
    """The header, the statistics table, the per-neuron values of the selected tensor
    and the key (4 values; nothing when the key is the one shown)."""
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


def series_view(data: AppData, timings: Any, started: float, selection: dict | None,
                shown: Any, rank: Any) -> tuple:
    """The selected tensor's statistic across steps (a Patch of the step marker when
    only the step changed) and the key (nothing when the key is the one shown)."""
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
    # the flight windows' shaded bands ride along in the key, so that a step change
    # patches them back without reading the windows again
    bands = (shown or {}).get("bands") or []
    was = {k: v for k, v in (shown or {}).items() if k != "bands"} or None
    if unchanged(key, was):
        return nothing(2)
    if was and {k: v for k, v in was.items() if k != "step"} == {
        k: v for k, v in key.items() if k != "step"
    }:
        patch = Patch()
        patch["layout"]["shapes"] = figures.step_marker_shapes(step) + bands
        return patch, {**key, "bands": bands}
    if not is_complete(current):
        return figures.empty_figure("", VIEW_HEIGHT), key
    try:
        frame = data.read_series(current, statistic, rank)
    except ComgraError as exc:
        return figures.empty_figure(str(exc), VIEW_HEIGHT), key
    figure = figures.series_figure(frame, statistic, step, height=VIEW_HEIGHT)
    # the flight recorder's windows: every step of them among the recorded steps
    windows = flight_data.tensors_page_series(data, current, statistic)
    flight_figures.add_flight_window(figure, windows, statistic, current.get("aggregation"))
    figure["layout"]["uirevision"] = str(what)  # zoom survives step changes
    key["bands"] = flight_figures.series_window_shapes(windows) if figure.get("data") else []
    timings.record("series", time.perf_counter() - started)
    return figure, key
