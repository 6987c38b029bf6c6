"""The ranks of a distributed recording: which to read, their statistics merged into those
of the combined batch, and ranks side by side (docs/FORMAT.md, "Recording ranks").

Every rank records the statistics of its own part of the batch (docs/FORMAT.md). For a
tensor with a batch dimension the rows ``batch_mean``, ``batch_std`` and
``batch_abs_max`` hold, for every statistic column (and per neuron in ``values``), the
mean, the standard deviation (ddof 1) and the largest absolute value over the samples of
the rank's batch. Merged, they are the same quantities over the concatenated batch of
all ranks, exactly (up to float32 rounding), from each rank's batch size ``n_r`` (the
``batch_size`` of its steps row):

- ``batch_mean``: the mean weighted by the batch sizes, ``M = sum(n_r m_r) / N`` with
  ``N = sum(n_r)``.
- ``batch_std``: from the combined first and second moments,
  ``var = (sum((n_r - 1) s_r^2) + sum(n_r (m_r - M)^2)) / (N - 1)`` (0 for N = 1), which
  needs each rank's ``batch_mean`` row of the same statistic as well.
- ``batch_abs_max``: the largest of the ranks' values.
- A NaN on any rank makes the merged value NaN, as one NaN sample makes the batch's.

What cannot be merged exactly is not guessed: ``sample`` rows (one sample of one rank's
batch; its index is the rank's own) stay per rank and are left out of a merge; rows
without a batch dimension (``none``: parameters, their gradients and updates, losses as
one value) are the same on every rank in data-parallel training (DDP all-reduces the
gradients), so the merge keeps the value when every rank has the same one (``merge``
column ``same``) and gives NaN marked ``differs`` otherwise (a loss or a rank that
drifted: compare the ranks side by side).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigurationError, NotFoundError
from ..format.schema import RANK
from ..vocabulary import BATCH_ABS_MAX, BATCH_MEAN, BATCH_STD, NO_BATCH, STATISTICS

ALL = "all"
#: The ``merge`` column of merged rows: merged over the combined batch, the same value on
#: every rank, or different values (NaN given).
MERGED_BATCH, SAME, DIFFERS = "batch", "same", "differs"
#: What identifies a tensor row apart from its aggregation and sample.
TENSOR_KEY = ["training_step", "type_of_execution", "iteration", "node", "role", "tensor_name",
              "kind", "recording_type"]


def select_ranks(ranks: Any, available: Sequence[int]) -> list[int] | None:
    """The ranks a read asks for: None (the default: the lowest rank of the trial, see
    ``Group.list_ranks``), ``"all"``, one rank or several; a rank the trial does not have
    is a NotFoundError that lists those it has."""
    if ranks is None:
        return None
    if isinstance(ranks, str):
        if ranks != ALL:
            raise ConfigurationError(
                f"ranks={ranks!r}: pass None (the lowest rank), 'all', one rank or a list")
        return list(available)
    chosen = [ranks] if isinstance(ranks, (int, np.integer)) else ranks
    if not isinstance(chosen, Iterable) or isinstance(ranks, bool):
        raise ConfigurationError(f"ranks={ranks!r}: pass None, 'all', one rank or a list")
    try:
        chosen = sorted({int(r) for r in chosen})
    except (TypeError, ValueError):
        raise ConfigurationError(f"ranks={ranks!r}: ranks are integers") from None
    missing = [r for r in chosen if r not in available]
    if missing:
        raise NotFoundError(f"rank {missing[0]} recorded nothing in this trial; its ranks are "
                            f"{list(available)}")
    return chosen


def merge_batch(n: np.ndarray, mean: np.ndarray, std: np.ndarray,
                abs_max: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch mean, std (ddof 1) and largest absolute value over the combined batch from
    each rank's (rows of the arrays, ``n``: each rank's batch size), element-wise."""
    n = np.asarray(n, np.float64).reshape((-1,) + (1,) * (np.ndim(mean) - 1))
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    total = n.sum(axis=0)
    merged_mean = (n * mean).sum(axis=0) / total
    spread = ((n - 1) * std**2).sum(axis=0) + (n * (mean - merged_mean) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(total > 1, spread / np.maximum(total - 1, 1), 0.0)
    var = np.where(np.isnan(spread), np.nan, var)
    merged_std = np.sqrt(np.maximum(var, 0.0))
    merged_max = np.asarray(abs_max, np.float64).max(axis=0)  # NaN anywhere gives NaN
    return merged_mean, merged_std, merged_max


def merge_statistics(frame: pd.DataFrame, batch_sizes: pd.DataFrame) -> pd.DataFrame:
    """``read_statistics(ranks=...)``'s rows of several ranks merged (module docstring).

    ``batch_sizes``: columns rank, training_step, batch_size (each rank's steps rows).
    Returns one row per tensor, step, iteration and aggregation (``sample`` rows left
    out) with the statistic columns of ``frame`` and ``batch_size`` (N, the combined
    batch; 0 for rows without a batch dimension), ``ranks`` (how many ranks had the row)
    and ``merge`` (``batch``, ``same`` or ``differs``).
    """
    stats = [c for c in frame.columns if c in STATISTICS]
    extra = [c for c in frame.columns
             if c not in stats and c not in TENSOR_KEY and c not in (RANK, "aggregation",
                                                                      "sample_index")]
    parts = [_merge_batch_rows(frame, batch_sizes, stats),
             _merge_unbatched_rows(frame, stats + extra)]
    parts = [p for p in parts if len(p)]
    if not parts:
        columns = [*TENSOR_KEY, "aggregation", "sample_index", *stats, *extra, "batch_size",
                   "ranks", "merge"]
        return pd.DataFrame({c: pd.Series(dtype=frame[c].dtype if c in frame else "object")
                             for c in columns})
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["training_step", "iteration", "recording_type", "node", "role",
                            "aggregation"], kind="stable").reset_index(drop=True)


def _merge_batch_rows(frame: pd.DataFrame, batch_sizes: pd.DataFrame,
                      stats: list[str]) -> pd.DataFrame:
    rows = frame[frame["aggregation"].isin((BATCH_MEAN, BATCH_STD, BATCH_ABS_MAX))]
    if rows.empty:
        return rows
    sizes = (batch_sizes[[RANK, "training_step", "batch_size"]]
             .drop_duplicates([RANK, "training_step"]))
    # A step whose steps row is not indexed yet (it is renamed after its tensors) is
    # left out until it is: its batch sizes are unknown.
    rows = rows.merge(sizes, on=[RANK, "training_step"], how="inner")
    index = [*TENSOR_KEY, RANK]
    by = {agg: rows[rows["aggregation"] == agg].set_index(index)
          for agg in (BATCH_MEAN, BATCH_STD, BATCH_ABS_MAX)}
    out = []
    means = by[BATCH_MEAN]
    if len(means):
        n = means["batch_size"].astype(np.float64)
        values = means[stats]
        total = n.groupby(level=TENSOR_KEY).sum()
        merged = values.mul(n, axis=0).groupby(level=TENSOR_KEY).sum().div(total, axis=0)
        merged[values.isna().groupby(level=TENSOR_KEY).any()] = np.nan
        out.append(_finish(merged, BATCH_MEAN, total, n.groupby(level=TENSOR_KEY).size()))
        stds = by[BATCH_STD]
        if len(stds):
            m = means[stats].reindex(stds.index)  # the same ranks' means
            s = stds[stats]
            ns = stds["batch_size"].astype(np.float64)
            big_mean = merged.reindex(stds.index.droplevel(RANK))
            big_mean.index = stds.index
            within = (s**2).mul(ns - 1, axis=0)
            between = ((m - big_mean) ** 2).mul(ns, axis=0)
            spread = (within + between).groupby(level=TENSOR_KEY).sum()
            nan = (s.isna() | m.isna()).groupby(level=TENSOR_KEY).any()
            total_s = ns.groupby(level=TENSOR_KEY).sum()
            var = spread.div((total_s - 1).clip(lower=1), axis=0)
            var[total_s <= 1] = 0.0
            var[nan] = np.nan
            out.append(_finish(np.sqrt(var.clip(lower=0)), BATCH_STD, total_s,
                               ns.groupby(level=TENSOR_KEY).size()))
    maxs = by[BATCH_ABS_MAX]
    if len(maxs):
        values = maxs[stats]
        merged = values.groupby(level=TENSOR_KEY).max()
        merged[values.isna().groupby(level=TENSOR_KEY).any()] = np.nan
        n = maxs["batch_size"].astype(np.float64)
        out.append(_finish(merged, BATCH_ABS_MAX, n.groupby(level=TENSOR_KEY).sum(),
                           n.groupby(level=TENSOR_KEY).size()))
    return pd.concat(out) if out else rows.iloc[0:0]


def _finish(values: pd.DataFrame, aggregation: str, total: pd.Series,
            ranks: pd.Series) -> pd.DataFrame:
    out = values.reset_index()
    out.insert(len(TENSOR_KEY), "aggregation", aggregation)
    out.insert(len(TENSOR_KEY) + 1, "sample_index", -1)
    out["batch_size"] = total.reindex(values.index).to_numpy().astype(np.int64)
    out["ranks"] = ranks.reindex(values.index).to_numpy().astype(np.int64)
    out["merge"] = MERGED_BATCH
    return out


def _merge_unbatched_rows(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    rows = frame[frame["aggregation"] == NO_BATCH]
    if rows.empty:
        return rows
    grouped = rows.groupby(TENSOR_KEY, sort=False, dropna=False)
    first = grouped[columns].first()
    # The same on every rank: one distinct value per column (NaN counted as a value).
    same = (grouped[columns].nunique(dropna=False) <= 1).all(axis=1)
    first.loc[~same, [c for c in columns if c in STATISTICS]] = np.nan
    out = first.reset_index()
    out.insert(len(TENSOR_KEY), "aggregation", NO_BATCH)
    out.insert(len(TENSOR_KEY) + 1, "sample_index", -1)
    out["batch_size"] = 0
    out["ranks"] = grouped.size().reindex(first.index).to_numpy().astype(np.int64)
    out["merge"] = np.where(same.to_numpy(), SAME, DIFFERS)
    return out


def side_by_side(frame: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """One row per training step and iteration, one column per rank (named by the rank):
    ``statistic`` of one tensor row as each rank recorded it. Also ``spread`` (largest
    minus smallest) and ``farthest`` (the rank farthest from the ranks' median), to find
    a rank that drifts from the others."""
    if frame.empty:
        return pd.DataFrame({"training_step": pd.Series(dtype="int64"),
                             "iteration": pd.Series(dtype="int64"),
                             "spread": pd.Series(dtype="float64"),
                             "farthest": pd.Series(dtype="int64")})
    wide = frame.pivot_table(index=["training_step", "iteration"], columns=RANK,
                             values=statistic, aggfunc="first", dropna=False)
    wide.columns = [int(c) for c in wide.columns]
    values = wide.to_numpy(np.float64)
    out = wide.reset_index()
    with np.errstate(all="ignore"):
        out["spread"] = np.nanmax(values, axis=1) - np.nanmin(values, axis=1)
        distance = np.abs(values - np.nanmedian(values, axis=1, keepdims=True))
    distance = np.where(np.isnan(distance), -1.0, distance)
    out["farthest"] = np.asarray(wide.columns)[distance.argmax(axis=1)]
    return out
