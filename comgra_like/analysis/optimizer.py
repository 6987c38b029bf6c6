"""The optimizer's state as findings (``watch(model, optimizer=opt)``, docs/OPTIMIZER.md),
over ``query/optimizer.py``'s read. Per parameter, over its recorded optimizer steps:

- ``optimizer_eps_dominated`` (warning): Adam's eps is larger than sqrt(v_hat) for most
  of the parameter's elements (median over the steps of ``eps_dominated`` above
  EPS_SHARE): the update no longer follows the gradient's scale; eps is too large for
  these gradients (or the gradients too small). Left out for a parameter whose gradient
  is numerical noise (its RMS below NO_GRADIENT of the median parameter's, on the median
  step): an attention key's bias, which softmax makes gradient-free by construction.
- ``optimizer_update_high`` (warning; error above UPDATE_ERROR), one per trial: the
  model's update/weight ratio stays above UPDATE_WARNING: per step the median over the
  parameters, then the median over the steps after the first (Adam's first step moves
  every weight by about lr); parameters whose weight norm before the update is below
  MIN_WEIGHT_NORM are left out (a zero-initialised bias moves by about its own size for
  a while). A learning rate far too large. Measured, 8 steps of AdamW: healthy GPT-2,
  BERT, ViT at lr 1e-3 0.02-0.05, T5 0.003; GPT-2 and ViT at lr 1e-1 0.19 (1e-2: 0.15).
- ``optimizer_second_moment_collapse`` (warning): the mean of Adam's second moment
  fell below COLLAPSE of its largest recorded value, while the parameter is still
  updated: the gradients vanished and Adam's per-element step grows towards lr / eps.

Calibrated on healthy runs of the real-model suite's tiny transformers (AdamW, lr 1e-3,
8 steps): none of them raises any (tests/optimizer/test_detector.py).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import ComgraError
from ..query.optimizer import GLOBAL, read_optimizer_state
from .core import ERROR, WARNING, Finding, TrialData, fmt, where

EPS_DOMINATED = "optimizer_eps_dominated"
UPDATE_HIGH = "optimizer_update_high"
COLLAPSE_KIND = "optimizer_second_moment_collapse"

EPS_SHARE = 0.5
UPDATE_WARNING, UPDATE_ERROR = 0.1, 1.0
COLLAPSE = 1e-6
NO_GRADIENT = 1e-4  # a gradient this far below the model's median is numerical noise
MIN_WEIGHT_NORM = 1e-2  # the update ratio of a weight that (nearly) starts at zero says little


def detect(data: TrialData) -> list[Finding]:
    try:
        frame = read_optimizer_state(data.group, data.trial_id)
    except (ComgraError, OSError, ValueError):
        return []
    if frame.empty:
        return []
    frame = frame[~frame["parameter"].isin(["optimizer"])
                  & ~frame["parameter"].str.match(r"^optimizer_\d+$")]
    frame = frame[~frame["quantity"].isin(GLOBAL) | frame["quantity"].eq("grad_norm")]
    wide = frame.pivot_table(index=["parameter", "training_step"], columns="quantity",
                             values="value", aggfunc="last")
    relative = _relative_gradient(wide)
    out: list[Finding] = []
    for parameter, rows in wide.groupby(level="parameter", sort=True):
        rows = rows.droplevel("parameter").sort_index()
        if relative.get(parameter, 1.0) >= NO_GRADIENT:
            out.extend(_eps(data, str(parameter), rows))
        out.extend(_collapse(data, str(parameter), rows))
    out.extend(_updates(data, wide))
    return out


def _relative_gradient(wide: pd.DataFrame) -> dict[str, float]:
    """Per parameter: the median over steps of its gradient's RMS (sqrt of the second
    moment's mean) over the median of every parameter's at that step."""
    if "exp_avg_sq_mean" not in wide.columns:
        return {}
    rms = np.sqrt(wide["exp_avg_sq_mean"].clip(lower=0))
    reference = rms.groupby(level="training_step").transform("median")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (rms / reference).replace([np.inf, -np.inf], np.nan)
    return {str(k): float(v) for k, v in
            ratio.groupby(level="parameter").median().dropna().items()}


def _column(rows: pd.DataFrame, name: str) -> np.ndarray | None:
    if name not in rows.columns:
        return None
    return rows[name].to_numpy(np.float64)


def _node_role(parameter: str) -> tuple[str, str]:
    node, _, role = parameter.rpartition(".")
    return node or parameter, role


def _finding(data, kind, severity, parameter, steps, text, numbers, statistic):
    node, role = _node_role(parameter)
    first = int(steps[0]) if len(steps) else None
    return Finding(kind=kind, severity=severity, trial_id=data.trial_id,
                   steps=tuple(int(s) for s in steps), node=node, role=role,
                   recording_type=None, explanation=text,
                   where=where(data.trial_id, step=first, node=node, role=role,
                               statistic=statistic),
                   numbers={"parameter": parameter, **numbers})


def _eps(data, parameter, rows) -> list[Finding]:
    share = _column(rows, "eps_dominated")
    if share is None or not np.isfinite(share).any():
        return []
    median = float(np.nanmedian(share))
    if median <= EPS_SHARE:
        return []
    steps = rows.index[np.nan_to_num(share) > EPS_SHARE].to_numpy()
    return [_finding(
        data, EPS_DOMINATED, WARNING, parameter, steps,
        f"Adam's eps dominates the update of {parameter}: on the median step "
        f"{fmt(100 * median)}% of its elements have sqrt(v_hat) below eps, so their update "
        "is lr * m_hat / eps rather than following the gradient's scale; eps is too large "
        "for these gradients (or the gradients vanish).",
        {"median_eps_dominated": median, "max_eps_dominated": float(np.nanmax(share))},
        "optimizer/eps_dominated")]


def _updates(data, wide: pd.DataFrame) -> list[Finding]:
    """The model-wide update/weight ratio: per step the median over the parameters (whose
    weight norm is at least MIN_WEIGHT_NORM), then the median over the steps after the
    first."""
    if not {"update_ratio", "update_norm"} <= set(wide.columns):
        return []
    ratio = wide["update_ratio"]
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = wide["update_norm"] / ratio
    steps = wide.index.get_level_values("training_step")
    first = steps.min()
    usable = np.isfinite(ratio) & (weight > MIN_WEIGHT_NORM) & (steps > first)
    ratio = ratio[usable]
    if ratio.empty:
        return []
    per_step = ratio.groupby(level="training_step").median()
    median = float(per_step.median())
    if median <= UPDATE_WARNING:
        return []
    severity = ERROR if median > UPDATE_ERROR else WARNING
    by_parameter = ratio.groupby(level="parameter").median().sort_values(ascending=False)
    top = [str(p) for p in by_parameter.index[:3]]
    high = per_step[per_step > UPDATE_WARNING].index.to_numpy()
    return [Finding(
        kind=UPDATE_HIGH, severity=severity, trial_id=data.trial_id,
        steps=tuple(int(s) for s in high), node=None, role=None, recording_type=None,
        explanation=(
            f"The optimizer's updates are {fmt(median)} of the weights' norm on the median "
            f"step (the median parameter; above {fmt(UPDATE_WARNING)}): every step moves the "
            f"weights by a large part of themselves, the learning rate is probably far too "
            f"large (largest: {', '.join(top)})."),
        where=where(data.trial_id, step=int(high[0]) if len(high) else None,
                    statistic="optimizer/update_ratio"),
        numbers={"median_update_ratio": median, "largest_parameters": top,
                 "max_update_ratio": float(by_parameter.iloc[0])})]


def _collapse(data, parameter, rows) -> list[Finding]:
    second = _column(rows, "exp_avg_sq_mean")
    if second is None or len(second) < 3:
        return []
    finite = np.isfinite(second)
    if not finite.any():
        return []
    peak = float(np.nanmax(second))
    last = float(second[finite][-1])
    if peak <= 0 or last >= COLLAPSE * peak:
        return []
    steps = rows.index[finite & (second < COLLAPSE * peak)].to_numpy()
    numbers = {"peak_exp_avg_sq_mean": peak, "last_exp_avg_sq_mean": last}
    effect = "each element's step grows towards lr / eps."
    size = _column(rows, "step_size_mean")
    if size is not None:  # what the step size did (amsgrad steps with the running max)
        at_peak = float(size[int(np.nanargmax(np.where(finite, second, -np.inf)))])
        now = float(size[finite][-1])
        if math.isfinite(at_peak) and math.isfinite(now) and at_peak > 0:
            numbers.update(step_size_mean_at_peak=at_peak, last_step_size_mean=now)
            effect = (f"the mean per-element step size went from {fmt(at_peak)} to {fmt(now)}"
                      + (", towards lr / eps." if now > 2 * at_peak else
                         "; it did not grow with it: the optimizer divides by another "
                         "moment (amsgrad's running maximum), so the steps stay bounded."))
    return [_finding(
        data, COLLAPSE_KIND, WARNING, parameter, steps,
        f"Adam's second moment of {parameter} collapsed: its mean fell from {fmt(peak)} to "
        f"{fmt(last)}; its gradients vanished, and {effect}", numbers,
        "optimizer/exp_avg_sq_mean")]
