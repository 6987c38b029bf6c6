"""Reads of the per-module metrics (issue 16): the ``metrics`` table of each trial
(docs/FORMAT.md, "metrics"), one row per (training step, module, metric, backward pass).

The shard names come from the refresh's listing (:meth:`MetricsIndex.update` asks the
index's :class:`~comgra_like.query.listing.GroupListing`), so reads between two refreshes answer from the same snapshot, like the other reads of the
query API; the rows of a trial are read once per set of shard names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError, StorageError
from ..format.files import files_for
from ..format.layout import METRICS, TrialLayout, shard_rank
from ..format.schema import RANK, SCHEMAS, conform, current_names
from .listing import GroupListing, live_now

#: The columns of ``Group.read_metrics``, in this order: the files' words (docs/FORMAT.md,
#: "Vocabulary"; ``wall_time`` was ``time`` in older files and reads).
METRIC_COLUMNS = ["training_step", "type_of_execution", "module", "module_class", "metric",
                  "backward_pass", "value", "vector", "wall_time"]
#: The columns of ``Group.list_metrics``.
LIST_COLUMNS = ["module", "module_class", "metric", "n_points"]
_SORT = ["metric", "module", "training_step", "backward_pass"]


class MetricsIndex:
    """The metrics shard names per trial, as of the last :meth:`update`, and the rows
    read for them."""

    def __init__(self, group: Path):
        self.group = Path(group)
        self.files = files_for(group)  # the local disk or an object store
        self._shards: dict[str, tuple[str, ...]] = {}
        self._tables: dict[str, tuple[tuple[str, ...], pa.Table]] = {}

    def update(self, listing: GroupListing | None = None,
               listed_now: Callable[[Path], bool] | None = None) -> bool:
        """Every trial's metrics shards, from ``listing`` (the refresh's; a listing of
        its own without one); True if anything changed. A folder the listing could not
        list now (``listed_now`` says, and reports it; by default the listing's
        ``listed``) keeps the shards known before."""
        listing = listing or GroupListing(self.group, self.files)
        listed_now = listed_now or listing.listed
        changed = False
        names = listing.visible_trial_folders()
        for trial_id in names:
            folder = TrialLayout.of(self.group, trial_id).table(METRICS)
            live = tuple(listing.live(folder))
            if not listed_now(folder):
                continue
            if self._shards.get(trial_id, ()) != live:
                self._shards[trial_id] = live
                changed = True
        for gone in set(self._shards) - set(names):
            del self._shards[gone]
            self._tables.pop(gone, None)
        return changed

    def ranks(self, trial_id: str) -> set[int]:
        """The ranks that wrote metrics shards of a trial."""
        return {r for n in self._shards.get(trial_id, ()) if (r := shard_rank(n)) is not None}

    def table(self, trial_id: str) -> pa.Table:
        """Every metrics row of a trial (an empty table when it has none), with a ``rank``
        column last (the rank that wrote the shard, from its name)."""
        names = self._shards.get(trial_id, ())
        cached = self._tables.get(trial_id)
        if cached is not None and cached[0] == names:
            return cached[1]
        folder = TrialLayout.of(self.group, trial_id).table(METRICS)
        parts = []
        for name in names:
            try:
                # older files' column names read as the current ones
                part = conform(current_names(self.files.read_parquet(folder / name), METRICS),
                               SCHEMAS[METRICS])
            except FileNotFoundError:
                # compacted since the refresh: the compacted file holds the same rows
                self._shards[trial_id] = tuple(live_now(self.files, folder))
                return self.table(trial_id)
            except (OSError, pa.ArrowException) as e:
                raise StorageError(f"cannot read {folder / name}: {e}") from None
            parts.append(part.append_column(RANK, pa.array(
                np.full(part.num_rows, shard_rank(name) or 0, np.int32))))
        result = (pa.concat_tables(parts).unify_dictionaries() if parts
                  else SCHEMAS[METRICS].empty_table().append_column(
                      RANK, pa.array([], pa.int32())))
        if trial_id in self._shards:
            self._tables[trial_id] = (names, result)
        return result


def _as_list(value: Any, what: str) -> list | None:
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise ConfigurationError(f"{what} must be a value or a list of values, got "
                           f"{type(value).__name__}") from None


def _filter(table: pa.Table, column: str, wanted: list) -> pa.Table:
    col = table.column(column)
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
        values = pa.array([str(v) for v in wanted], pa.string())
    else:
        values = pa.array([int(v) for v in wanted], col.type)
    return table.filter(pc.is_in(col, value_set=values))


def _plain(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return col.to_numpy()


def _of_ranks(table: pa.Table, ranks: list[int]) -> pa.Table:
    return table.filter(pc.is_in(table.column(RANK), value_set=pa.array(ranks, pa.int32())))


def read_metrics(index: MetricsIndex, trial_id: str, *, ranks: list[int],
                 with_rank: bool = False, module: Any = None, metric: Any = None,
                 steps: Any = None) -> pd.DataFrame:
    """The metric rows of a trial's ``ranks`` (see ``Group.read_metrics``); ``with_rank``
    adds a ``rank`` column (rows sorted by rank after the usual order)."""
    table = _of_ranks(index.table(trial_id), ranks)
    for column, wanted, what in (("module", module, "module"), ("metric", metric, "metric"),
                                 ("training_step", steps, "steps")):
        values = _as_list(wanted, what)
        if values is not None:
            table = _filter(table, column, values)
    names = METRIC_COLUMNS + ([RANK] if with_rank else [])
    columns: dict[str, Any] = {}
    for name in names:
        if name == "vector":
            columns[name] = [None if v is None else np.asarray(v, dtype=np.float64)
                             for v in table.column(name).to_pylist()]
        else:
            columns[name] = _plain(table, name)
    frame = pd.DataFrame(columns, columns=names)
    return frame.sort_values(_SORT + ([RANK] if with_rank else []),
                             kind="stable").reset_index(drop=True)


def list_metrics(index: MetricsIndex, trial_id: str, *, ranks: list[int],
                 with_rank: bool = False) -> pd.DataFrame:
    """(module, module_class, metric, n_points) of every metric of a trial's ``ranks``;
    ``n_points`` counts its rows (a step with several backward passes counts each); with
    ``with_rank`` one row per rank too (a ``rank`` column)."""
    table = _of_ranks(index.table(trial_id), ranks)
    key = LIST_COLUMNS[:3] + ([RANK] if with_rank else [])
    if not table.num_rows:
        empty = {"module": pd.Series([], dtype=object),
                 "module_class": pd.Series([], dtype=object),
                 "metric": pd.Series([], dtype=object)}
        if with_rank:
            empty[RANK] = pd.Series([], dtype=np.int32)
        return pd.DataFrame({**empty, "n_points": pd.Series([], dtype=np.int64)})
    frame = pd.DataFrame({name: _plain(table, name) for name in key})
    counts = frame.groupby(key, sort=True).size().rename("n_points").reset_index()
    counts["n_points"] = counts["n_points"].astype(np.int64)
    return counts.sort_values(["metric", "module"] + ([RANK] if with_rank else []),
                              kind="stable").reset_index(drop=True)
