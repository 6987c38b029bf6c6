"""Outputs that cannot reach the range of their targets, on one side.

The tutorial's bug: a LeakyReLU after the last layer in front of a sigmoid. The values
going into the sigmoid are positive up to +20 but hardly ever below -1, so the outputs
never get near the targets that are 0, while they reach the targets that are 1. Nothing
is non-finite, no unit is dead and the gradients flow; the loss is merely worse. The
same family: a ReLU as the output of a regression whose targets go negative, and
outputs stuck above (or below) every target.

Which tensors: a *prediction* P is a tensor that feeds the same node as a target T
(``is_target=True``) in the dependency graph (the tutorial's ``output`` and ``target``
both feed ``loss_per_sample``) and has the same shape per sample. P's *input* Z is the
one tensor with the same shape that P is computed from directly (the tutorial's
``subnet_out__out``, the value before the sigmoid), when it is registered.

The numbers, per recorded step and iteration, from the rows the writer stores anyway:
a tensor's *low* and *high* are the batch's mean per-sample minimum and maximum
(``batch_mean`` row, ``min`` and ``max``: typical values, not one sample's outlier;
for one value per sample, its mean -/+ its standard deviation over the batch). A side
of the targets is *unreached* when P's low lies above T's low by at least ``GAP``
(15 %) of T's range (high minus low), and at least ``ASYMMETRY`` (2) times further than
P's high falls short of T's high (or P goes past it): one side is missed, the other is
not. Underfit outputs that miss both ends alike are not this. Mirrored for the top.

An unreached side alone can be an honest uncertainty (rare positives, noisy labels). A
finding needs a reason in the values, one of:

- ``squashed_input``: Z is squashed on that side: it reaches at most ``SQUASH`` (25 %)
  as far below 0 as it reaches above it (ReLU: not at all; the tutorial's LeakyReLU(0.01):
  2-13 %; healthy logits: 80-130 %), while the targets need the missing side (a
  bounded output such as a sigmoid behind a ReLU-like activation);
- ``floored_output``: P itself is squashed that way (a ReLU output for targets that go
  negative);
- ``stuck``: P lies beyond the targets altogether (its low above their high, or its
  high below their low).

Window: the last third of the recorded steps (at least ``MIN_STEPS``, 2); the same side
and reason must show at half of them or more. Early steps, before the network has learnt
the targets' range, do not count. Severity: warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..query import Graph
from ..vocabulary import BATCH_MEAN, BATCH_STD, FORWARD, LOSS, PARAMETER, TARGET
from .core import WARNING, Finding, TrialData, fmt, where

KIND = "output_range"
GAP = 0.15
ASYMMETRY = 2.0
SQUASH = 0.25
MIN_STEPS = 2
WINDOW_PARTS = 3  # the window: the last third of the recorded steps (at least MIN_STEPS)
FRACTION = 0.5  # of the window's steps that must show it

SQUASHED_INPUT, FLOORED_OUTPUT, STUCK = "squashed_input", "floored_output", "stuck"
LOW, HIGH = "low", "high"

Key = tuple[str, str]  # (node, role)


@dataclass(frozen=True)
class _Triple:
    prediction: Key
    target: Key
    pre: Key | None  # the prediction's input of the same shape, if registered


@dataclass(frozen=True)
class _Verdict:
    step: int
    iteration: int
    side: str
    cause: str
    gap: float  # how far the unreached side falls short, as a fraction of the targets' range
    target: tuple[float, float]
    prediction: tuple[float, float]
    pre: tuple[float, float] | None


def detect(data: TrialData) -> list[Finding]:
    triples = _triples(data.graphs)
    if not triples:
        return []
    ranges = _ranges(data, {k for t in triples for k in (t.prediction, t.target, t.pre) if k})
    findings = []
    for triple in triples:
        finding = _judge(data, triple, ranges)
        if finding is not None:
            findings.append(finding)
    return findings


# --- which tensors ------------------------------------------------------------------


def _triples(graphs: list[Graph]) -> list[_Triple]:
    found: dict[tuple[Key, Key], Key | None] = {}
    for graph in graphs:
        nodes = {n.name: n for n in graph.nodes}
        into: dict[str, list[tuple[str, str, str]]] = {}  # target id -> (source id, roles)
        for e in graph.edges:
            into.setdefault(e.target, []).append((e.source, e.source_role, e.target_role))
        for sources in into.values():
            targets = [(s, r) for s, r, _ in sources
                       if s in nodes and nodes[s].kind == TARGET and not nodes[s].is_import]
            for t_id, t_role in targets:
                t_shape = _shape(nodes[t_id], t_role)
                for s, role, _ in sources:
                    node = nodes.get(s)
                    if (node is None or s == t_id or node.is_import
                            or node.kind in (TARGET, PARAMETER, LOSS)
                            or _shape(node, role) != t_shape or t_shape is None):
                        continue
                    key = ((node.node, role), (nodes[t_id].node, t_role))
                    if key not in found or found[key] is None:
                        found[key] = _pre(nodes, into, s, role, t_shape)
    return [_Triple(p, t, pre) for (p, t), pre in sorted(found.items())]


def _pre(nodes, into, prediction: str, role: str, shape) -> Key | None:
    """The one tensor of the same shape that the prediction is computed from directly."""
    candidates = {(nodes[s].node, r) for s, r, tr in into.get(prediction, [])
                  if tr == role and s in nodes and not nodes[s].is_import
                  and nodes[s].kind not in (PARAMETER, TARGET)
                  and _shape(nodes[s], r) == shape}
    return candidates.pop() if len(candidates) == 1 else None


def _shape(node, role: str):
    shape = node.shapes.get(role)
    return None if shape is None else tuple(shape)


# --- typical lows and highs ---------------------------------------------------------


def _ranges(data: TrialData, keys: set[Key]) -> pd.DataFrame:
    """(node, role, training_step, iteration) -> low, high: the batch's mean per-sample
    minimum and maximum (one value per sample: its mean -/+ its standard deviation)."""
    rows = data.rows(recording_type=FORWARD)
    wanted = pd.Series([f"{n}\x00{r}" for n, r in keys])
    tag = rows["node"].astype(str) + "\x00" + rows["role"].astype(str)
    rows = rows[tag.isin(wanted).to_numpy()]
    index = ["node", "role", "training_step", "iteration"]
    mean = rows[(rows["aggregation"] == BATCH_MEAN).to_numpy()]
    std = rows[(rows["aggregation"] == BATCH_STD).to_numpy()]
    if mean.empty:
        return pd.DataFrame(columns=["low", "high"])
    frame = mean[index + ["min", "max", "mean", "numel"]].copy()
    frame = frame.merge(std[index + ["mean"]].rename(columns={"mean": "spread"}),
                        on=index, how="left")
    for column in ("node", "role"):
        frame[column] = frame[column].astype(str)
    low = frame["min"].to_numpy(np.float64)
    high = frame["max"].to_numpy(np.float64)
    single = (frame["numel"] == 1).to_numpy()
    spread = np.nan_to_num(frame["spread"].to_numpy(np.float64))
    centre = frame["mean"].to_numpy(np.float64)
    low = np.where(single, centre - spread, low)
    high = np.where(single, centre + spread, high)
    out = pd.DataFrame({"low": low, "high": high},
                       index=pd.MultiIndex.from_frame(frame[index])).sort_index()
    out = out[~out.index.duplicated()]
    return out[np.isfinite(out["low"]) & np.isfinite(out["high"])]


def _series(ranges: pd.DataFrame, key: Key) -> pd.DataFrame:
    try:
        return ranges.loc[key]  # (training_step, iteration) -> low, high
    except KeyError:
        return pd.DataFrame(columns=["low", "high"])


def _squashed(lo: float, hi: float, side: str) -> bool:
    """Whether values from ``lo`` to ``hi`` reach at most SQUASH as far past 0 on ``side``
    as on the other side (and do reach past 0 on the other side)."""
    if side == HIGH:
        lo, hi = -hi, -lo
    return hi > 0 and lo <= SQUASH * hi and -lo <= SQUASH * hi


# --- the verdict ----------------------------------------------------------------------


def _verdict(step: int, iteration: int, t: tuple[float, float], p: tuple[float, float],
             z: tuple[float, float] | None) -> _Verdict | None:
    span = t[1] - t[0]
    if not span > 1e-6 * max(abs(t[0]), abs(t[1]), 1e-30):
        return None  # one target value: no range to reach
    gap_low, gap_high = (p[0] - t[0]) / span, (t[1] - p[1]) / span
    for side, gap, other in ((LOW, gap_low, gap_high), (HIGH, gap_high, gap_low)):
        if gap < GAP or gap < ASYMMETRY * max(other, 0.0):
            continue
        if z is not None and _squashed(z[0], z[1], side):
            cause = SQUASHED_INPUT
        elif _squashed(p[0], p[1], side):
            cause = FLOORED_OUTPUT
        elif (side == LOW and p[0] > t[1]) or (side == HIGH and p[1] < t[0]):
            cause = STUCK
        else:
            continue
        return _Verdict(step, iteration, side, cause, gap, t, p, z)
    return None


def _judge(data: TrialData, triple: _Triple, ranges: pd.DataFrame) -> Finding | None:
    target = _series(ranges, triple.target)
    prediction = _series(ranges, triple.prediction)
    pre = _series(ranges, triple.pre) if triple.pre is not None else None
    both = target.add_suffix("_t").join(prediction.add_suffix("_p"), how="inner")
    if both.empty:
        return None
    steps = sorted({int(s) for s, _ in both.index})
    if len(steps) < MIN_STEPS:
        return None
    window = steps[-max(MIN_STEPS, -(-len(steps) // WINDOW_PARTS)):]
    verdicts: list[_Verdict] = []
    for (step, iteration), row in both.iterrows():
        if int(step) not in window:
            continue
        z = None
        if pre is not None and (step, iteration) in pre.index:
            z = (float(pre.loc[(step, iteration), "low"]),
                 float(pre.loc[(step, iteration), "high"]))
        v = _verdict(int(step), int(iteration), (row["low_t"], row["high_t"]),
                     (row["low_p"], row["high_p"]), z)
        if v is not None:
            verdicts.append(v)
    if not verdicts:
        return None
    # the side and cause seen most often in the window, at half of its steps or more
    votes: dict[tuple[str, str], set[int]] = {}
    for v in verdicts:
        votes.setdefault((v.side, v.cause), set()).add(v.step)
    (side, cause), flagged = max(votes.items(), key=lambda kv: (len(kv[1]), kv[0]))
    if len(flagged) < max(MIN_STEPS, FRACTION * len(window)):
        return None
    same = [v for v in verdicts if v.side == side and v.cause == cause]
    last = max(same, key=lambda v: (v.step, v.iteration))
    return _finding(data, triple, last, same, sorted(flagged), len(window), len(steps))


def _finding(data: TrialData, triple: _Triple, last: _Verdict, same: list[_Verdict],
             steps: list[int], window: int, recorded: int) -> Finding:
    p_node, p_role = triple.prediction
    t_node = triple.target[0]
    low = last.side == LOW
    end = "low" if low else "high"
    t_lo, t_hi = last.target
    p_lo, p_hi = last.prediction
    at = f"at step {last.step}"
    if last.cause == STUCK:
        head = (f"The outputs {p_node!r} lie {'above' if low else 'below'} the targets "
                f"{t_node!r} ({at} typically from {fmt(p_lo)} to {fmt(p_hi)}, the targets "
                f"from {fmt(t_lo)} to {fmt(t_hi)}: {fmt(100 * last.gap)}% of the targets' "
                f"range short of their {end} end)")
    else:
        mine, theirs = (p_lo, t_lo) if low else (p_hi, t_hi)
        other = (f"while at the top they reach {fmt(p_hi)} against {fmt(t_hi)}" if low
                 else f"while at the bottom they reach {fmt(p_lo)} against {fmt(t_lo)}")
        head = (f"The outputs {p_node!r} do not reach the {end} end of the targets "
                f"{t_node!r}: {at} a sample's {'lowest' if low else 'highest'} output is "
                f"{fmt(mine)} on average, its {'lowest' if low else 'highest'} target "
                f"{fmt(theirs)} ({fmt(100 * last.gap)}% of the targets' range short), {other}")
    show = triple.prediction
    numbers = {"step": last.step, "side": last.side, "cause": last.cause, "gap": last.gap,
               "target_low": t_lo, "target_high": t_hi, "output_low": p_lo,
               "output_high": p_hi, "flagged_steps": len(steps), "window_steps": window,
               "recorded_steps": recorded}
    if last.cause == SQUASHED_INPUT:
        z_lo, z_hi = last.pre
        short, long_ = (abs(z_lo), z_hi) if low else (z_hi, abs(z_lo))
        sign = "negative" if low else "positive"
        why = (f". Its input {triple.pre[0]!r} is squashed on the {sign} side: per sample "
               f"from {fmt(z_lo)} to {fmt(z_hi)} on average, {fmt(100 * short / long_)}% as "
               f"far {'below' if low else 'above'} 0 as {'above' if low else 'below'}, as a "
               f"ReLU-like activation in front of a sigmoid or tanh makes it")
        show = triple.pre
        numbers.update(input_low=z_lo, input_high=z_hi)
    elif last.cause == FLOORED_OUTPUT:
        why = (f". The outputs stop at about 0 on that side (typically from {fmt(p_lo)} "
               f"to {fmt(p_hi)}), as a ReLU-like output layer does, while the targets go "
               f"{'below' if low else 'above'} it")
    else:
        why = ": stuck far from them on one side (is the network learning at all?)"
    explanation = (f"{head}{why}. Seen at {len(steps)} of the last {window} recorded steps "
                   f"(of {recorded}).")
    return Finding(
        kind=KIND, severity=WARNING, trial_id=data.trial_id, steps=tuple(steps),
        node=p_node, role=p_role, recording_type=FORWARD, explanation=explanation,
        where=where(data.trial_id, step=last.step,
                    type_of_execution=data.type_of_execution.get(last.step),
                    iteration=last.iteration, node=show[0], role=show[1],
                    recording_type=FORWARD, aggregation=BATCH_MEAN,
                    statistic="min" if low else "max"),
        numbers=numbers,
    )
