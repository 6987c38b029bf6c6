"""The Tensors page's reads beyond the selection's (all through ``AppData``): the painted
graph's values and colour scale, and the data version a view of a step depends on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...data import AppData
from ...graph_figure import NodeValue, Paint, color_scale
from .paint import paint_aggregation, paint_label


def build_paint(
    data: AppData, current: Mapping[str, Any], statistic: str, recording_type: str
) -> Paint | None:
    """What the graph of the selected step shows painted by ``statistic`` of
    ``recording_type`` (None: no graph or no statistics). The colour scale spans every
    recorded step, so that a colour means the same value at every step."""
    trial, step, iteration = (current.get(f) for f in ("trial", "training_step", "iteration"))
    if trial is None or step is None or iteration is None:
        return None
    aggregation = paint_aggregation(current)
    values = data.node_values(trial, step, iteration, statistic, recording_type, aggregation)
    table = data.statistic_table(trial, statistic)
    if values is None or table is None:
        return None
    scale = data.cached(
        ("paint_scale", trial, data.trial_version(trial), statistic, recording_type,
         aggregation),
        lambda: color_scale(table.all_values(recording_type, aggregation)) or False,
    )
    return Paint(
        label=paint_label(statistic, recording_type),
        values={name: NodeValue(*v) for name, v in values.items()},
        scale=scale or None,
        step=step,
    )


def live_version(data: AppData, current: Mapping[str, Any]) -> int:
    """The trial's data version if the shown step may still be filling, else 0.

    Only the newest step of a trial can get more rows; older steps never change, so
    their views do not re-render when new steps arrive.
    """
    trial, step = current.get("trial"), current.get("training_step")
    if trial is None or step is None:
        return data.trial_version(trial)
    steps = data.steps(trial)
    if steps and step == max(steps):
        return data.trial_version(trial)
    return 0

