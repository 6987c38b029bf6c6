"""Where two runs part: the first recorded step at which two trials (or two ranks of one
trial) differ beyond a tolerance, and at that step the first tensor in the order the step
computed it (forward values, then gradients traced backwards, then updates).

Two runs of one seed and one code record bitwise equal statistics; a change (a perturbed
weight, another learning rate, another library path) shows first at the step where it
takes effect, in the tensor it touches first, and spreads from there. What is compared:
every statistic both recordings hold for a tensor row (same step, iteration, node, role,
recording type, aggregation and sample), each difference measured against the size of
the tensor (the larger ``abs_max`` of the two rows), so that a mean near zero does not
make noise look large:

    differs  when  |a - b| > tolerance * max(|abs_max_a|, |abs_max_b|) + atol

A NaN on one side only, another NaN or Inf count, another element count (``numel``) or a
row only one side has (the graph changed) differ whatever the tolerance. Steps recorded
by only one trial are not compared; the result says how many were.

Between ranks of one trial (``rank_a``/``rank_b``) each rank sees its own data, so only
rows that every replica must agree on are compared by default: parameters, their
gradients (after DDP's all-reduce) and their updates (``kinds=("parameter",)``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ComgraError, ConfigurationError, NotFoundError
from ..query import Group, open_group
from ..vocabulary import FORWARD, PARAMETER, UPDATE, is_gradient
from .core import fmt
from .graph_order import Key, backward_order, forward_order

#: The statistics compared (those every tensor row has; svd_top and update_ratio follow
#: from them).
COMPARED: tuple[str, ...] = ("mean", "abs_mean", "std", "abs_max", "min", "max", "norm",
                             "nan_count", "inf_count", "numel")
_EXACT = ("nan_count", "inf_count", "numel")
KEYS = ["training_step", "iteration", "node", "role", "recording_type", "aggregation",
        "sample_index"]


@dataclass(frozen=True)
class Divergence:
    """The first difference between two recordings (see the module's docstring)."""

    trial_a: str
    trial_b: str
    rank_a: int | None
    rank_b: int | None
    step: int
    type_of_execution: str
    iteration: int
    node: str
    role: str
    recording_type: str
    aggregation: str
    sample_index: int
    statistic: str
    value_a: float
    value_b: float
    relative_difference: float
    tolerance: float
    last_equal_step: int | None
    steps_compared: int
    differing_rows_at_step: int
    values_max_abs_difference: float | None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, float) and not np.isfinite(v):
                out[k] = str(v)
        return out

    def explain(self) -> str:
        side = (f"trials {self.trial_a!r} and {self.trial_b!r}" if self.rank_a is None
                else f"ranks {self.rank_a} and {self.rank_b} of trial {self.trial_a!r}")
        before = ("at the first step both recorded" if self.last_equal_step is None
                  else f"step {self.last_equal_step} was still equal")
        quantity = ("value" if self.recording_type == FORWARD else
                    "update" if self.recording_type == UPDATE else "gradient")
        values = ("" if self.values_max_abs_difference is None else
                  f"; its per-neuron values differ by up to "
                  f"{fmt(self.values_max_abs_difference)}")
        return (f"{side} first differ at step {self.step} ({before}): the {quantity} of "
                f"{self.node!r} (role {self.role!r}, iteration {self.iteration}, "
                f"{self.recording_type}, {self.aggregation}"
                + (f" {self.sample_index}" if self.sample_index >= 0 else "")
                + f") has {self.statistic} {fmt(self.value_a)} against {fmt(self.value_b)} "
                f"(relative difference {fmt(self.relative_difference)}, tolerance "
                f"{fmt(self.tolerance)}){values}. {self.differing_rows_at_step - 1} more "
                f"tensor rows of that step differ; {self.steps_compared} recorded steps "
                "were compared.")


def first_divergence(group: Group | str, trial_a: str, trial_b: str | None = None, *,
                     tolerance: float = 1e-5, atol: float = 0.0,
                     rank_a: int | None = None, rank_b: int | None = None,
                     kinds: tuple[str, ...] | None = None,
                     read_values: bool = True) -> Divergence | None:
    """The earliest recorded step where the two recordings differ, and the first tensor
    in graph order there; None when every step both recorded agrees.

    ``trial_b=None`` compares two ranks of ``trial_a`` (then ``rank_a`` and ``rank_b``
    are required, and ``kinds`` defaults to parameters). ``read_values`` reads the named
    tensor's per-neuron values on both sides (one read each) for their largest
    difference.
    """
    if not (tolerance >= 0 and atol >= 0):
        raise ConfigurationError(f"tolerance and atol must be >= 0, got {tolerance}, {atol}")
    g = open_group(group) if isinstance(group, str) or not isinstance(group, Group) else group
    between_ranks = trial_b is None or trial_b == trial_a
    if between_ranks:
        if rank_a is None or rank_b is None:
            raise ConfigurationError(
                "comparing a trial with itself needs rank_a and rank_b (two ranks of one "
                "distributed recording); pass trial_b to compare two trials")
        trial_b = trial_a
        if kinds is None:
            kinds = (PARAMETER,)
    trials = {t.trial_id for t in g.list_trials()}
    for t in (trial_a, trial_b):
        if t not in trials:
            raise NotFoundError(f"no trial {t!r} in {g.path} (trials: "
                                f"{', '.join(sorted(trials)) or 'none'})")
    a = _read(g, trial_a, rank_a, kinds)
    b = _read(g, trial_b, rank_b, kinds)
    common = np.intersect1d(a["training_step"].unique(), b["training_step"].unique())
    if len(common) == 0:
        raise NotFoundError(f"{trial_a!r} and {trial_b!r} have no recorded step in common: "
                            "nothing to compare")
    a = a[a["training_step"].isin(common)]
    b = b[b["training_step"].isin(common)]
    joined, names = _join(a, b)
    differs = _differs(joined, tolerance, atol)
    if not differs.any():
        return None
    bad = joined[differs]
    step = int(bad["training_step"].min())
    at_step = _decode(bad[bad["training_step"] == step], names)
    row = _first_in_graph_order(g, trial_a, step, at_step)
    statistic, va, vb, rel = _worst_statistic(row, tolerance, atol)
    earlier = common[common < step]
    toe = row["type_of_execution"]
    values = None
    if read_values:
        values = _values_difference(g, trial_a, trial_b, rank_a, rank_b, row)
    return Divergence(
        trial_a=trial_a, trial_b=trial_b, rank_a=rank_a, rank_b=rank_b, step=step,
        type_of_execution=str(toe), iteration=int(row["iteration"]), node=str(row["node"]),
        role=str(row["role"]), recording_type=str(row["recording_type"]),
        aggregation=str(row["aggregation"]), sample_index=int(row["sample_index"]),
        statistic=statistic, value_a=float(va), value_b=float(vb),
        relative_difference=float(rel),
        tolerance=tolerance, last_equal_step=int(earlier[-1]) if len(earlier) else None,
        steps_compared=len(common), differing_rows_at_step=len(at_step),
        values_max_abs_difference=values)


_NAMES = ("node", "role", "recording_type", "aggregation", "type_of_execution")


def _read(g: Group, trial: str, rank: int | None, kinds) -> pd.DataFrame:
    # Arrow's dictionary columns become categoricals: no string per row is ever made.
    frame = g.read_statistics(trial, statistics=list(COMPARED), ranks=rank,
                              as_pandas=False).to_pandas()
    if kinds is not None:
        frame = frame[frame["kind"].isin(list(kinds)).to_numpy()]
    return frame[KEYS + ["type_of_execution", *COMPARED]]


def _join(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.Index]]:
    """The rows of both sides side by side (``<statistic>_a``, ``<statistic>_b``,
    ``_merge``), names as integer codes into ``names[column]``. Two recordings of one
    code write their rows in the same order: then the sides are put together by
    position, else by an outer join on the keys."""
    names: dict[str, pd.Index] = {}
    coded = []
    for side in (a, b):
        coded.append({k: side[k].to_numpy() for k in KEYS if k not in _NAMES})
    for column in _NAMES:
        union = pd.Index(_categories(a[column])).union(pd.Index(_categories(b[column])))
        names[column] = union
        for side, out in zip((a, b), coded):
            out[column] = pd.Categorical(side[column], categories=union).codes.astype(np.int32)
    keys = [k for k in KEYS] + ["type_of_execution"]
    if len(a) == len(b) and all(np.array_equal(coded[0][k], coded[1][k]) for k in keys):
        frame = pd.DataFrame({k: coded[0][k] for k in keys})
        for stat in COMPARED:
            frame[f"{stat}_a"] = a[stat].to_numpy(np.float64)
            frame[f"{stat}_b"] = b[stat].to_numpy(np.float64)
        frame["_merge"] = "both"
        return frame, names
    sides = []
    for side, out in zip((a, b), coded):
        frame = pd.DataFrame(out)
        for stat in COMPARED:
            frame[stat] = side[stat].to_numpy(np.float64)
        sides.append(frame)
    # type_of_execution belongs to the step: joined on it too (a step of another type
    # differs anyway).
    joined = sides[0].merge(sides[1], on=keys, how="outer", suffixes=("_a", "_b"),
                            indicator=True)
    return joined, names


def _categories(column: pd.Series):
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.categories
    return pd.unique(column.astype(str))


def _decode(rows: pd.DataFrame, names: dict[str, pd.Index]) -> pd.DataFrame:
    out = rows.copy()
    for column, union in names.items():
        out[column] = np.asarray(union)[rows[column].to_numpy()]
    return out


def _differs(joined: pd.DataFrame, tolerance: float, atol: float) -> np.ndarray:
    one_sided = (joined["_merge"] != "both").to_numpy()
    scale = np.fmax(np.abs(joined["abs_max_a"].to_numpy(np.float64)),
                    np.abs(joined["abs_max_b"].to_numpy(np.float64)))
    scale = np.nan_to_num(scale, nan=0.0, posinf=0.0)
    out = one_sided.copy()
    for stat in COMPARED:
        x = joined[f"{stat}_a"].to_numpy(np.float64)
        y = joined[f"{stat}_b"].to_numpy(np.float64)
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        with np.errstate(invalid="ignore"):
            if stat in _EXACT:
                diff = (x != y) & ~(nan_x & nan_y)
            else:
                same_inf = np.isinf(x) & (x == y)
                gap = np.abs(x - y)
                diff = (nan_x != nan_y) | (
                    ~nan_x & ~nan_y & ~same_inf & ~(gap <= tolerance * scale + atol))
        out |= diff
    return out


def _first_in_graph_order(g: Group, trial: str, step: int, rows: pd.DataFrame) -> pd.Series:
    """The row of the first differing tensor in the order the step computed it."""
    keyed: dict[tuple[Key, str], int] = {}
    for i, (node, role, it, rt) in enumerate(zip(rows["node"], rows["role"], rows["iteration"],
                                                 rows["recording_type"])):
        keyed.setdefault(((str(node), str(role), int(it)), str(rt)), i)
    graphs = []
    try:
        steps = g.list_steps(trial)
        for it in sorted(steps[steps["training_step"] == step]["iteration"].unique()):
            try:
                graphs.append((int(it), g.read_graph(trial, step, int(it))))
            except ComgraError:
                graphs.append((int(it), None))
    except ComgraError:
        graphs = []
    types = {rt for _, rt in keyed}
    # Step-wide data (parameters, iteration -1) comes before everything in the forward pass.
    for (key, rt), i in sorted(keyed.items(), key=lambda kv: kv[0][0]):
        if rt == FORWARD and key[2] == -1:
            return rows.iloc[i]
    if FORWARD in types:
        for key, _ in forward_order(graphs):
            if (key, FORWARD) in keyed:
                return rows.iloc[keyed[(key, FORWARD)]]
    for rt in sorted(t for t in types if is_gradient(t)):
        for key, _ in backward_order(graphs):
            if (key, rt) in keyed:
                return rows.iloc[keyed[(key, rt)]]
        for (key, t), i in sorted(keyed.items()):
            if t == rt and key[2] == -1:  # parameters' gradients: after the graph's tensors
                return rows.iloc[i]
    order = {FORWARD: 0, UPDATE: 2}
    first = min(keyed, key=lambda k: (order.get(k[1], 1), k[0][2], k[0][0], k[0][1]))
    return rows.iloc[keyed[first]]


def _worst_statistic(row: pd.Series, tolerance: float, atol: float
                     ) -> tuple[str, float, float, float]:
    """The statistic that differs most, relative to the tensor's size."""
    scale = np.nanmax([abs(float(row.get("abs_max_a", np.nan))),
                       abs(float(row.get("abs_max_b", np.nan))), 0.0])
    best = ("numel", float(row.get("numel_a", np.nan)), float(row.get("numel_b", np.nan)),
            float("inf"))
    worst = -1.0
    for stat in COMPARED:
        x, y = float(row.get(f"{stat}_a", np.nan)), float(row.get(f"{stat}_b", np.nan))
        if np.isnan(x) and np.isnan(y):
            continue
        if np.isnan(x) or np.isnan(y) or (np.isinf(x) or np.isinf(y)) and x != y:
            rel = float("inf")
        elif x == y:
            rel = 0.0
        else:
            rel = abs(x - y) / scale if scale > 0 else float("inf")
        if rel > worst:
            worst, best = rel, (stat, x, y, rel)
    return best


def _values_difference(g: Group, trial_a: str, trial_b: str, rank_a, rank_b,
                       row: pd.Series) -> float | None:
    args = (int(row["training_step"]), int(row["iteration"]), str(row["node"]),
            str(row["role"]), str(row["recording_type"]), str(row["aggregation"]),
            int(row["sample_index"]))
    try:
        ra = _read_tensor(g, trial_a, rank_a, args)
        rb = _read_tensor(g, trial_b, rank_b, args)
    except ComgraError:
        return None
    if ra.values is None or rb.values is None or ra.values.shape != rb.values.shape:
        return None
    with np.errstate(invalid="ignore"):
        gap = np.abs(ra.values.astype(np.float64) - rb.values.astype(np.float64))
    return float(np.nanmax(gap)) if gap.size else 0.0


def _read_tensor(g: Group, trial: str, rank, args):
    if rank is None:
        return g.read_tensor(trial, *args)
    return g.read_tensor(trial, *args, rank=rank)
