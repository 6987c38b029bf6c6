"""The Metrics page's pure pieces: the trials drawn, the rank choices, the window, the
view, the modules shown, where a click leads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import metric_groups as mg
from ...controls.rank_selector import EVERY_RANK
from ...natural import natural_sorted
from ..tensors import PATH as TENSORS_PATH
from .layout import BY_TYPE, HEATMAP, LINES


def trials_of(selection: Mapping | None, overlay: list | None, known: list[str]) -> list[str]:
    """The trials drawn: the selection's trial first, then the overlaid ones (known only)."""
    trial = ((selection or {}).get("current") or {}).get("trial")
    out = [trial] if trial in known else []
    return out + [t for t in (overlay or []) if t in known and t not in out]


def rank_for(rank: Any, ranks: list[int]) -> Any:
    """What a trial is read with: the chosen rank when the trial has it (or side by side
    when it has several ranks), else None (its only, or lowest, rank)."""
    if rank == EVERY_RANK:
        return rank if len(ranks) > 1 else None
    return rank if rank in ranks else None


def window_of(value: Any) -> int:
    """The aggregation window typed in: a whole number of steps, at least 1."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def view_of(view: Any, modules: int) -> str:
    """The view drawn: the choice, or for ``auto`` one plot up to ``mg.LINES_UP_TO``
    modules and a plot per module type beyond."""
    if view in (LINES, BY_TYPE, HEATMAP):
        return view
    return LINES if modules <= mg.LINES_UP_TO else BY_TYPE


def shown_modules(options: list | None, chosen: list | None, search: str | None) -> list[str]:
    """The modules drawn: the chosen ones (every module when none is), those the search
    matches, in natural order."""
    every = natural_sorted(o["value"] for o in options or [])
    picked = [m for m in every if m in set(chosen or [])] or every
    return mg.search_modules(picked, search)


def where_clicked(point: Mapping[str, Any], target: str) -> dict:
    """The selection's fields a clicked point opens: its trial, step and module (the
    module's output on the Tensors page)."""
    where = {"trial": point["trial"], "node": point["module"],
             "training_step": point["training_step"]}
    if target == TENSORS_PATH:
        where["role"] = "output 0"
    return where

