"""Correlation hints: does the per-sample loss rise (or fall) with a statistic of a tensor?

For each per-sample loss (a tensor with one value per sample that a loss node depends
on directly, like the tutorial's ``loss_per_sample``) and each other tensor with
recorded samples, in the same iteration as the loss or step-wide: for each statistic of
a sample (mean, mean |x|, std, max |x|, min, max, L2 norm) the rank (Spearman)
correlation with the sample's loss, taken *within* steps: both are ranked among the
samples of their step, and the ranks, centred, are pooled over the steps. Ranking within
a step keeps what changes over training (the loss falls while the weights grow) from
looking like a relation between the two, and one extreme sample from deciding it.

The strongest ``TOP`` tensors (the strongest statistic of each) with ``|r| >= MIN_R``
over at least ``MIN_SAMPLES`` samples from ``MIN_STEPS`` steps are reported, as info: a
hint where to look, not a diagnosis. Hundreds of (tensor, statistic) pairs are tried, so
a strength must also stand out from chance: ``|r| * sqrt(n - steps - 1)`` (about a
standard normal without a relation; ``n - steps`` samples are free once each step is
centred) must reach ``MIN_Z`` = 3.5, what 0.05 / 400 tries needs. 25 samples from 5 steps
need |r| > 0.80; 300 from 60 steps |r| > 0.23. In the tutorial (2,400 steps, 5 samples
of 60 recorded steps) this leaves the output's spread and the mean |x| of the last layer
(r = -0.33: confident outputs, low loss); ``helper_partial_sums``, whose final running sum
near 0 makes a channel hard, reaches r = -0.4 to -0.6 on the roles of the long sequences,
but from 25 samples each: not enough to tell from chance. (Its relation is per channel,
and a sample's loss averages 5 channels.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary import FORWARD, LOSS, SAMPLE, STATISTIC_LABELS
from .core import INFO, Finding, TrialData, fmt, where

KIND = "correlation"
STATISTICS = ("mean", "abs_mean", "std", "abs_max", "min", "max", "norm")
TOP = 5
MIN_R = 0.3
MIN_SAMPLES = 20
MIN_STEPS = 3
MIN_Z = 3.5


def detect(data: TrialData) -> list[Finding]:
    losses = data.per_sample_losses
    if not losses:
        return []
    samples = data.rows(recording_type=FORWARD, aggregation=SAMPLE)
    samples = samples[samples["kind"] != LOSS]
    if samples.empty:
        return []
    keys = ["training_step", "iteration", "sample_index"]
    findings = []
    for loss_node, loss_role in losses:
        is_loss = ((samples["node"] == loss_node) & (samples["role"] == loss_role)).to_numpy()
        target = samples[is_loss][keys + ["mean"]].rename(columns={"mean": "loss"})
        if len(target) < MIN_SAMPLES:
            continue
        others = samples[~is_loss][["node", "role", *keys, *STATISTICS]]
        # The loss's own iteration, and step-wide tensors (iteration -1) of its step.
        same = others.merge(target, on=keys, how="inner")
        wide = others[others["iteration"] == -1].drop(columns="iteration").merge(
            target.drop_duplicates(["training_step", "sample_index"]),
            on=["training_step", "sample_index"], how="inner")
        merged = pd.concat([same, wide], ignore_index=True)
        if merged.empty:
            continue
        merged["node"] = merged["node"].astype(str)
        merged["role"] = merged["role"].astype(str)
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite samples drop out
            results = _correlate(merged)
        free = np.maximum(results["n"] - results["steps"] - 1, 0)
        results = results.assign(z=results["r"].abs() * np.sqrt(free))
        results = results[(results["n"] >= MIN_SAMPLES) & (results["steps"] >= MIN_STEPS)
                          & (results["r"].abs() >= MIN_R) & (results["z"] >= MIN_Z)]
        if results.empty:
            continue
        best = results.loc[results["r"].abs().groupby([results["node"], results["role"]])
                           .idxmax()]
        best = best.reindex(best["r"].abs().sort_values(ascending=False).index).head(TOP)
        for row in best.itertuples(index=False):
            findings.append(_finding(data, loss_node, row, merged))
    return findings


def _correlate(merged: pd.DataFrame) -> pd.DataFrame:
    """Within-step rank correlation of each (node, role, statistic) with the loss."""
    group = merged.groupby(["node", "role", "training_step"], sort=False)
    y = group["loss"].rank().to_numpy(np.float64)
    yc = y - group["loss"].transform("count").add(1).div(2).to_numpy(np.float64)
    out = []
    by_tensor = [merged["node"], merged["role"]]
    steps = merged.groupby(["node", "role"], sort=False)["training_step"].nunique()
    for statistic in STATISTICS:
        x = group[statistic].rank().to_numpy(np.float64)
        xc = x - (group[statistic].transform("count").to_numpy(np.float64) + 1) / 2
        ok = np.isfinite(xc) & np.isfinite(yc)
        frame = pd.DataFrame({"xy": np.where(ok, xc * yc, 0.0), "xx": np.where(ok, xc * xc, 0.0),
                              "yy": np.where(ok, yc * yc, 0.0), "n": ok.astype(np.int64)})
        sums = frame.groupby(by_tensor, sort=False).sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            r = sums["xy"] / np.sqrt(sums["xx"] * sums["yy"])
        part = pd.DataFrame({"r": r, "n": sums["n"]}).reset_index()
        part["statistic"] = statistic
        part["steps"] = steps.reindex(pd.MultiIndex.from_frame(part[["node", "role"]])).to_numpy()
        # A statistic that never varies within a step (or a loss that does not) says nothing.
        out.append(part[np.isfinite(part["r"]) & (sums["xx"].to_numpy() > 1e-24)])
    return pd.concat(out, ignore_index=True)


def _finding(data: TrialData, loss_node: str, row, merged: pd.DataFrame) -> Finding:
    label = STATISTIC_LABELS.get(row.statistic, row.statistic)
    direction = "rises" if row.r > 0 else "falls"
    these = merged[(merged["node"] == row.node) & (merged["role"] == row.role)]
    # Where to look: the sample with the highest loss among those correlated.
    top = these.loc[these["loss"].idxmax()]
    step = int(top["training_step"])
    explanation = (f"Per-sample {loss_node!r} is higher where the {label} of {row.node!r} "
                   f"(role {row.role!r}) {direction}: r = {fmt(row.r)} over {int(row.n)} "
                   f"samples of {int(row.steps)} steps (rank correlation within steps, "
                   f"{fmt(row.z)} standard errors from none).")
    return Finding(
        kind=KIND, severity=INFO, trial_id=data.trial_id, steps=(step,), node=row.node,
        role=row.role, recording_type=FORWARD, explanation=explanation,
        where=where(data.trial_id, step=step, type_of_execution=data.type_of_execution.get(step),
                    iteration=int(top["iteration"]), node=row.node, role=row.role,
                    recording_type=FORWARD, aggregation=SAMPLE,
                    sample_index=int(top["sample_index"]), statistic=row.statistic),
        numbers={"r": float(row.r), "z": float(row.z), "samples": int(row.n),
                 "steps": int(row.steps),
                 "statistic": row.statistic, "loss_node": loss_node},
    )
