"""First non-finite value: the earliest recorded step with a NaN or Inf anywhere, and the
tensor in it where the non-finite values start.

Reads the ``nan_count`` and ``inf_count`` statistics the writer stores for every row
(values, gradients and updates). Within that step the order is the order of the step
itself: the forward pass first (iterations ascending, each iteration's dependency graph
in topological order, step-wide tensors such as parameters before everything), then the
gradients (backwards: iterations descending, the graph in reverse), then the updates.
The origin is the first non-finite tensor in that order whose inputs (for gradients:
the tensors that use it) are all finite: the place where a finite computation produced
a NaN or Inf, e.g. ``log`` of a value that reached 0. A parameter that is already
non-finite in the forward pass was made so by an update of an earlier, unrecorded step.

Recordings are usually sparse: the first *recorded* non-finite step can come after the
first non-finite step of training. The finding names the last finite recorded step too:
the problem started between the two.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from ..vocabulary import (
    BATCH_ABS_MAX,
    FORWARD,
    INPUT,
    NO_BATCH,
    PARAMETER,
    UPDATE,
    is_gradient,
)
from .core import ERROR, Finding, TrialData, where
from .graph_order import Key, backward_order, forward_order

KIND = "first_non_finite"


def detect(data: TrialData) -> list[Finding]:
    s = data.stats
    if s.empty:
        return []
    bad_mask = ((s["nan_count"] > 0) | (s["inf_count"] > 0)).to_numpy()
    if not bad_mask.any():
        return []
    first_step = int(s["training_step"].to_numpy()[bad_mask].min())
    earlier = [step for step in data.step_iterations if step < first_step]
    last_finite = earlier[-1] if earlier else None

    rows = s[(s["training_step"] == first_step).to_numpy() & bad_mask]
    counts = _counts(rows)  # (node, role, iteration, recording type) -> (nan, inf, numel)
    bad_types = {k[3] for k in counts}
    iterations = data.step_iterations.get(first_step, sorted({int(k[2]) for k in counts}))
    graphs = [(it, data.graph(first_step, it)) for it in iterations]

    origin: tuple[Key, str] | None = None
    if FORWARD in bad_types:
        bad = {k[:3] for k in counts if k[3] == FORWARD}
        origin = _first_origin(forward_order(graphs), bad, FORWARD)
    if origin is None:
        for recording_type in sorted(t for t in bad_types if is_gradient(t)):
            bad = {k[:3] for k in counts if k[3] == recording_type}
            origin = _first_origin(backward_order(graphs), bad, recording_type)
            if origin is not None:
                break
    if origin is None:
        # Nothing fits the graph (a tensor outside every graph, or only updates): the
        # first non-finite row in the order of the step, forward before gradients
        # before updates.
        order = {FORWARD: 0, UPDATE: 2}
        key = min(counts, key=lambda k: (order.get(k[3], 1), k[2], k[0], k[1]))
        origin = (key[:3], key[3])

    (node, role, iteration), recording_type = origin
    nan, inf, numel = counts[(node, role, iteration, recording_type)]
    others = len(counts) - 1
    what = _what(nan, inf, numel, _has(rows, node, role, BATCH_ABS_MAX))
    quantity = {FORWARD: "value", UPDATE: "update"}.get(recording_type, "gradient")
    before = ("it is the first recorded step" if last_finite is None
              else f"the recorded step before it, {last_finite}, was finite")
    if recording_type == FORWARD:
        kind = _kind(rows, node, role)
        cause = {PARAMETER: "it is a parameter: an update of an earlier, unrecorded step "
                            "made it so",
                 INPUT: "it is an input: the data itself is not finite"}.get(
                     kind, "everything it depends on is finite")
    elif recording_type == UPDATE:
        cause = "the values and gradients of the step are finite"
    else:
        cause = "every value is finite and so are the gradients of what uses it"
    explanation = (f"First non-finite data at step {first_step} ({before}): the {quantity} "
                   f"of {node!r} (role {role!r}, iteration {iteration}, {recording_type}) "
                   f"has {what}, while {cause}; {others} more tensor rows of this step are "
                   "non-finite after it.")
    statistic = "nan_count" if nan else "inf_count"
    aggregation = BATCH_ABS_MAX if _has(rows, node, role, BATCH_ABS_MAX) else NO_BATCH
    return [Finding(
        kind=KIND, severity=ERROR, trial_id=data.trial_id, steps=(first_step,), node=node,
        role=role, recording_type=recording_type, explanation=explanation,
        where=where(data.trial_id, step=first_step,
                    type_of_execution=data.type_of_execution.get(first_step),
                    iteration=iteration, node=node, role=role, recording_type=recording_type,
                    aggregation=aggregation, statistic=statistic),
        numbers={"first_step": first_step, "last_finite_step": last_finite,
                 "iteration": iteration, "nan_count": nan, "inf_count": inf,
                 "values_per_sample": numel, "other_non_finite_rows": others},
    )]


def _counts(rows: pd.DataFrame) -> dict[tuple[str, str, int, str], tuple[float, float, float]]:
    """Largest NaN and Inf count per sample (or per tensor) of each non-finite tensor."""
    out: dict[tuple[str, str, int, str], tuple[float, float, float]] = {}
    for node, role, it, rt, nan, inf, numel in zip(
            rows["node"].astype(str), rows["role"].astype(str), rows["iteration"],
            rows["recording_type"].astype(str), rows["nan_count"], rows["inf_count"],
            rows["numel"]):
        key = (node, role, int(it), rt)
        old = out.get(key, (0.0, 0.0, float(numel)))
        out[key] = (max(old[0], float(nan)), max(old[1], float(inf)), float(numel))
    return out


def _what(nan: float, inf: float, numel: float, batched: bool) -> str:
    parts = []
    if nan:
        parts.append(f"{round(nan)} NaN")
    if inf:
        parts.append(f"{round(inf)} Inf")
    per = " (in the sample with the most)" if batched else ""
    return " and ".join(parts) + f" among its {int(numel)} values{per}"


def _kind(rows: pd.DataFrame, node: str, role: str) -> str | None:
    match = rows[(rows["node"] == node).to_numpy() & (rows["role"] == role).to_numpy()]
    return str(match["kind"].iloc[0]) if len(match) else None


def _has(rows: pd.DataFrame, node: str, role: str, aggregation: str) -> bool:
    return bool(((rows["node"] == node) & (rows["role"] == role)
                 & (rows["aggregation"] == aggregation)).any())


def _first_origin(order: Iterator[tuple[Key, list[Key]]], bad: set[Key],
                  recording_type: str) -> tuple[Key, str] | None:
    seen: set[Key] = set()
    for key, neighbours in order:
        if key in seen:
            continue
        seen.add(key)
        if key in bad and not any(k in bad for k in neighbours if k != key):
            return key, recording_type
    return None

