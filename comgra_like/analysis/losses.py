"""Loss spikes over the steps and outlier samples within a batch.

Spikes: the value of every loss node (kind ``loss``, its ``forward`` ``mean``) at each
recorded step, per type of execution (the tutorial's sequence lengths have losses of
different sizes) and iteration, against its trend: the median of the previous
``TREND_STEPS`` recorded steps of the same series. A step is a spike when its loss is
more than ``SPIKE_FACTOR`` times the trend and further above it than ``SPIKE_SPREADS``
robust standard deviations (1.4826 x the median absolute deviation of those steps).
Non-finite losses are left to ``first_non_finite``.

Outlier samples: for the per-sample losses (tensors with one value per sample that a
loss node depends on directly), the batch's largest per-sample loss (``batch_abs_max``)
against the other samples of the batch, whose mean and standard deviation follow from
the batch's (``batch_mean`` and ``batch_std`` rows, over the whole batch, and its size):
a z-score above ``OUTLIER_Z`` that is also more than ``OUTLIER_FACTOR`` times the others'
mean. Healthy per-sample losses are skewed: in a batch of 128 a squared error's largest
value sits about 5 standard deviations and 10 times the mean above the rest, and noise
of a scale that varies per sample gives 30 times on a batch of 16; a corrupted target
gives thousands. When a recorded sample
is the one, it is named.
"""

from __future__ import annotations

import numpy as np

from ..vocabulary import BATCH_ABS_MAX, BATCH_MEAN, BATCH_STD, FORWARD, LOSS, NO_BATCH, SAMPLE
from .core import WARNING, Finding, TrialData, fmt, where

SPIKE, OUTLIER = "loss_spike", "outlier_sample"
TREND_STEPS = 10
MIN_TREND_STEPS = 5
SPIKE_FACTOR = 3.0
SPIKE_SPREADS = 6.0
OUTLIER_Z = 10.0
OUTLIER_FACTOR = 100.0
MIN_BATCH = 4


def detect(data: TrialData) -> list[Finding]:
    return [*spikes(data), *outlier_samples(data)]


def spikes(data: TrialData) -> list[Finding]:
    rows = data.rows(recording_type=FORWARD, aggregation=NO_BATCH, kinds=(LOSS,))
    rows = rows[np.isfinite(rows["mean"].to_numpy())]
    findings = []
    for (node, role, toe, iteration), part in rows.groupby(
            ["node", "role", "type_of_execution", "iteration"], observed=True, sort=True):
        series = part.sort_values("training_step")
        values = series["mean"].to_numpy(np.float64)
        steps = series["training_step"].to_numpy()
        hits = []
        for i in range(MIN_TREND_STEPS, len(values)):
            before = values[max(0, i - TREND_STEPS):i]
            trend = float(np.median(before))
            spread = 1.4826 * float(np.median(np.abs(before - trend)))
            if trend <= 0:
                continue
            if values[i] > SPIKE_FACTOR * trend and values[i] - trend > SPIKE_SPREADS * spread:
                hits.append((int(steps[i]), float(values[i]), trend))
        if not hits:
            continue
        step, value, trend = max(hits, key=lambda h: h[1] / h[2])
        others = len(hits) - 1
        explanation = (f"Loss spike at step {step}: {node!r} is {fmt(value)}, "
                       f"{fmt(value / trend)} times its trend ({fmt(trend)}, the median of the "
                       f"{min(TREND_STEPS, len(values))} recorded steps before"
                       f"{'' if str(toe) == 'main_execution_type' else f' of {toe}'})"
                       f"{f'; {others} more spikes' if others else ''}.")
        findings.append(Finding(
            kind=SPIKE, severity=WARNING, trial_id=data.trial_id,
            steps=tuple(h[0] for h in hits), node=str(node), role=str(role),
            recording_type=FORWARD, explanation=explanation,
            where=where(data.trial_id, step=step, type_of_execution=str(toe),
                        iteration=int(iteration), node=str(node), role=str(role),
                        recording_type=FORWARD, aggregation=NO_BATCH, statistic="mean"),
            numbers={"step": step, "loss": value, "trend": trend, "factor": value / trend,
                     "spikes": len(hits)},
        ))
    return findings


def outlier_samples(data: TrialData) -> list[Finding]:
    findings = []
    forward = data.rows(recording_type=FORWARD)
    sizes = dict(zip(data.steps["training_step"].astype(int), data.steps["batch_size"]))
    for node, role in data.per_sample_losses:
        rows = forward[(forward["node"] == node).to_numpy() & (forward["role"] == role).to_numpy()]
        if rows.empty:
            continue
        table = rows.pivot_table(index=["training_step", "iteration"], columns="aggregation",
                                 values="mean", aggfunc="first", observed=True)
        if not {BATCH_ABS_MAX, BATCH_MEAN, BATCH_STD} <= set(table.columns):
            continue
        top, mean, std = (table[a].to_numpy(np.float64)
                          for a in (BATCH_ABS_MAX, BATCH_MEAN, BATCH_STD))
        b = np.array([float(sizes.get(int(s), 0)) for s, _ in table.index])
        z, rest_mean = _leave_one_out(top, mean, std, b)
        outlier = (np.isfinite(z) & (z > OUTLIER_Z) & (top > OUTLIER_FACTOR * np.abs(rest_mean))
                   & (b >= MIN_BATCH))
        if not outlier.any():
            continue
        hits = [(int(s), int(i), float(t), float(m), float(zz))
                for (s, i), t, m, zz, o in zip(table.index, top, rest_mean, z, outlier) if o]
        step, iteration, value, others_mean, score = max(hits, key=lambda h: h[4])
        samples = rows[(rows["training_step"] == step).to_numpy()
                       & (rows["iteration"] == iteration).to_numpy()
                       & (rows["aggregation"] == SAMPLE).to_numpy()]
        named = samples[np.isclose(samples["mean"].to_numpy(np.float64), value, rtol=1e-5)]
        sample = int(named["sample_index"].iloc[0]) if len(named) else None
        which = (f"recorded sample {sample}" if sample is not None
                 else "a sample that is not among the recorded ones")
        explanation = (f"Outlier sample at step {step}: the largest per-sample {node!r} is "
                       f"{fmt(value)} ({which}), {fmt(score)} standard deviations above the "
                       f"mean of the rest of the batch ({fmt(others_mean)})"
                       f"{f'; {len(hits) - 1} more steps have one' if len(hits) > 1 else ''}.")
        findings.append(Finding(
            kind=OUTLIER, severity=WARNING, trial_id=data.trial_id,
            steps=tuple(h[0] for h in hits), node=node, role=role, recording_type=FORWARD,
            explanation=explanation,
            where=where(data.trial_id, step=step,
                        type_of_execution=data.type_of_execution.get(step), iteration=iteration,
                        node=node, role=role, recording_type=FORWARD,
                        aggregation=SAMPLE if sample is not None else BATCH_ABS_MAX,
                        sample_index=sample if sample is not None else -1, statistic="mean"),
            numbers={"step": step, "loss": value, "rest_mean": others_mean, "z": score,
                     "sample_index": sample, "steps_with_outliers": len(hits)},
        ))
    return findings


def _leave_one_out(top: np.ndarray, mean: np.ndarray, std: np.ndarray, b: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """z-score of the batch's largest value against the other B - 1 values, and their
    mean, from the batch's mean, std (ddof 1) and size: unlike a z-score against the
    whole batch, which cannot exceed (B - 1) / sqrt(B), it grows with the outlier."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        total = b * mean
        squares = (b - 1) * std * std + b * mean * mean
        rest_mean = (total - top) / (b - 1)
        rest_var = (squares - top * top - (b - 1) * rest_mean * rest_mean) / (b - 2)
        rest_std = np.sqrt(np.maximum(rest_var, 0))
        # Float32 statistics leave rounding noise in rest_var: a floor relative to the mean.
        # and in the difference of squares when one value dominates: floors for both.
        rest_std = np.maximum(rest_std, 1e-3 * np.maximum(np.abs(rest_mean), np.abs(top)))
        return (top - rest_mean) / rest_std, rest_mean
