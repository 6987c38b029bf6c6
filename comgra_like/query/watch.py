"""Reads of what ``comgra_like.watch`` records: the histograms table, the module graph of
a step and the watch report (docs/FORMAT.md, "watch()").

The shard names of both tables are listed when the group refreshes (``WatchIndex.update``),
so that reads between two refreshes answer from the same snapshot, like the other reads
of the query API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import StorageError
from ..format.files import files_for
from ..format.graphs import is_graph_digest
from ..format.layout import (
    HISTOGRAMS,
    MODULE_STEPS,
    TrialLayout,
    is_hidden,
    live_shards,
    trials_dir,
)
from ..format.schema import SCHEMAS

#: what a histogram is of (the ``what`` column)
WHATS = ("io", "io_grad", "params", "params_grad")

HISTOGRAM_COLUMNS = ["training_step", "type_of_execution", "iteration", "node", "role",
                     "recording_type", "what", "time", "lo", "hi", "counts", "n", "vmin",
                     "vmax"]


@dataclass
class _TrialWatch:
    shards: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> live names
    report_signature: tuple | None = None
    tables: dict[str, tuple[tuple[str, ...], pa.Table]] = field(default_factory=dict)
    report: tuple[tuple | None, dict | None] | None = None


class WatchIndex:
    """The shard names of the watch tables per trial, as of the last ``update``."""

    def __init__(self, group: Path):
        self.group = Path(group)
        self.files = files_for(group)  # the local disk or an object store
        self._trials: dict[str, _TrialWatch] = {}

    def update(self) -> bool:
        """List the watch tables' shards of every trial; True if anything changed."""
        changed = False
        root = trials_dir(self.group)
        names = [n for n in self.files.list_folders(root) if not is_hidden(n)]
        for trial_id in names:
            layout = TrialLayout.of(self.group, trial_id)
            state = self._trials.setdefault(trial_id, _TrialWatch())
            for table in (HISTOGRAMS, MODULE_STEPS):
                live = tuple(live_shards(self.files.list(layout.table(table))))
                if state.shards.get(table, ()) != live:
                    state.shards[table] = live
                    changed = True
            sig = self.files.signature(layout.watch_json)
            if sig != state.report_signature:
                state.report_signature = sig
                changed = True
        for gone in set(self._trials) - set(names):
            del self._trials[gone]
        return changed

    def _state(self, trial_id: str) -> _TrialWatch:
        return self._trials.get(trial_id) or _TrialWatch()

    def table(self, trial_id: str, table: str) -> pa.Table:
        """The rows of one watch table of a trial (read once per set of shard names)."""
        state = self._state(trial_id)
        names = state.shards.get(table, ())
        cached = state.tables.get(table)
        if cached is not None and cached[0] == names:
            return cached[1]
        folder = TrialLayout.of(self.group, trial_id).table(table)
        parts = []
        for name in names:
            try:
                parts.append(self.files.read_parquet(folder / name, schema=SCHEMAS[table]))
            except FileNotFoundError:
                # compacted since the refresh: the compacted file holds the same rows
                live = live_shards(self.files.list(folder))
                return self._reread(trial_id, table, tuple(live))
            except (OSError, pa.ArrowException) as e:
                raise StorageError(f"cannot read {folder / name}: {e}") from None
        result = (pa.concat_tables(parts).unify_dictionaries() if parts
                  else SCHEMAS[table].empty_table())
        state.tables[table] = (names, result)
        return result

    def _reread(self, trial_id: str, table: str, names: tuple[str, ...]) -> pa.Table:
        state = self._trials.setdefault(trial_id, _TrialWatch())
        state.shards[table] = names
        state.tables.pop(table, None)
        return self.table(trial_id, table)

    def report(self, trial_id: str) -> dict | None:
        state = self._state(trial_id)
        if state.report is not None and state.report[0] == state.report_signature:
            return state.report[1]
        path = TrialLayout.of(self.group, trial_id).watch_json
        try:
            value = self.files.read_json(path)
        except FileNotFoundError:
            value = None
        except (OSError, ValueError) as e:
            raise StorageError(f"cannot read the watch report {path}: {e}") from None
        if value is not None and not isinstance(value, dict):
            raise StorageError(f"the watch report {path} is not a JSON object")
        if trial_id in self._trials:
            state.report = (state.report_signature, value)
        return value


def _as_list(value: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


def read_histograms(index: WatchIndex, trial_id: str, *, nodes: Any = None,
                    roles: Any = None, what: Any = None, steps: Any = None,
                    recording_types: Any = None,
                    types_of_execution: Any = None) -> pd.DataFrame:
    """The histograms of a trial as one row each (see ``Group.read_histograms``)."""
    table = index.table(trial_id, HISTOGRAMS)
    mask = None
    for column, wanted in (("node", nodes), ("role", roles), ("what", what),
                           ("training_step", steps), ("recording_type", recording_types),
                           ("type_of_execution", types_of_execution)):
        values = _as_list(wanted)
        if values is None:
            continue
        col = table.column(column)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
            values = [str(v) for v in values]
        else:
            values = [int(v) for v in values]
        m = pc.is_in(col, value_set=pa.array(values, type=col.type))
        mask = m if mask is None else pc.and_(mask, m)
    if mask is not None:
        table = table.filter(mask)
    columns = {}
    for name in HISTOGRAM_COLUMNS:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        if name == "counts":
            columns[name] = [np.asarray(x, dtype=np.int64) for x in col.to_pylist()]
        else:
            columns[name] = col.to_numpy()
    frame = pd.DataFrame(columns, columns=HISTOGRAM_COLUMNS)
    return frame.sort_values(["training_step", "iteration", "what", "node", "role",
                              "recording_type"], kind="stable").reset_index(drop=True)


def module_graph_hash(index: WatchIndex, trial_id: str, training_step: int,
                      iteration: int | None = None) -> str | None:
    """The graph hash of a step's module graph (the first iteration's unless given)."""
    table = index.table(trial_id, MODULE_STEPS)
    mask = pc.equal(table.column("training_step"), pa.scalar(int(training_step), pa.int64()))
    if iteration is not None:
        mask = pc.and_(mask, pc.equal(table.column("iteration"),
                                      pa.scalar(int(iteration), pa.int32())))
    rows = table.filter(mask)
    if not rows.num_rows:
        return None
    order = pc.sort_indices(rows.column("iteration"))
    return str(rows.column("graph_hash").cast(pa.string())[order[0].as_py()].as_py())


def read_module_graph_file(group: Path, trial_id: str, digest: str) -> dict:
    if not is_graph_digest(digest):
        raise StorageError(f"{digest[:80]!r} names no graph file (64 hex digits expected)")
    path = TrialLayout.of(group, trial_id).module_graph(digest)
    try:
        value = files_for(path).read_json(path)
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read the module graph {path}: {e}") from None
    if not isinstance(value, dict) or "invocations" not in value:
        raise StorageError(f"{path} is no module graph (no 'invocations')")
    return value


def module_graph_steps(index: WatchIndex, trial_id: str) -> pd.DataFrame:
    """training_step, type_of_execution, iteration, graph_hash of every step with one."""
    table = index.table(trial_id, MODULE_STEPS)
    frame = pd.DataFrame({
        name: (table.column(name).cast(pa.string()) if pa.types.is_dictionary(
            table.column(name).type) else table.column(name)).to_numpy()
        for name in ("training_step", "type_of_execution", "iteration", "graph_hash")})
    return frame.sort_values(["training_step", "iteration"]).reset_index(drop=True)
