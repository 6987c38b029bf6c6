"""The Flight page's reads (issue 30): a trial's flight recorder triggers, a window's
rows, the regularly recorded steps of the same tensor, the finding of a trigger and the
graph the window is painted on. Through the query API only (``Group.list_flight_triggers``,
``Group.read_flight``, ``Group.read_statistics``), every read behind ``AppData.safely``:
a damaged window is a missing one, never a broken page.

A written window never changes (its JSON comes last and makes it visible), so its rows
are cached under the window's name; the list of triggers is read at each call (a small
folder listing) so that a new trigger shows at the next refresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.format import flight as flight_format
from comgra_like.vocabulary import BATCH_ABS_MAX, BATCH_MEAN, NO_BATCH

from . import views
from .data import AppData
from .graph_figure import GraphFigureModel

#: The statistics the page offers: read_statistics' name -> the flight window's column
#: (the window's l2_norm is read_statistics' norm; its inf_count is not offered).
STATISTICS: Mapping[str, str] = {
    ("norm" if column == "l2_norm" else column): column
    for column in flight_format.STATISTICS if column != "inf_count"}
#: What a KPI (one number) has: its mean, abs max and norm are the value's.
KPI_STATISTICS = frozenset(STATISTICS) - {"std", "nan_count"}
#: The roles a window keeps per tensor, in the order the page offers them.
ROLES: tuple[str, ...] = ("value", "gradient", "update", "kpi")
#: The regularly recorded rows of a batched tensor hold per-sample statistics aggregated
#: over the batch; the flight recorder's are of the whole tensor. The aggregation that
#: gives the same number (mean of equal-sized samples' means, max of their abs maxima);
#: the others are shown with the batch mean and said to differ.
SAME_NUMBER_AGGREGATION: Mapping[str, str] = {"mean": BATCH_MEAN, "abs_max": BATCH_ABS_MAX}


@dataclass(frozen=True)
class TriggerRow:
    """One trigger as the page lists it (``FlightTrigger`` of the query API, flattened)."""

    name: str
    kind: str
    step: int
    tensor: str | None
    node: str | None
    role: str | None
    value: float | None
    window: tuple[int, int]
    time: float | None
    others: tuple[str, ...]
    #: the sample ids the loop gave per step of the window (``register_sample_ids``)
    sample_ids: Mapping[int, list] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "step": self.step,
                "tensor": self.tensor, "node": self.node, "role": self.role,
                "value": self.value, "window": list(self.window), "time": self.time,
                "others": list(self.others)}


def triggers(data: AppData, trial: str | None) -> list[TriggerRow]:
    """The trial's triggers, oldest first ([] without a trial, a group or a window)."""
    group = data.group
    if group is None or not trial or trial not in data.trial_ids():
        return []
    found = data.safely(f"flight triggers of {trial}",
                        lambda: group.list_flight_triggers(trial), [])
    out = []
    for t in found:
        when = t.record.get("time") if isinstance(t.record, Mapping) else None
        out.append(TriggerRow(
            name=t.name, kind=t.kind, step=int(t.step), tensor=t.tensor, node=t.node,
            role=t.role, value=t.value, window=(int(t.window[0]), int(t.window[1])),
            time=float(when) if isinstance(when, (int, float)) else None,
            others=tuple(str(o.get("kind")) for o in t.others if isinstance(o, Mapping)),
            sample_ids=dict(t.sample_ids or {})))
    return out


def trials_with_triggers(data: AppData, limit: int = 20) -> list[str]:
    """Up to ``limit`` trials of the group that have a flight window (for the empty
    state: where to look instead)."""
    out = []
    for trial in data.trial_ids():
        if triggers(data, trial):
            out.append(trial)
            if len(out) >= limit:
                break
    return out


def pick_trigger(rows: Sequence[TriggerRow], wanted: str | None) -> TriggerRow | None:
    """The trigger named ``wanted``, else the latest one (None: no trigger)."""
    for row in rows:
        if row.name == wanted:
            return row
    return rows[-1] if rows else None


def window_rows(data: AppData, trial: str, name: str) -> pd.DataFrame:
    """Every statistics row of one window (``Group.read_flight``; empty if unreadable).
    Cached under the window's name: a written window never changes."""
    group = data.group
    if group is None:
        return pd.DataFrame()
    rows = data.cached(
        ("flight_window", trial, name),
        lambda: data.safely(f"flight window {name} of {trial}",
                            lambda: group.read_flight(trial, name), None),
    )
    return pd.DataFrame() if rows is None else rows


def window_tensors(rows: pd.DataFrame, role: str) -> list[str]:
    """The tensor names a window holds for ``role``, in the order the step computed
    them."""
    if rows is None or rows.empty:
        return []
    part = rows[rows["role"] == role].sort_values("order", kind="stable")
    return list(dict.fromkeys(part["name"].astype(str)))


def window_roles(rows: pd.DataFrame) -> list[str]:
    """The roles present in a window, in :data:`ROLES` order."""
    if rows is None or rows.empty:
        return []
    have = set(rows["role"].astype(str))
    return [r for r in ROLES if r in have]


def window_series(rows: pd.DataFrame, tensor: str, role: str, statistic: str
                  ) -> pd.DataFrame:
    """``training_step``, ``value`` of one tensor's statistic over the window, one row
    per step (a tensor seen twice in a step: its first row)."""
    column = STATISTICS.get(statistic, statistic)
    if rows is None or rows.empty or column not in rows.columns:
        return pd.DataFrame({"training_step": [], "value": []})
    part = rows[(rows["name"] == tensor) & (rows["role"] == role)]
    part = part.sort_values(["training_step", "order"], kind="stable").drop_duplicates(
        "training_step")
    return pd.DataFrame({"training_step": part["training_step"].to_numpy(np.int64),
                         "value": part[column].to_numpy(np.float64)})


def tensor_node(rows: pd.DataFrame, tensor: str) -> str | None:
    """The graph node of a window's tensor."""
    if rows is None or rows.empty:
        return None
    nodes = rows.loc[rows["name"] == tensor, "node"]
    return str(nodes.iloc[0]) if len(nodes) else None


def recorded_series(data: AppData, trial: str, rows: pd.DataFrame, tensor: str, role: str,
                    statistic: str) -> tuple[pd.DataFrame, str | None]:
    """The regularly recorded steps of the same tensor, role and statistic
    (``Group.read_statistics``): (``training_step``, ``value``; the aggregation used, None
    when nothing was recorded). A tensor without a batch dimension has the same number
    as the window; a batched one the aggregation of :data:`SAME_NUMBER_AGGREGATION`,
    else the batch mean of per-sample values (a different number: the caller says so).
    A KPI: ``Group.read_kpis``."""
    empty = pd.DataFrame({"training_step": pd.Series([], dtype=np.int64),
                          "value": pd.Series([], dtype=np.float64)})
    group = data.group
    if group is None:
        return empty, None
    if role == "kpi":
        return _recorded_kpi(data, trial, tensor, statistic, empty)
    node = tensor_node(rows, tensor)
    if node is None or statistic not in STATISTICS:
        return empty, None

    def read() -> pd.DataFrame:
        return group.read_statistics(trial, nodes=node, statistics=[statistic])

    frame = data.cached(
        ("flight_recorded", trial, data.trial_version(trial), node, statistic),
        lambda: data.safely(f"statistics of {node} in {trial}", read, None))
    if frame is None or frame.empty:
        return empty, None
    frame = frame[frame["tensor_name"] == tensor] if (frame["tensor_name"] == tensor).any() \
        else frame
    types = frame["recording_type"].astype(str)
    if role == "value":
        frame = frame[types == "forward"]
    elif role == "gradient":
        frame = frame[types.str.startswith("gradient")]
    else:
        frame = frame[types == role]
    if frame.empty:
        return empty, None
    aggregations = set(frame["aggregation"].astype(str))
    for aggregation in (NO_BATCH, SAME_NUMBER_AGGREGATION.get(statistic), BATCH_MEAN):
        if aggregation in aggregations:
            break
    else:
        return empty, None
    part = frame[frame["aggregation"] == aggregation].sort_values(
        "training_step", kind="stable").drop_duplicates("training_step")
    return pd.DataFrame({"training_step": part["training_step"].to_numpy(np.int64),
                         "value": part[statistic].to_numpy(np.float64)}), aggregation


def _recorded_kpi(data: AppData, trial: str, tensor: str, statistic: str,
                  empty: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """A KPI's recorded values (a KPI is one number: its value is the mean and the abs
    max's sign aside, every statistic of it)."""
    if statistic not in KPI_STATISTICS:
        return empty, None
    kpis = data.safely(f"KPIs of {trial}", lambda: data.kpis(trial), None)
    if kpis is None or kpis.empty or "kpi_name" not in kpis.columns:
        return empty, None
    # the window names a KPI "group/name" (record_kpi_in_graph's group and name)
    names = kpis["kpi_group"].astype(str) + "/" + kpis["kpi_name"].astype(str)
    part = kpis[(names == tensor).to_numpy() | (kpis["kpi_name"] == tensor).to_numpy()]
    if part.empty:
        return empty, None
    values = part["value"].to_numpy(np.float64)
    if statistic != "mean":
        values = np.abs(values)
    out = pd.DataFrame({"training_step": part["timepoint"].to_numpy(np.int64),
                        "value": values}).sort_values("training_step", kind="stable")
    return out.drop_duplicates("training_step").reset_index(drop=True), NO_BATCH


def trigger_finding(data: AppData, trial: str, name: str) -> dict[str, Any] | None:
    """The finding ``analysis/flight.py`` made of the window ``name`` (its origin: the
    first non-finite tensor, or the tensors whose statistics moved first), None while
    the trial is not scanned or the finder found nothing."""
    found = data.safely(f"findings of {trial}", lambda: data.findings(trial), [])
    for finding in found:
        if (finding.get("numbers") or {}).get("flight_window") == name:
            return finding
    return None


def first_movers(finding: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The tensors that moved first (a spike's finding), or the first non-finite one (a
    non_finite finding) as one entry: [{name, node, role, step, value, median, ...}]."""
    if not finding:
        return []
    numbers = finding.get("numbers") or {}
    movers = numbers.get("first_movers")
    if isinstance(movers, list):
        return [m for m in movers if isinstance(m, Mapping)]
    if "tensor" in numbers:
        return [{"name": numbers["tensor"], "node": finding.get("node"),
                 "role": finding.get("role"), "step": numbers.get("first_step"),
                 "nan_count": numbers.get("nan_count"), "inf_count": numbers.get("inf_count"),
                 "non_finite": True}]
    return []


def window_graph(data: AppData, trial: str, trigger: TriggerRow
                 ) -> tuple[int | None, GraphFigureModel | None]:
    """(step, graph model) the window is painted on: the dependency graph of the first
    recorded step from the trigger on (the steps after a trigger are recorded in full),
    else of the last recorded step before it; its first iteration."""
    steps = data.steps(trial)
    recorded = sorted(steps)
    if not recorded:
        return None, None
    later = [s for s in recorded if s >= trigger.step]
    earlier = [s for s in reversed(recorded) if s < trigger.step]
    for step in later + earlier:
        info = steps.get(step)
        if info is None or not info.graph_hashes:
            continue
        iteration = min(info.graph_hashes)
        model = views.graph_model(data, trial, step, iteration)
        if model is not None:
            return step, model
    return None, None


def tensors_page_series(data: AppData, current: Mapping[str, Any], statistic: str
                        ) -> pd.DataFrame | None:
    """The flight windows of the Tensors page's selected tensor (``training_step``,
    ``value``, ``trigger``; ``query.flight.read_flight_statistics``, every window of the
    trial), for its "across steps" chart. None when the trial has no window, the
    statistic is not kept by the flight recorder, or one sample is selected (the flight
    recorder keeps whole tensors). Cached per trial version and list of windows."""
    trial, node, role = current.get("trial"), current.get("node"), current.get("role")
    recording_type = current.get("recording_type")
    if not trial or not node or not recording_type or statistic not in _PAGE_STATISTICS:
        return None
    if str(current.get("aggregation") or "").startswith("sample"):
        return None
    windows = tuple(t.name for t in triggers(data, trial))
    group = data.group
    if not windows or group is None:
        return None

    def read() -> pd.DataFrame:
        from comgra_like.query.flight import read_flight_statistics

        gradient = recording_type if str(recording_type).startswith("gradient") else None
        rows = read_flight_statistics(group.path, trial, nodes=node,
                                      recording_types=recording_type,
                                      statistics=[statistic], gradient_type=gradient)
        if role is not None and (rows["role"] == role).any():
            rows = rows[rows["role"] == role]
        rows = rows.drop_duplicates("training_step")
        return pd.DataFrame({"training_step": rows["training_step"].to_numpy(np.int64),
                             "value": rows[statistic].to_numpy(np.float64),
                             "trigger": rows["trigger"].to_numpy(object)})

    frame = data.cached(
        ("flight_series", trial, data.trial_version(trial), windows, node, role,
         recording_type, statistic),
        lambda: data.safely(f"flight windows of {node} in {trial}", read, None))
    if frame is None or frame.empty or np.isnan(frame["value"].to_numpy(np.float64)).all():
        return None  # none there, or a statistic of other rows (update_ratio: updates)
    return frame


#: The statistics of the "across steps" chart a flight window has.
_PAGE_STATISTICS = (frozenset(STATISTICS) | frozenset(flight_format.COUNT_STATISTICS)
                    | {"numel", "update_ratio"})
