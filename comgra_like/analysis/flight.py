"""Flight recorder triggers as findings, with their origin (issue 30).

The flight recorder (``comgra_like.FlightRecorder``) saw every step, recorded or not, so
its window names the first bad step exactly, where the regular recording can only say
"between two recorded steps". For each trigger of a trial:

- ``non_finite``: the first step of the window with a NaN or Inf, and in it the first
  non-finite tensor in the order of the step: values in the forward order of the
  dependency graph (from a recorded step of the trial: the steps after a trigger are
  recorded in full; without a graph, the order in which the step registered them), then
  gradients in the order backward reached them, then updates.
- a spike (loss, gradient norm, update ratio) or the predicate: the tensors whose
  statistic (L2 norm; the mean for a loss value) left their range first in the window,
  judged against the first half of the window (median + 6 x max(1.4826 MAD,
  5% of |median|)).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import ComgraError
from ..format.flight import STATISTICS, non_finite_rows
from ..query.flight import FlightTrigger, list_flight_triggers, read_flight
from .core import ERROR, WARNING, Finding, TrialData, fmt, where
from .graph_order import topological

KIND_PREFIX = "flight_"
_ROLE_RANK = {"value": 0, "gradient": 1, "update": 2, "kpi": 3}
_MOVE_MADS, _MOVE_FLOOR = 6.0, 0.05


def detect(data: TrialData) -> list[Finding]:
    try:
        triggers = list_flight_triggers(data.group.path, data.trial_id)
    except ComgraError:
        return []
    out = []
    for trigger in triggers:
        try:
            rows = read_flight(data.group.path, data.trial_id, trigger.name)
        except (ComgraError, OSError, ValueError):
            continue
        if trigger.kind == "non_finite":
            finding = _non_finite(data, trigger, rows)
        else:
            finding = _spike(data, trigger, rows)
        if finding is not None:
            out.append(finding)
    return out


def _graph_position(data: TrialData, after_step: int) -> dict[str, int]:
    """Node -> position in the forward order of the first recorded step from
    ``after_step`` on (else the last one before it)."""
    steps = list(data.step_iterations)
    if not steps:
        return {}
    later = [s for s in steps if s >= after_step]
    step = later[0] if later else steps[-1]
    position: dict[str, int] = {}
    for it in data.step_iterations[step]:
        graph = data.graph(step, it)
        if graph is None:
            continue
        for name in topological(graph):
            position.setdefault(name, len(position))
    return position


def _non_finite(data: TrialData, trigger: FlightTrigger, rows: pd.DataFrame) -> Finding | None:
    bad = rows[non_finite_rows(rows[list(STATISTICS)].to_numpy(np.float64))]
    if bad.empty:
        return None
    first_step = int(bad["training_step"].min())
    bad = bad[bad["training_step"] == first_step]
    position = _graph_position(data, trigger.step)
    big = len(position) + 1_000_000

    def rank(r) -> tuple:
        role_rank = _ROLE_RANK.get(r.role, 4)
        if r.role == "value":
            return (role_rank, position.get(r.node, big), r.order)
        return (role_rank, r.order)  # gradients: the order backward reached them

    origin = min(bad.itertuples(index=False), key=rank)
    steps_before = sorted(int(s) for s in rows["training_step"].unique() if s < first_step)
    # NaN counts: not counted (a GPU's batched parameter rows)
    nan, inf = (float(c) if math.isfinite(float(c)) else 0.0
                for c in (origin.nan_count, origin.inf_count))
    what = " and ".join(p for p in (f"{round(nan)} NaN" if nan else "",
                                    f"{round(inf)} Inf" if inf else "") if p) \
        or ("NaN values" if math.isnan(origin.abs_max) else "Inf values") + " (not counted)"
    order_word = ("the forward order of the dependency graph" if position
                  and origin.role == "value" else "the order the step computed them")
    explanation = (
        f"Flight recorder: the first non-finite data is at step {first_step} (every step "
        f"before it was kept: {len(steps_before)} finite steps in the window "
        f"{trigger.window[0]}-{trigger.window[1]}); the first non-finite tensor in "
        f"{order_word} is the {origin.role} of {origin.node!r} ({origin.name}) with {what} "
        f"among its {int(origin.numel)} values; {len(bad) - 1} more rows of that step are "
        f"non-finite.")
    return Finding(
        kind=KIND_PREFIX + trigger.kind, severity=ERROR, trial_id=data.trial_id,
        steps=(first_step,), node=str(origin.node), role=str(origin.role),
        recording_type=str(origin.role), explanation=explanation,
        where=_where(data, trigger, str(origin.node)),
        numbers={"first_step": first_step, "trigger_step": trigger.step,
                 "window": list(trigger.window), "flight_window": trigger.name,
                 "tensor": str(origin.name), "nan_count": nan, "inf_count": inf,
                 "other_non_finite_rows": len(bad) - 1})


def first_movers(rows: pd.DataFrame, limit: int = 3) -> list[dict]:
    """The series (tensor name and role) that left their range first in a window:
    [{name, node, role, step, value, median}], earliest first."""
    steps = np.sort(rows["training_step"].unique())
    if len(steps) < 4:
        return []
    base_steps = steps[: max(2, len(steps) // 2)]
    movers = []
    for (name, role), g in rows.groupby(["name", "role"], sort=False):
        stat = "mean" if role == "value" and g["kind"].iloc[0] == "loss" else "l2_norm"
        g = g.drop_duplicates("training_step").sort_values("training_step")
        values = g[stat].to_numpy(np.float64)
        base = values[np.isin(g["training_step"].to_numpy(), base_steps)
                      & np.isfinite(values)]
        if len(base) < 2:
            continue
        med = float(np.median(base))
        scale = max(1.4826 * float(np.median(np.abs(base - med))), _MOVE_FLOOR * abs(med),
                    1e-12)
        out = np.flatnonzero((np.abs(values - med) > _MOVE_MADS * scale)
                             & (g["training_step"].to_numpy() > base_steps[-1]))
        if len(out):
            i = int(out[0])
            movers.append({"name": name, "node": str(g["node"].iloc[0]), "role": role,
                           "step": int(g["training_step"].iloc[i]), "value": float(values[i]),
                           "median": med, "statistic": stat,
                           "order": int(g["order"].iloc[i])})
    movers.sort(key=lambda m: (m["step"], _ROLE_RANK.get(m["role"], 4), m["order"]))
    return movers[:limit]


def _spike(data: TrialData, trigger: FlightTrigger, rows: pd.DataFrame) -> Finding:
    movers = first_movers(rows)
    what = {"loss_spike": "the loss", "grad_norm_spike": "the gradient norm",
            "update_spike": "the update / weight ratio",
            "predicate": "your predicate"}.get(trigger.kind, trigger.kind)
    value = "" if trigger.value is None else f" ({fmt(trigger.value)}"
    if value and "median" in trigger.record:
        value += f" against a window median of {fmt(float(trigger.record['median']))}"
    value += ")" if value else ""
    if movers:
        first = movers[0]
        moved = "; ".join(f"the {m['role']} of {m['name']!r} at step {m['step']} "
                          f"({m['statistic']} {fmt(m['value'])} against {fmt(m['median'])})"
                          for m in movers)
        origin = f"The statistics that moved first in the window: {moved}."
        node, role = first["node"], first["role"]
    else:
        origin = "No tensor's statistics left their range before it in the window."
        node, role = trigger.node, trigger.role
    explanation = (f"Flight recorder: {what} spiked at step {trigger.step}{value}. {origin}")
    return Finding(
        kind=KIND_PREFIX + trigger.kind, severity=WARNING, trial_id=data.trial_id,
        steps=(movers[0]["step"] if movers else trigger.step, trigger.step), node=node,
        role=role, recording_type=role, explanation=explanation,
        where=_where(data, trigger, node),
        numbers={"trigger_step": trigger.step, "value": trigger.value,
                 "window": list(trigger.window), "flight_window": trigger.name,
                 "first_movers": movers})


def _where(data: TrialData, trigger: FlightTrigger, node: str | None) -> dict:
    """The first recorded step from the trigger on (the steps after a trigger are
    recorded in full), at the origin's node."""
    later = [s for s in data.step_iterations if s >= trigger.step]
    step = later[0] if later else None
    return where(data.trial_id, step=step,
                 type_of_execution=None if step is None else data.type_of_execution.get(step),
                 node=node)
