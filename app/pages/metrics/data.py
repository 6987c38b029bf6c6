"""The Metrics page's reads (through ``metric_data``, cached per data version)."""

from __future__ import annotations

from typing import Any

from comgra_like.vocabulary import ANY_TYPE

from ... import metric_data
from ...data import AppData
from .choices import rank_for


def frames_of(data: AppData, trials: list[str], metric: str, execution: str | None,
              rank: Any = None) -> dict:
    """One metric's rows of each trial, of one type of execution, read with ``rank``."""
    frames = {}
    for t in trials:
        frame = metric_data.rows(data, t, metric, rank_for(rank, data.ranks(t)))
        if execution not in (None, ANY_TYPE) and not frame.empty:
            frame = frame[frame["type_of_execution"] == execution]
        frames[t] = frame
    return frames
