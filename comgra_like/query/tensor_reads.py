"""The query API's reads of tensor values and statistics (a part of :class:`Group`).

:class:`TensorReads` reads the tensors shards the index found: a step's rows
(``list_tensors``, ``read_tensor``), one statistic over the steps (``read_series``), many
tensors and steps at once (``read_statistics``), and the ranks of a distributed recording
merged or side by side. Every read goes through the group's byte-bounded cache and
follows a file a compaction replaced since the refresh (``_read_file``).

A mixin of :class:`comgra_like.query.provider.Group`, which gives it the index, the
cache, the cache keys and the choice of ranks (``_trial``, ``_rank``, ``_rank_files``,
``_key``, ``_drop``, ``list_ranks``); users call these methods on a ``Group``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format.files import StoreUnreachable, unreachable
from ..format.layout import shard_rank
from ..format.schema import RANK
from ..vocabulary import ALL_STATISTICS, BATCH_AGGREGATIONS, NO_BATCH, STATISTICS
from . import ranks as rank_merge
from .cache import estimate_bytes
from .graphs import parse_graph
from .tensors import (
    KEY_COLUMNS,
    LARGE_STEP_BYTES,
    NO_VALUES,
    ROW_KEY,
    STATISTICS_KEY_COLUMNS,
    TENSORS_SCHEMA,
    Footer,
    SeriesIndex,
    drop_repeated,
    empty_series,
    overlapping,
    read_columns,
    row_mask,
    served_filter,
    statistic_names,
    statistics_filter,
    statistics_frame,
    step_filter,
    step_selection,
)
from .trial_index import TensorFile, TrialIndex, to_pandas
from .types import TensorRecord

# What the group caches of the tensors; a key is (the group's namespace, one of these,
# trial id, step or file name), so that groups and the GUI can share one cache without
# mixing values up.
CACHE_STEP, CACHE_LIST, CACHE_SERIES, CACHE_COLUMN = "step", "list", "series_index", "column"
CACHE_VALUES = "values"
CACHE_FOOTER = "footer"

T = TypeVar("T")


class TensorReads:
    """Reads of tensor values and statistics: a part of :class:`Group` (a mixin)."""

    def _read_file(self, trial: TrialIndex, f: TensorFile, read: Callable[[TensorFile], T],
                   done: set[str]) -> tuple[TensorFile, T] | None:
        """(the file read, ``read(file)``): ``f``, or the file a compaction replaced it
        with since the last refresh; None for a damaged file (reported) or a file read
        already (in ``done``). StoreUnreachable when the store does not answer now: the
        file is not marked damaged (reported until the next refresh; read it again)."""
        for attempt in range(2):
            if f.name in done:
                return None
            try:
                result = read(f)
            except FileNotFoundError as e:
                replacement = None if attempt else self._index.replacement(trial, f)
                if replacement is None:
                    raise NotFoundError(
                        f"{f.path} is gone since the last refresh() (the trial was deleted or "
                        "rewritten); refresh to read what is there now") from e
                f = replacement
                continue
            except Exception as e:  # damage is reported; an outage raises
                if unreachable(e):
                    self._index.read_unreachable(f, e)
                    raise StoreUnreachable(
                        f"{self._index.files.display(f.path)} could not be read now (the "
                        "store did not answer: "
                        f"{' '.join(str(e).split())}); it is not marked damaged: read it "
                        "again") from e
                self._index.read_failed(trial, f, e)
                self._drop(lambda kind, t, x, key=(CACHE_SERIES, trial.trial_id, f.name):
                           (kind, t, x) == key)
                return None
            done.add(f.name)
            return f, result
        return None

    def _step_files(self, trial_id: str, step: int, rank: int | None) -> list[TensorFile]:
        trial = self._trial(trial_id)
        rank = self._rank(trial, rank)
        return [f for f in trial.steps_holding(step) if shard_rank(f.name) == rank]

    def _large_step(self, trial_id: str, step: int, rank: int | None) -> bool:
        """Whether the row groups of a step hold more than LARGE_STEP_BYTES (then its
        values are read one row at a time)."""
        total = 0
        for f in self._step_files(trial_id, step, rank):
            try:
                total += self._footer(trial_id, f).step_bytes(int(step))
            except Exception:  # noqa: BLE001, S112 - the read that follows reports it
                continue
        return total > LARGE_STEP_BYTES

    def _step_table(self, trial_id: str, step: int, rank: int | None = None,
                    columns: list[str] | None = None) -> pa.Table:
        """The rows of a step of one rank: ``columns`` (None: all, values included)."""
        trial = self._trial(trial_id)
        rank = self._rank(trial, rank)
        key = self._key(CACHE_STEP, trial_id, (int(step), rank,
                                          None if columns is None else tuple(columns)))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        files = self._step_files(trial_id, step, rank)
        tables: list[pa.Table] = []
        done: set[str] = set()
        for f in files:
            read = self._read_file(
                trial, f, lambda f: self._footer(trial_id, f).read_step(step, columns), done)
            if read is not None and read[1].num_rows:
                tables.append(read[1])
        if not tables:
            damaged = [f for f in list(trial.damaged_tensor_files.values())
                       if f.min_step <= step <= f.max_step]
            if damaged:
                reason = trial.damage_of("tensors", damaged[0].name) or ""
                raise StorageError(
                    f"the tensors of step {step} of trial {trial_id!r} are in a damaged file, "
                    f"which was skipped: {damaged[0].path}: {reason}")
            raise NotFoundError(f"trial {trial_id!r} has no tensor data for step {step}"
                                + (f" of rank {rank}" if rank else ""))
        if len(tables) > 1:
            table = drop_repeated(pa.concat_tables(tables).unify_dictionaries(), ROW_KEY)
        else:
            table = tables[0]
        self._cache.put(key, table, table.nbytes)
        return table

    def list_tensors(self, trial_id: str, training_step: int,
                     rank: int | None = None) -> pd.DataFrame:
        """What is recorded at a step (no values): one row per tensor row on disk of one
        rank (``rank``, or the lowest). Reads no values."""
        rank = self._rank(self._trial(trial_id), rank)
        key = self._key(CACHE_LIST, trial_id, (int(training_step), rank))
        cached = self._cache.get(key)
        if cached is None:
            # the rows without values: what read_tensor of a large step reads too (one
            # cached read for both), and a damaged shard shows before a tensor is chosen
            table = self._step_table(trial_id, training_step, rank, NO_VALUES)
            cached = to_pandas(table.select([c for c in KEY_COLUMNS if c != "shape"]))
            cached["shape"] = [tuple(s) for s in table.column("shape").to_pylist()]
            self._cache.put(key, cached, estimate_bytes(cached) * 4)
        return cached.copy()

    def read_tensor(self, trial_id: str, training_step: int, iteration: int, node: str,
                    role: str, recording_type: str, aggregation: str,
                    sample_index: int = -1, rank: int | None = None) -> TensorRecord:
        """One tensor row with its values, as one rank recorded it (``rank``, or the
        lowest); :meth:`read_merged_tensor` merges the ranks.

        A large step (:data:`~comgra_like.query.tensors.LARGE_STEP_BYTES`) is not read
        whole: its rows without values, then this row's values alone."""
        large = self._large_step(trial_id, training_step, rank)
        table = self._step_table(trial_id, training_step, rank, NO_VALUES if large else None)
        row_key = {"iteration": int(iteration), "node": node, "role": role,
                   "recording_type": recording_type, "aggregation": aggregation,
                   "sample_index": int(sample_index)}
        rows = table.filter(row_mask(table, row_key))
        if rows.num_rows == 0:
            target = self._alias_target(trial_id, training_step, iteration, node, role)
            if target is not None:  # a re-registered tensor: its data lives under the original
                return self.read_tensor(trial_id, training_step, target[2], target[0], target[1],
                                        recording_type, aggregation, sample_index, rank)
            raise NotFoundError(
                f"trial {trial_id!r}, step {training_step}, iteration {iteration}: nothing "
                f"recorded for node {node!r} role {role!r} ({recording_type}, {aggregation}, "
                f"sample {sample_index})"
            )
        first = rows.slice(0, 1)
        row = first.select([c for c in first.column_names if c != "values"]).to_pylist()[0]
        shape = tuple(int(s) for s in (row["shape"] or ()))
        if large:
            arr = self._row_values(trial_id, training_step, rank, row_key)
        else:
            arr = _values_array(first.column("values")[0])
        if arr is not None and shape and int(np.prod(shape)) == arr.size:
            arr = arr.reshape(shape)
        stats = {name: (float(row[name]) if row[name] is not None else float("nan"))
                 for name in ALL_STATISTICS}
        return TensorRecord(
            trial_id=trial_id, training_step=int(training_step), iteration=int(iteration),
            node=node, role=role, tensor_name=row["tensor_name"], kind=row["kind"],
            recording_type=recording_type, aggregation=aggregation,
            sample_index=int(sample_index), shape=shape, stats=stats, values=arr,
        )

    def _row_values(self, trial_id: str, step: int, rank: int | None,
                    row_key: dict[str, Any]) -> np.ndarray | None:
        """The values of one row of a large step, read alone (cached by their size)."""
        trial = self._trial(trial_id)
        rank = self._rank(trial, rank)
        key = self._key(CACHE_VALUES, trial_id, (int(step), rank, tuple(row_key.items())))

        def read() -> np.ndarray | None:
            done: set[str] = set()
            for f in self._step_files(trial_id, step, rank):
                got = self._read_file(trial, f, lambda f: self._footer(
                    trial_id, f).read_values(int(step), row_key), done)
                if got is not None and got[1] is not None:
                    return _values_array(got[1])
            return None

        return self._cache.get_or_compute(
            key, read, lambda a: 64 if a is None else int(a.nbytes) + 64)

    def _alias_target(self, trial_id: str, training_step: int, iteration: int, node: str,
                      role: str) -> tuple | None:
        trial = self._trial(trial_id)
        steps = trial.steps
        rows = steps[steps["training_step"] == training_step]
        for it, digest in zip(rows["iteration"], rows["graph_hash"]):
            structure = trial.graphs.get(digest)
            if structure is None:
                continue
            graph = parse_graph(digest, int(it), structure)
            for n in graph.nodes:
                if n.node == node and n.iteration == iteration and role in n.alias_of:
                    return n.alias_of[role]
        return None

    # Built once however many callbacks ask at the same time (get_or_compute): two
    # builds of one series index side by side doubled the GUI's peak memory.
    def _series_index(self, trial_id: str, f: TensorFile) -> SeriesIndex:
        return self._cache.get_or_compute(self._key(CACHE_SERIES, trial_id, f.name),
                                          lambda: SeriesIndex.build(f.path), _nbytes)

    def _footer(self, trial_id: str, f: TensorFile) -> Footer:
        return self._cache.get_or_compute(self._key(CACHE_FOOTER, trial_id, f.name),
                                          lambda: Footer(f.path), _nbytes)

    def _statistic_column(self, trial_id: str, f: TensorFile, statistic: str) -> np.ndarray:
        """One statistic of every row of a tensors file (cached: the next tensor's series
        of the same statistic is a ``take``)."""
        return self._cache.get_or_compute(
            self._key(CACHE_COLUMN, trial_id, (f.name, statistic)),
            lambda: self._series_index(trial_id, f).read_statistic(
                statistic, self._footer(trial_id, f).metadata), _nbytes)

    def read_series(self, trial_id: str, node: str, role: str, recording_type: str,
                    aggregation: str, statistic: str, iteration: int | None = None,
                    sample_index: int = -1, type_of_execution: str | None = None,
                    rank: int | None = None) -> pd.DataFrame:
        """One statistic of one tensor over all recorded steps of a trial, as one rank
        recorded it (``rank``, or the lowest)."""
        if statistic not in ALL_STATISTICS:
            raise NotFoundError(f"unknown statistic {statistic!r}; choose one of {ALL_STATISTICS}")
        trial = self._trial(trial_id)
        files = self._rank_files(trial, self._rank(trial, rank))
        frames = []
        done: set[str] = set()
        for f in files:
            read = self._read_file(trial, f, lambda f: self._series_index(trial_id, f), done)
            if read is None:
                continue
            f, index = read
            rows = index.rows(node, role, recording_type, aggregation, int(sample_index))
            if rows is None:
                continue
            read = self._read_file(trial, f, lambda f: self._statistic_column(trial_id, f,
                                                                              statistic), set())
            if read is None:
                continue
            frame = index.series(rows, read[1])
            if f.served != (f.min_step, f.max_step):  # stands in for files a compaction merged
                frame = frame[frame["training_step"].between(*f.served)]
            if iteration is not None:
                frame = frame[frame["iteration"] == int(iteration)]
            if type_of_execution is not None:
                frame = frame[frame["type_of_execution"] == type_of_execution]
            frames.append(frame)
        if not frames:
            return empty_series()
        out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        out = out.sort_values(["training_step", "iteration"], kind="stable")
        if overlapping(files):
            out = out.drop_duplicates(["training_step", "iteration"], keep="first")
        return out.reset_index(drop=True)

    def read_statistics(self, trial_id: str, *, nodes: Any = None, roles: Any = None,
                        recording_types: Any = None, aggregations: Any = None,
                        statistics: Any = None, steps: Any = None, iterations: Any = None,
                        types_of_execution: Any = None, as_pandas: bool = True,
                        ranks: Any = None, rank: int | None = None
                        ) -> pd.DataFrame | pa.Table:
        """The statistics of many tensors and steps of a trial at once (no values).

        Each filter is a name (an int for ``iterations``) or a list of them; None keeps
        all. ``steps`` is a ``range`` (stop excluded) or a ``(first, last)`` pair (both
        included). One row per tensor row on disk: the columns of
        ``STATISTICS_KEY_COLUMNS`` plus the ``statistics`` asked for (all by default),
        ordered by training step. A pandas frame (names as str, statistics float64) or,
        with ``as_pandas=False``, an Arrow table with the file's types (names
        dictionary-encoded, statistics float32 with nulls, numel int64).

        A distributed recording, as every read of the query API: ``rank`` reads one rank
        (None: the lowest, every rank of a single-process recording); ``ranks``
        (``"all"``, one rank or a list) reads those with a ``rank`` column, ordered by
        training step and rank. Not both.
        """
        trial = self._trial(trial_id)
        if ranks is not None and rank is not None:
            raise ConfigurationError(
                f"rank={rank!r} and ranks={ranks!r}: pass one of them (rank= reads one "
                "rank, ranks= several with a rank column)")
        chosen = rank_merge.select_ranks(ranks, self.list_ranks(trial_id))
        if chosen is not None:
            tables = [self.read_statistics(
                trial_id, nodes=nodes, roles=roles, recording_types=recording_types,
                aggregations=aggregations, statistics=statistics, steps=steps,
                iterations=iterations, types_of_execution=types_of_execution,
                as_pandas=False, rank=r) for r in chosen]
            tables = [t.append_column(RANK, pa.array(np.full(t.num_rows, r, np.int32)))
                      for t, r in zip(tables, chosen)]
            table = (pa.concat_tables(tables, promote_options="permissive")
                     .unify_dictionaries() if tables else None)
            if table is None:
                empty = self.read_statistics(trial_id, statistics=statistics, as_pandas=False,
                                             steps=(1, 0))
                table = empty.append_column(RANK, pa.array([], pa.int32()))
            elif len(tables) > 1:
                table = table.take(pc.sort_indices(table, sort_keys=[
                    ("training_step", "ascending"), (RANK, "ascending")]))
            return statistics_frame(table) if as_pandas else table
        columns = STATISTICS_KEY_COLUMNS + statistic_names(statistics)
        expr = statistics_filter(nodes=nodes, roles=roles, recording_types=recording_types,
                                 aggregations=aggregations, iterations=iterations,
                                 types_of_execution=types_of_execution)
        selection = step_selection(steps)
        if selection is not None:
            step_expr = step_filter(*selection)
            expr = step_expr if expr is None else expr & step_expr
        files = self._rank_files(trial, self._rank(trial, rank))
        if selection is not None:
            files = [f for f in files if f.served[0] <= selection[1]
                     and selection[0] <= f.served[1]]
        table = self._scan(trial, files, columns, expr)
        steps_column = table.column("training_step")
        if len(steps_column) > 1 and not _non_decreasing(steps_column):
            table = table.take(pc.sort_indices(steps_column))  # stable: file order kept
        if overlapping(files):
            table = drop_repeated(table, ROW_KEY)
        return statistics_frame(table) if as_pandas else table

    def read_merged_statistics(self, trial_id: str, *, nodes: Any = None, roles: Any = None,
                               recording_types: Any = None, aggregations: Any = None,
                               statistics: Any = None, steps: Any = None,
                               iterations: Any = None, types_of_execution: Any = None,
                               ranks: Any = "all") -> pd.DataFrame:
        """The statistics of several ranks (all by default) merged into those of the
        combined batch, as the rules of :mod:`comgra_like.query.ranks` say: batch_mean
        weighted by batch size, batch_std from combined moments, batch_abs_max the
        largest; rows without a batch dimension kept when every rank has the same value
        (``merge`` = ``same``), NaN and ``differs`` otherwise; ``sample`` rows left out.
        Columns: those of :meth:`read_statistics` and ``batch_size`` (the combined batch),
        ``ranks`` (how many ranks had the row), ``merge``.
        """
        chosen = rank_merge.select_ranks(ranks, self.list_ranks(trial_id))
        wanted = None
        if aggregations is not None:
            wanted = [aggregations] if isinstance(aggregations, str) else list(aggregations)
        # batch_std needs batch_mean of the same statistic: read the three together
        read_aggs = None
        if wanted is not None:
            read_aggs = sorted(set(wanted) | (set(BATCH_AGGREGATIONS) if set(wanted)
                                              & set(BATCH_AGGREGATIONS) else set()))
        frame = self.read_statistics(
            trial_id, nodes=nodes, roles=roles, recording_types=recording_types,
            aggregations=read_aggs, statistics=statistics, steps=steps,
            iterations=iterations, types_of_execution=types_of_execution, ranks=chosen)
        trial = self._trial(trial_id)
        merged = rank_merge.merge_statistics(frame, trial.steps)
        if wanted is not None:
            merged = merged[merged["aggregation"].isin(wanted)].reset_index(drop=True)
        return merged

    def read_merged_tensor(self, trial_id: str, training_step: int, iteration: int, node: str,
                           role: str, recording_type: str, aggregation: str,
                           ranks: Any = "all") -> TensorRecord:
        """One tensor row merged over ranks (all by default), values per neuron included,
        by the rules of :meth:`read_merged_statistics`; ``sample`` rows cannot be merged
        (a ConfigurationError says so)."""
        available = self.list_ranks(trial_id)
        chosen = rank_merge.select_ranks(ranks, available) or available[:1]
        args = (trial_id, training_step, iteration, node, role, recording_type)
        if aggregation == NO_BATCH:
            records = [self.read_tensor(*args, NO_BATCH, -1, r) for r in chosen]
            first = records[0]
            if all(_same_record(r, first) for r in records[1:]):
                return first
            return replace(first, stats={k: float("nan") for k in first.stats}, values=None)
        if aggregation not in BATCH_AGGREGATIONS:
            raise ConfigurationError(
                f"aggregation {aggregation!r} cannot be merged over ranks: a sample belongs "
                "to one rank's batch; read it with read_tensor(..., rank=r)")
        steps = self._trial(trial_id).steps
        parts = {agg: [self.read_tensor(*args, agg, -1, r) for r in chosen]
                 for agg in BATCH_AGGREGATIONS}
        n = []
        for r in chosen:
            row = steps[(steps[RANK] == r) & (steps["training_step"] == training_step)]
            if row.empty:
                raise NotFoundError(f"rank {r} has no steps row for step {training_step} "
                                    "(yet); refresh() and read again")
            n.append(int(row["batch_size"].iloc[0]))
        n = np.asarray(n, np.float64)
        stat_names = list(parts["batch_mean"][0].stats)

        def stack(agg: str, key: str | None) -> np.ndarray:
            if key is None:
                return np.stack([np.asarray(p.values, np.float64) for p in parts[agg]])
            return np.array([p.stats[key] for p in parts[agg]], np.float64)

        index = {"batch_mean": 0, "batch_std": 1, "batch_abs_max": 2}[aggregation]
        first = parts[aggregation][0]
        stats = dict(first.stats)  # numel is per sample; svd_top, update_ratio: parameters
        for key in (k for k in stat_names if k in STATISTICS):
            stats[key] = float(rank_merge.merge_batch(
                n, stack("batch_mean", key), stack("batch_std", key),
                stack("batch_abs_max", key))[index])
        values = None
        if all(p.values is not None for agg in BATCH_AGGREGATIONS for p in parts[agg]):
            values = rank_merge.merge_batch(n, stack("batch_mean", None),
                                            stack("batch_std", None),
                                            stack("batch_abs_max", None))[index]
            values = values.astype(np.float32)
        return replace(first, stats=stats, values=values)

    def read_ranks_side_by_side(self, trial_id: str, node: str, role: str,
                                recording_type: str, aggregation: str, statistic: str, *,
                                iteration: int | None = None, sample_index: int = -1,
                                steps: Any = None, ranks: Any = "all") -> pd.DataFrame:
        """One statistic of one tensor row, one column per rank (named by the rank), one
        row per training step and iteration; ``spread`` (largest minus smallest) and
        ``farthest`` (the rank farthest from the median) point at a drifting rank."""
        frame = self.read_statistics(
            trial_id, nodes=node, roles=role, recording_types=recording_type,
            aggregations=aggregation, statistics=statistic, steps=steps,
            iterations=iteration, ranks=ranks if ranks is not None else "all")
        frame = frame[frame["sample_index"] == int(sample_index)]
        return rank_merge.side_by_side(frame, statistic)

    def _scan(self, trial: TrialIndex, files: list[TensorFile], columns: list[str],
              expr: pc.Expression | None) -> pa.Table:
        """The matching rows of ``files`` in file order: one dataset scan when every file
        reads and serves all its steps, else file by file (damage reported, compactions
        followed)."""
        empty = pa.schema([TENSORS_SCHEMA.field(c) for c in columns]).empty_table()
        if not files:
            return empty
        if all(served_filter(f) is None for f in files):
            try:
                return read_columns(files, columns, expr)
            except Exception:  # noqa: BLE001, S110 - file by file below tells which one
                pass
        tables = []
        done: set[str] = set()
        for f in files:
            def read(f: TensorFile) -> pa.Table:
                served = served_filter(f)
                both = served if expr is None else (expr if served is None else expr & served)
                return read_columns([f], columns, both)

            found = self._read_file(trial, f, read, done)
            if found is not None:
                tables.append(found[1])
        if not tables:
            return empty
        return pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]


def _nbytes(value: Any) -> int:
    return int(value.nbytes)


def _same_record(a: TensorRecord, b: TensorRecord) -> bool:
    """Whether two ranks recorded the same statistics and values (NaN equal to NaN)."""
    stats_a = np.array([a.stats[k] for k in a.stats], np.float64)
    stats_b = np.array([b.stats.get(k, np.nan) for k in a.stats], np.float64)
    if not np.array_equal(stats_a, stats_b, equal_nan=True):
        return False
    if a.values is None or b.values is None:
        return a.values is None and b.values is None
    return a.values.shape == b.values.shape and np.array_equal(a.values, b.values,
                                                                equal_nan=True)


def _non_decreasing(column: pa.ChunkedArray) -> bool:
    values = column.to_numpy()
    return bool(np.all(values[1:] >= values[:-1]))


def _values_array(scalar: pa.ListScalar) -> np.ndarray | None:
    """A row's per-neuron values as a float32 array of its own (None: none stored);
    never through Python floats (a list of 20 million took 1.6 GB)."""
    values = scalar.values
    if values is None:
        return None
    return np.array(values.to_numpy(zero_copy_only=False), dtype=np.float32, copy=True)
