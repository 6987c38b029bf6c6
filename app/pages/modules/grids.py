"""The histogram panels' pure pieces: the rank read, which steps and rows a grid
shows, the frames by trial and rank."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from comgra_like.vocabulary import ANY_TYPE

from ... import module_figures as mf
from ... import selection as sel
from ...controls.rank_selector import EVERY_RANK, MERGED


def rank_for(rank: Any, ranks: list[int]) -> Any:
    """What a trial's histograms are read with: the choice when the trial has it (a
    trial of one rank: its rank), else None (the lowest rank)."""
    if rank in (EVERY_RANK, MERGED):
        return rank if len(ranks) > 1 else None
    return rank if rank in ranks else None


def steps_of_execution(steps: Mapping[int, Any], execution: str | None) -> set[int] | None:
    """The steps of one type of execution (None: every step)."""
    if execution in (None, ANY_TYPE):
        return None
    return {s for s, info in steps.items() if info.type_of_execution == execution}


def per_rank(frames: Mapping[str, Any]) -> dict[tuple[str, int | None], Any]:
    """The frames by (trial, rank): a frame of every rank side by side (a ``rank``
    column) split into one per rank, the others under rank None; the selection's trial
    first."""
    out: dict[tuple[str, int | None], Any] = {}
    for t, frame in frames.items():
        if frame is not None and "rank" in frame and not frame.empty:
            for r, part in frame.groupby("rank", sort=True):
                out[(t, int(r))] = part
        else:
            out[(t, None)] = frame
    return out


def panel_grid(frame: Any, what: str, role: str, execution: str | None,
          steps: Mapping[int, Any], recording_type: str | None = None) -> mf.HistogramGrid | None:
    """The grid of one role and kind for the steps of one type of execution, of one
    recording type (None: the first one, forward, then the gradient groups)."""
    if frame is None or frame.empty:
        return None
    part = frame[(frame["what"] == what) & (frame["role"] == role)]
    if execution not in (None, ANY_TYPE):
        if "type_of_execution" in part:
            part = part[part["type_of_execution"] == execution]
        else:
            part = part[part["training_step"].isin(steps_of_execution(steps, execution))]
    if recording_type is not None and "recording_type" in part:
        part = part[part["recording_type"] == recording_type]
    elif "recording_type" in part and part["recording_type"].nunique() > 1:
        first = min(part["recording_type"].unique(), key=sel.recording_type_sort_key)
        part = part[part["recording_type"] == first]
    return mf.histogram_grid(part) if len(part) else None


def most_common_type(steps: Mapping[int, Any]) -> str:
    """The type of execution most steps have (training, typically): the default columns."""
    counts: dict[str, int] = {}
    for info in steps.values():
        counts[info.type_of_execution] = counts.get(info.type_of_execution, 0) + 1
    return max(counts, key=counts.get) if counts else ANY_TYPE

