"""The Metrics page's reads (issue 16): which metrics a trial has and their rows, through
the query API (``Group.list_metrics``, ``Group.read_metrics``), cached in the GUI's one
cache per data version of the trial, so a refresh that finds new metric shards reads
them again (the page is live).

A recording without metrics, or a query API without these reads, gives empty frames,
never an error: the page then says how to record metrics.

``rank`` (a distributed recording): None reads the lowest rank, an int that rank,
``EVERY_RANK`` (``controls.rank_selector``) every rank with a ``rank`` column (a line
per rank on the page).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .controls.rank_selector import EVERY_RANK
from .data import AppData
from .module_data import data_version


def _rank_arguments(rank: Any) -> dict:
    if rank == EVERY_RANK:
        return {"ranks": EVERY_RANK}
    return {"rank": int(rank)} if rank is not None else {}


def listing(data: AppData, trial: str, rank: Any = None) -> pd.DataFrame:
    """``(module, module_class, metric, n_points)`` of every metric of a trial."""
    group = data.group
    read = getattr(group, "list_metrics", None) if group is not None else None
    if read is None or trial not in data.trial_ids():
        return pd.DataFrame()
    key = ("metrics_listing", trial, data_version(data, trial), rank)
    frame = data.cached(
        key, lambda: data.safely(f"metrics of {trial}",
                                 lambda: read(trial, **_rank_arguments(rank)), None))
    return frame if frame is not None else pd.DataFrame()


def rows(data: AppData, trial: str, metric: str, rank: Any = None) -> pd.DataFrame:
    """Every row of one metric of a trial (every module, step and backward pass) of
    ``rank``."""
    group = data.group
    read = getattr(group, "read_metrics", None) if group is not None else None
    if read is None or trial not in data.trial_ids():
        return pd.DataFrame()
    key = ("metrics_rows", trial, data_version(data, trial), metric, rank)
    frame = data.cached(
        key, lambda: data.safely(f"{metric} of {trial}",
                                 lambda: read(trial, metric=metric, **_rank_arguments(rank)),
                                 None))
    return frame if frame is not None else pd.DataFrame()
