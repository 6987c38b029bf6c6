"""The Metrics page's reads (issue 16): which metrics a trial has and their rows, through
the query API (``Group.list_metrics``, ``Group.read_metrics``), cached in the GUI's one
cache per data version of the trial, so a refresh that finds new metric shards reads
them again (the page is live).

A recording without metrics, or a query API without these reads, gives empty frames,
never an error: the page then says how to record metrics.
"""

from __future__ import annotations

import pandas as pd

from .data import AppData
from .module_data import data_version


def listing(data: AppData, trial: str) -> pd.DataFrame:
    """``(module, module_class, metric, n_points)`` of every metric of a trial."""
    group = data.group
    read = getattr(group, "list_metrics", None) if group is not None else None
    if read is None or trial not in data.trial_ids():
        return pd.DataFrame()
    key = ("metrics_listing", trial, data_version(data, trial))
    frame = data.cached(
        key, lambda: data._safely(f"metrics of {trial}", lambda: read(trial), None))
    return frame if frame is not None else pd.DataFrame()


def rows(data: AppData, trial: str, metric: str) -> pd.DataFrame:
    """Every row of one metric of a trial (every module, step and backward pass)."""
    group = data.group
    read = getattr(group, "read_metrics", None) if group is not None else None
    if read is None or trial not in data.trial_ids():
        return pd.DataFrame()
    key = ("metrics_rows", trial, data_version(data, trial), metric)
    frame = data.cached(
        key, lambda: data._safely(f"{metric} of {trial}",
                                  lambda: read(trial, metric=metric), None))
    return frame if frame is not None else pd.DataFrame()
