"""The Modules page's reads (issue 15): the module graph, the histograms and the watch
report of a trial, through the query API, cached in the GUI's one cache per data version
of the trial (so a refresh that finds new steps reads them again: the page is live).

Kept beside ``AppData`` rather than inside it: the reads are the page's alone, and a
recording made without ``watch`` simply has none (every function then returns None or
an empty frame, never an error).

The histograms of a distributed recording are read per rank (``rank``): None is the
lowest rank, an int that rank, ``EVERY_RANK`` every rank (a ``rank`` column),
``MERGED`` the ranks' counts added (``Group.read_merged_histograms`` with ``rebin``: exact
where the ranks' bin edges agree, re-binned where they differ). The module graph is the
lowest rank's: under data-parallel training every rank has the same one.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .controls.rank_selector import EVERY_RANK, MERGED
from .data import AppData

#: A trial's module graph is looked for in at most this many of its latest steps (the
#: structure is deduplicated: one graph per distinct structure, most steps share it).
MAX_STEPS_TRIED = 50


def _read(data: AppData, name: str) -> Any | None:
    group = data.group
    return getattr(group, name, None) if group is not None else None


def data_version(data: AppData, trial: str) -> tuple[int, int]:
    """The data version the watch reads are cached under: the trial's, and the group's,
    which also grows when only a watch table got a new shard (a histogram shard can land
    one refresh after its step's rows)."""
    group = data.group
    return data.trial_version(trial), int(group.version) if group is not None else 0


def module_graph_steps(data: AppData, trial: str) -> list[int]:
    """The steps that have a module graph, ascending (every recorded step when the query
    API cannot list them)."""
    listing = _read(data, "list_module_graph_steps")
    if listing is None or trial not in data.trial_ids():
        return list(data.steps(trial)) if trial in data.trial_ids() else []
    frame = data.cached(
        ("module_graph_steps", trial, data_version(data, trial)),
        lambda: data.safely(f"module graph steps of {trial}", lambda: listing(trial), None),
    )
    if frame is None or frame.empty:
        return []
    return sorted({int(s) for s in frame["training_step"]})


def module_graph(data: AppData, trial: str, step: int | None = None) -> tuple[int | None, dict | None]:
    """``(step, graph)``: the module graph of ``step`` if it has one, else of the latest
    step that has one; ``(None, None)`` without any."""
    read = _read(data, "read_module_graph")
    if read is None or trial not in data.trial_ids():
        return None, None
    version = data_version(data, trial)
    steps = module_graph_steps(data, trial)
    tried = ([step] if step in steps else []) + steps[::-1][:MAX_STEPS_TRIED]
    for candidate in dict.fromkeys(tried):
        graph = data.cached(
            ("module_graph", trial, version, candidate),
            # {} for "no graph at this step": kept, so the search does not read it again
            lambda c=candidate: data.safely(
                f"module graph of {trial} step {c}", lambda: read(trial, c) or {}, {}),
        )
        if graph:
            return candidate, graph
    return None, None


def histograms(data: AppData, trial: str, module: str, rank: Any = None) -> pd.DataFrame:
    """Every histogram row of one module invocation of a trial, of ``rank``."""
    read = _read(data, "read_histograms")
    if read is None or trial not in data.trial_ids():
        return pd.DataFrame()
    if rank == MERGED:
        merged = _read(data, "read_merged_histograms")
        if merged is None:
            return pd.DataFrame()

        def load() -> pd.DataFrame:
            return merged(trial, modules=[module], rebin=True)
    elif rank == EVERY_RANK:
        def load() -> pd.DataFrame:
            return read(trial, modules=[module], ranks=EVERY_RANK)
    else:
        def load() -> pd.DataFrame:
            return read(trial, modules=[module], **({} if rank is None else {"rank": int(rank)}))
    key = ("module_histograms", trial, data_version(data, trial), module, rank)
    frame = data.cached(
        key, lambda: data.safely(f"histograms of {module} in {trial}", load, None))
    return frame if frame is not None else pd.DataFrame()


def watch_report(data: AppData, trial: str) -> dict | None:
    """Which modules ``watch`` hooked and which it skipped, and why (None: not watched)."""
    read = _read(data, "read_watch_report")
    if read is None or trial not in data.trial_ids():
        return None
    key = ("watch_report", trial, data_version(data, trial))
    return data.cached(
        key, lambda: data.safely(f"watch report of {trial}", lambda: read(trial), None))
