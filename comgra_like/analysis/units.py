"""Dead units and saturated units, per node, with the fraction affected.

A *unit* is one value position of a tensor (a neuron of an activation). The statistics
describe whole tensors, so they only pick the candidates; which units are dead or
saturated needs the per-unit batch aggregates the writer stores with the values
(``batch_abs_max`` and ``batch_mean`` rows: per unit, the largest absolute value and the
mean over the *whole* batch, not only the recorded samples). These are read with one
``read_tensor`` per candidate tensor and step of the window, and only for candidates.

Window: the last ``WINDOW`` recorded steps (every iteration of them).

Dead: a unit of a calculated tensor whose value is exactly 0 for every sample of every
batch in the window. Candidates are the tensors whose ``batch_abs_max`` row has ``min``
0 (every sample's smallest value is 0: ReLU-like outputs) or ``max`` 0; a tensor whose
``abs_max`` is 0 is dead as a whole without reading its units. Dead units in a tensor
whose values change sign (a unit stuck at exactly 0 while its neighbours are negative) are
not looked for; LeakyReLU units never die in this sense.

Saturated: units of a bounded activation pinned at a bound, where its derivative is
nearly 0. A tensor counts as sigmoid-like when every recorded value in the trial lies in
[0, 1], as tanh-like when in [-1, 1] with negative values (``batch_abs_max`` ``abs_max`` at
most 1; the sign from the ``min`` of the ``batch_mean`` and sample rows). A unit is
saturated when its mean over the batch is within ``EPSILON`` (1e-3, where the sigmoid's
derivative is below 1e-3 and tanh's below 2e-3) of 1 (or of -1 for tanh-like tensors),
or, for sigmoid-like tensors, when its largest value is above 0 and at most ``EPSILON``
(exact zeros are dead units). Per-sample losses are left out (a perfect fit pins them
at 0), as are inputs and targets.

Severity: warning when at least half the units of a tensor are affected, else info.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary import BATCH_ABS_MAX, BATCH_MEAN, CALCULATED, FORWARD, SAMPLE
from .core import INFO, WARNING, Finding, TrialData, fmt, where

DEAD, SATURATED = "dead_units", "saturated_units"
WINDOW = 5
EPSILON = 1e-3
WARNING_FRACTION = 0.5
MAX_READS = 400  # per detector and trial: a bound on tensor reads for huge graphs


def detect(data: TrialData) -> list[Finding]:
    return [*dead_units(data), *saturated_units(data)]


def _window(data: TrialData) -> list[int]:
    return list(data.step_iterations)[-WINDOW:]


def _forward(data: TrialData, aggregation: str) -> pd.DataFrame:
    """Calculated tensors of the iterations; step-wide ones (iteration -1) are initial
    values such as a zero memory, set by the script, not computed by units."""
    rows = data.rows(recording_type=FORWARD, aggregation=aggregation, kinds=(CALCULATED,))
    return rows[rows["iteration"] >= 0]


def dead_units(data: TrialData) -> list[Finding]:
    steps = _window(data)
    rows = _forward(data, BATCH_ABS_MAX)
    rows = rows[rows["training_step"].isin(steps) & (rows["numel"] > 0)]
    findings = []
    reads = 0
    for (node, role), part in rows.groupby(["node", "role"], observed=True, sort=True):
        node, role = str(node), str(role)
        if not ((part["min"] == 0).all() or (part["max"] == 0).all()):
            continue
        numel = int(part["numel"].iloc[0])
        if (part["abs_max"] == 0).all():
            dead = np.ones(numel, bool)
        else:
            dead = None
            for step, iteration in zip(part["training_step"], part["iteration"]):
                if reads >= MAX_READS:
                    dead = None
                    break
                reads += 1
                values = data.unit_values(int(step), int(iteration), node, role, BATCH_ABS_MAX)
                if values is None or values.size != numel:
                    dead = None
                    break
                zero = values == 0
                dead = zero if dead is None else dead & zero
                if not dead.any():
                    break
            if dead is None or not dead.any():
                continue
        findings.append(_unit_finding(data, DEAD, node, role, part, dead, numel,
                                      "exactly 0 for every sample", BATCH_ABS_MAX, "abs_max"))
    return findings


def _bounded(data: TrialData) -> dict[tuple[str, str], str]:
    """(node, role) -> 'sigmoid' or 'tanh' for tensors whose values stay in [0, 1] or
    [-1, 1] over the whole trial."""
    absmax = _forward(data, BATCH_ABS_MAX)
    if absmax.empty:
        return {}
    top = absmax.groupby(["node", "role"], observed=True)["abs_max"].max()
    lows = pd.concat([_forward(data, BATCH_MEAN)[["node", "role", "min"]],
                      _forward(data, SAMPLE)[["node", "role", "min"]]])
    low = lows.groupby(["node", "role"], observed=True)["min"].min()
    skip = set(data.per_sample_losses)
    out = {}
    for (node, role), value in top.items():
        key = (str(node), str(role))
        if not np.isfinite(value) or value > 1 or key in skip:
            continue
        smallest = low.get((node, role), np.nan)
        if not np.isfinite(smallest):
            continue
        out[key] = "sigmoid" if smallest >= 0 else "tanh"
    return out


def saturated_units(data: TrialData) -> list[Finding]:
    shapes = _bounded(data)
    if not shapes:
        return []
    steps = _window(data)
    rows = _forward(data, BATCH_MEAN)
    rows = rows[rows["training_step"].isin(steps) & (rows["numel"] > 0)]
    findings = []
    reads = 0
    for (node, role), part in rows.groupby(["node", "role"], observed=True, sort=True):
        node, role = str(node), str(role)
        shape = shapes.get((node, role))
        if shape is None:
            continue
        numel = int(part["numel"].iloc[0])
        pinned = None
        for step, iteration in zip(part["training_step"], part["iteration"]):
            if reads >= MAX_READS:
                pinned = None
                break
            reads += 2
            mean = data.unit_values(int(step), int(iteration), node, role, BATCH_MEAN)
            top = data.unit_values(int(step), int(iteration), node, role, BATCH_ABS_MAX)
            if mean is None or top is None or mean.size != numel or top.size != numel:
                pinned = None
                break
            if shape == "sigmoid":
                now = (mean >= 1 - EPSILON) | ((top > 0) & (top <= EPSILON))
            else:
                now = np.abs(mean) >= 1 - EPSILON
            pinned = now if pinned is None else pinned & now
            if not pinned.any():
                break
        if pinned is None or not pinned.any():
            continue
        bounds = "0 or 1" if shape == "sigmoid" else "-1 or 1"
        findings.append(_unit_finding(data, SATURATED, node, role, part, pinned, numel,
                                      f"within {fmt(EPSILON)} of {bounds} (its bounds) over "
                                      "the batch", BATCH_MEAN, "mean"))
    return findings


def _unit_finding(data: TrialData, kind: str, node: str, role: str, part: pd.DataFrame,
                  affected: np.ndarray, numel: int, how: str, aggregation: str,
                  statistic: str) -> Finding:
    count = int(affected.sum())
    fraction = count / max(numel, 1)
    steps = sorted({int(s) for s in part["training_step"]})
    last = steps[-1]
    iteration = int(part[part["training_step"] == last]["iteration"].max())
    units = np.flatnonzero(affected)
    listed = ", ".join(str(int(u)) for u in units[:8]) + ("…" if len(units) > 8 else "")
    word = "dead" if kind == DEAD else "saturated"
    explanation = (f"{count} of {numel} units of {node!r} ({fmt(100 * fraction)} %) are "
                   f"{word}: {how} in each of the last {len(steps)} recorded steps "
                   f"({steps[0]}–{last}); units {listed}.")
    return Finding(
        kind=kind, severity=WARNING if fraction >= WARNING_FRACTION else INFO,
        trial_id=data.trial_id, steps=tuple(steps), node=node, role=role,
        recording_type=FORWARD, explanation=explanation,
        where=where(data.trial_id, step=last, type_of_execution=data.type_of_execution.get(last),
                    iteration=iteration, node=node, role=role, recording_type=FORWARD,
                    aggregation=aggregation, statistic=statistic),
        numbers={"units": numel, "affected": count, "fraction": fraction,
                 "unit_indices": [int(u) for u in units[:100]]},
    )
