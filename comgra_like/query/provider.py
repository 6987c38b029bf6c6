"""The provider: the query API's one interface to a group folder (docs/QUERY_API.md).

``list_*`` methods return metadata, ``read_*`` methods values; filters are arguments.
Reads serve what the last :meth:`Group.refresh` indexed and never look for new files
themselves: a caller that wants new data calls ``refresh()`` (the GUI does on its timer),
and between two refreshes every read answers from the same snapshot. One exception keeps
that snapshot readable: a tensors file that a compaction replaced since the refresh is
followed to the file that holds its rows now (the same rows under a new name).
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format.files import files_for
from ..format.layout import shard_rank
from ..format.schema import RANK
from ..vocabulary import ALL_STATISTICS, BATCH_AGGREGATIONS, NO_BATCH, STATISTICS
from . import ranks as rank_merge
from .cache import ByteLRU, estimate_bytes
from .graphs import parse_graph
from .index import GroupIndex
from .metrics import MetricsIndex, list_metrics, read_metrics
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
from .trial_index import TensorFile, TrialIndex, graph_key, to_pandas
from .trials import trials_table
from .types import (
    Graph,
    ModuleInfo,
    Note,
    RefreshReport,
    SkippedFile,
    TensorRecord,
    TrialInfo,
)
from .watch import (
    WatchIndex,
    merge_histograms,
    module_graph_hash,
    module_graph_steps,
    read_histograms,
    read_module_graph_file,
)

DEFAULT_CACHE_BYTES = 256 * 2**20

# What the group caches; a key is (the group's namespace, one of these, trial id, step or
# file name), so that groups and the GUI can share one cache without mixing values up.
_STEP, _LIST, _SERIES, _COLUMN = "step", "list", "series_index", "column"
_VALUES = "values"
_FOOTER = "footer"
_NAMESPACES = itertools.count()

T = TypeVar("T")


class Group:
    """A group folder of recordings, read incrementally. Create it with :func:`open_group`.

    ``cache`` lets several readers (the GUI's own derived values, say) share one byte
    bound; by default the group has a cache of ``cache_bytes`` of its own.
    """

    def __init__(self, path: str | os.PathLike, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 *, cache: ByteLRU | None = None):
        self.path = Path(path)
        self._index = GroupIndex(self.path)
        self._cache = cache if cache is not None else ByteLRU(cache_bytes)
        self._namespace = f"comgra_like.query#{next(_NAMESPACES)}"
        self._watch = WatchIndex(self.path)  # what comgra_like.watch() recorded
        # grows when the watch() or metrics tables changed at a refresh: the group's
        # data version is the index's plus this one
        self._tables_version = 0
        self._metrics = MetricsIndex(self.path)  # the per-module metrics (issue 16)

    def __repr__(self) -> str:
        shown = self._index.files.display(self.path)  # s3://... as the user wrote it
        return f"Group({shown!r}, {len(self._index.trials())} trials, version {self.version})"

    # ----- state -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Grows whenever a refresh found something new, and when a read found a damaged
        file (a cheap "data version" to poll)."""
        return self._index.version + self._tables_version

    @property
    def skipped(self) -> list[SkippedFile]:
        """The files skipped because they are damaged (or their rows repeat rows read
        before), each once; a file repaired since leaves this list."""
        return self._index.skipped

    @property
    def indexing(self) -> tuple[int, int] | None:
        """(new trials indexed, new trial folders found) while a refresh indexes trials it
        had not seen (the first refresh of a large group takes seconds), None otherwise.
        :meth:`list_trials` lists the trials indexed so far meanwhile, each whole."""
        return self._index.progress

    @property
    def cache(self) -> ByteLRU:
        return self._cache

    @property
    def cache_bytes_used(self) -> int:
        return self._cache.bytes

    def refresh(self) -> RefreshReport:
        """Index what appeared since the last refresh (new names only); cheap when
        nothing did."""
        update = self._index.update()
        # the watch() and metrics tables from the same listing: each folder listed once
        if self._watch.update(update.listing):
            self._tables_version += 1
        if self._metrics.update(update.listing):
            self._tables_version += 1
        for trial_id in update.forgotten_trials:
            self._drop(lambda kind, t, x, trial_id=trial_id: t == trial_id)
        for trial_id, name in update.gone_files:
            self._drop(lambda kind, t, x, trial_id=trial_id, name=name: t == trial_id and (
                (kind in (_SERIES, _FOOTER) and x == name)
                or (kind == _COLUMN and x[0] == name)))
        for trial_id, lo, hi in update.repaired:  # steps read without the file read again
            self._drop(lambda kind, t, x, trial_id=trial_id, lo=lo, hi=hi:
                       kind in (_STEP, _LIST) and t == trial_id and lo <= x <= hi)
        return update.report

    def _key(self, kind: str, trial_id: str, what: Any) -> tuple:
        return (self._namespace, kind, trial_id, what)

    def _drop(self, predicate: Callable[[str, str, Any], bool]) -> None:
        """Forget this group's cached values whose (kind, trial id, step or file name)
        satisfy ``predicate``."""
        namespace = self._namespace
        self._cache.drop(lambda k: isinstance(k, tuple) and len(k) == 4
                         and k[0] == namespace and predicate(*k[1:]))

    # ----- metadata ----------------------------------------------------------------------

    def _trial(self, trial_id: str) -> TrialIndex:
        return self._index.trial(trial_id)

    def list_trials(self) -> list[TrialInfo]:
        return [t.info for t in self._index.trials()]

    def trial_info(self, trial_id: str) -> TrialInfo:
        """One trial's :class:`TrialInfo` (as :meth:`list_trials` lists it), without
        listing the others; NotFoundError for a trial not indexed."""
        return self._trial(trial_id).info

    def read_config(self, trial_id: str) -> dict:
        """The trial's hyperparameters as recorded (``config=`` of the recorder or
        ``watch``; flat, dotted keys); {} for a trial recorded without one."""
        return dict(self._trial(trial_id).info.config)

    def read_trials(self, findings: Any = None) -> pd.DataFrame:
        """One row per trial: status, ranks, recorded steps, config columns, the last
        value of each KPI, and with ``findings`` (counts per trial and severity, a dict
        or a callable, e.g. ``comgra_like.analysis.count_findings(group)``) the findings
        by severity. comgra_like/query/trials.py states the columns."""
        return trials_table(self, findings)

    def list_ranks(self, trial_id: str) -> list[int]:
        """The torch.distributed ranks that recorded anything of a trial (steps, tensors,
        histograms, module graphs, metrics, notes), sorted ([0] for a single-process
        recording; [] before anything is on disk)."""
        trial = self._trial(trial_id)
        found = {int(r) for r in trial.steps[RANK].unique()}
        found.update(shard_rank(name) for name in trial.tensor_files)
        found.update(self._watch.ranks(trial_id))
        found.update(self._metrics.ranks(trial_id))
        found.update(n.rank for n in trial.notes)
        return sorted(found)

    def _table_ranks(self, trial_id: str, rank: Any, ranks: Any) -> tuple[list[int], bool]:
        """(the ranks a read of a watch or metrics table reads, whether its rows get a
        ``rank`` column): ``ranks`` (``"all"`` or a list: with the column), else
        ``rank`` (one rank), else the lowest rank of the trial."""
        available = self.list_ranks(trial_id)
        if ranks is not None:
            if rank is not None:
                raise ConfigurationError(
                    f"rank={rank!r} and ranks={ranks!r}: pass one of them (rank= reads one "
                    "rank, ranks= several with a rank column)")
            return rank_merge.select_ranks(ranks, available), True
        if rank is None:
            return available[:1] or [0], False
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise ConfigurationError(f"rank={rank!r}: pass one rank (an int) or None for the "
                                     "lowest; several ranks: ranks='all' or a list")
        return rank_merge.select_ranks(int(rank), available), False

    def _rank(self, trial: TrialIndex, rank: int | None) -> int:
        """The rank a single-rank read reads: ``rank``, or by default the lowest."""
        if rank is None:
            ranks = self.list_ranks(trial.trial_id)
            return ranks[0] if ranks else 0
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise ConfigurationError(f"rank={rank!r}: pass one rank (an int) or None for the "
                                     "lowest; several ranks: read_statistics(ranks=...)")
        return int(rank)

    def _rank_files(self, trial: TrialIndex, rank: int) -> list[TensorFile]:
        return [f for f in trial.tensor_files.values() if shard_rank(f.name) == rank]

    def list_steps(self, trial_id: str, rank: int | None = None) -> pd.DataFrame:
        """The recorded steps (one row per step and iteration) of one rank: ``rank``, or
        the lowest rank (every recording rank records the same steps)."""
        trial = self._trial(trial_id)
        return _rank_rows(trial, "steps", self._rank(trial, rank))

    def step_summary(self, trial_id: str, rank: int | None = None
                     ) -> tuple[int, int | None, int | None]:
        """(how many training steps one rank recorded, the first, the last; None, None
        without steps) without building frames (the trials table of hundreds of trials)."""
        trial = self._trial(trial_id)
        steps = trial.steps
        chosen = steps["training_step"].to_numpy()
        ranks = steps[RANK].to_numpy()
        rank = self._rank(trial, rank)
        if len(ranks) and not (ranks == rank).all():
            chosen = chosen[ranks == rank]
        if not len(chosen):
            return 0, None, None
        unique = np.unique(chosen)
        return len(unique), int(unique[0]), int(unique[-1])

    def last_kpis(self, trial_id: str, rank: int | None = None
                  ) -> dict[tuple[str, str], float]:
        """(KPI group, KPI name) -> the value at its largest timepoint (over every type
        of execution) of one rank, without building frames."""
        trial = self._trial(trial_id)
        kpis = trial.kpis  # sorted by timepoint (stable): the last row of a KPI is its last
        if not len(kpis):
            return {}
        ranks = kpis[RANK].to_numpy()
        mask = ranks == self._rank(trial, rank)
        columns = [kpis[c].to_numpy() for c in ("kpi_group", "kpi_name", "value")]
        if not mask.all():
            columns = [c[mask] for c in columns]
        groups, names, values = columns
        return {(str(g), str(n)): float(v) for g, n, v in zip(groups, names, values)}

    def read_modules(self, trial_id: str) -> list[ModuleInfo]:
        """The module tree; StorageError (the file is in :attr:`skipped`) for a damaged
        modules.json."""
        trial = self._trial(trial_id)
        if trial.modules_problem is not None:
            raise StorageError(f"{trial.layout.modules_json}: {trial.modules_problem}; the "
                               "module tree cannot be shown until the recorder writes it again")
        return list(trial.modules or [])

    def read_notes(self, trial_id: str, rank: Any = None, ranks: Any = None) -> list[Note]:
        """The notes of a trial, oldest first per rank; each says its ``rank``. Unlike
        the tables of values, every rank's notes by default (a note is an event someone
        wrote down, not a per-rank quantity: none is hidden); ``rank=`` or ``ranks=``
        keeps those of one rank or a list."""
        notes = list(self._trial(trial_id).notes)
        if rank is None and ranks is None:
            return notes
        chosen, _ = self._table_ranks(trial_id, rank, ranks)
        return [n for n in notes if n.rank in chosen]

    def read_kpis(self, trial_id: str, rank: int | None = None,
                  ranks: Any = None) -> pd.DataFrame:
        """The KPI points one rank recorded (``rank``, or the lowest); those of ``ranks``
        (``"all"`` or a list) with a ``rank`` column saying whose. ``rank="all"`` (the
        spelling before ``ranks=``) still reads every rank, with a DeprecationWarning."""
        trial = self._trial(trial_id)
        if isinstance(rank, str):
            warnings.warn('read_kpis(rank="all") is deprecated: pass ranks="all" (rank= '
                          "reads one rank, ranks= several with a rank column, as in every "
                          "read)", DeprecationWarning, stacklevel=2)
            rank, ranks = None, rank if ranks is None else ranks
        if ranks is None:
            return _rank_rows(trial, "kpis", self._rank(trial, rank))
        chosen, _ = self._table_ranks(trial_id, rank, ranks)
        kpis = trial.kpis
        if set(chosen) >= set(kpis[RANK].unique().tolist()):
            return kpis.copy()
        return kpis[kpis[RANK].isin(chosen)].reset_index(drop=True)

    def read_graph(self, trial_id: str, training_step: int, iteration: int) -> Graph:
        trial = self._trial(trial_id)
        steps = trial.steps
        row = steps[(steps["training_step"] == training_step) & (steps["iteration"] == iteration)]
        if row.empty:
            raise NotFoundError(
                f"trial {trial_id!r} has no recorded step {training_step} with iteration {iteration}"
            )
        digest = row["graph_hash"].iloc[0]
        structure = trial.graphs.get(digest)
        if structure is None:
            damage = trial.damaged.get(graph_key(digest))
            if damage is not None:
                raise StorageError(
                    f"the graph of step {training_step}, iteration {iteration} of trial "
                    f"{trial_id!r} is damaged and was skipped: {trial.layout.graph(digest)}: "
                    f"{damage[1]}")
            raise NotFoundError(f"graph {digest} of trial {trial_id!r} was not on disk at the "
                                "last refresh()")
        return parse_graph(digest, int(iteration), structure)

    # ----- watch(): histograms, module graphs, the watch report ---------------------------

    def read_histograms(self, trial_id: str, *, nodes: Any = None, roles: Any = None,
                        what: Any = None, steps: Any = None, recording_types: Any = None,
                        types_of_execution: Any = None, rank: int | None = None,
                        ranks: Any = None) -> pd.DataFrame:
        """The histograms ``comgra_like.watch`` recorded, one row per (training_step,
        iteration, node, role, recording_type, what), sorted by step.

        Columns: training_step, type_of_execution, iteration, node (the module
        invocation, e.g. ``model.layer1.0.conv1`` or ``model.block#1``), role
        (``input 0``, ``input mask``, ``output 0``, ``output logits``; for params and
        params_grad the parameter's name, ``weight``), recording_type (forward,
        gradient:<loss group>), what (io, io_grad, params, params_grad), time (the
        ``time_log`` value), lo, hi (the bins are ``len(counts)`` equal bins from lo to
        hi), counts (numpy int64 array), n (values counted), vmin, vmax (the extremes of
        all values before sampling). Each filter is a value or a list of values.
        An empty frame for a trial without histograms.

        A parameter held by several modules (tied weights) is recorded once, under its
        first holder; its params/params_grad rows are shown under every holder, with
        ``shared_with`` (the other holders) and ``recorded_as`` (the node it is stored
        under) saying so (docs/PAGES.md).

        A distributed recording: one rank's rows (``rank``, by default the lowest), or
        with ``ranks`` (``"all"`` or a list) those ranks' rows side by side, with a
        ``rank`` column; :meth:`read_merged_histograms` adds them up.
        """
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return read_histograms(self._watch, trial_id, ranks=chosen, with_rank=with_rank,
                               nodes=nodes, roles=roles, what=what, steps=steps,
                               recording_types=recording_types,
                               types_of_execution=types_of_execution)

    def read_merged_histograms(self, trial_id: str, *, nodes: Any = None, roles: Any = None,
                               what: Any = None, steps: Any = None,
                               recording_types: Any = None, types_of_execution: Any = None,
                               ranks: Any = "all", rebin: bool = False) -> pd.DataFrame:
        """The histograms of several ranks (all by default) merged, one row per histogram
        (:func:`comgra_like.query.watch.merge_histograms`): counts add where the ranks'
        bin edges agree (``merge`` = ``exact``); where they differ a ConfigurationError,
        unless ``rebin=True`` spreads each rank's counts over common edges (``merge`` =
        ``rebinned``, approximate). Columns: those of :meth:`read_histograms`, ``ranks``
        and ``merge``."""
        frame = self.read_histograms(trial_id, nodes=nodes, roles=roles, what=what,
                                     steps=steps, recording_types=recording_types,
                                     types_of_execution=types_of_execution, ranks=ranks)
        return merge_histograms(frame, rebin=rebin)

    def list_module_graph_steps(self, trial_id: str, rank: int | None = None,
                                ranks: Any = None) -> pd.DataFrame:
        """training_step, type_of_execution, iteration, graph_hash of every step that has
        a module graph (``comgra_like.watch``): one rank's (``rank``, by default the
        lowest), or those of ``ranks`` with a ``rank`` column."""
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return module_graph_steps(self._watch, trial_id, chosen, with_rank)

    def read_module_graph(self, trial_id: str, training_step: int,
                          iteration: int | None = None,
                          rank: int | None = None) -> dict | None:
        """The module graph of a recorded step (docs/FORMAT.md, "watch()"): a dict with
        ``invocations`` and ``edges``; the first iteration's (root-module forward) unless
        ``iteration`` is given; as ``rank`` recorded it (by default the lowest rank: the
        ranks of data-parallel training share one graph file, written once by content
        hash). None when the step has none."""
        self._trial(trial_id)
        (chosen,), _ = self._table_ranks(trial_id, rank, None)
        digest = module_graph_hash(self._watch, trial_id, training_step, iteration, chosen)
        if digest is None:
            return None
        key = self._key("module_graph", trial_id, digest)
        structure = self._cache.get(key)
        if structure is None:
            structure = read_module_graph_file(self.path, trial_id, digest)
            self._cache.put(key, structure, 4096)
        return structure

    def read_watch_report(self, trial_id: str) -> dict | None:
        """Which modules ``comgra_like.watch`` hooked, which it skipped and why (a dict
        with ``hooked``, ``skipped``: [{module, reason}], ...); None without a watch."""
        self._trial(trial_id)
        return self._watch.report(trial_id)

    # ----- per-module metrics (watch(metrics=...), Monitor) --------------------------------

    def read_metrics(self, trial_id: str, module: Any = None, metric: Any = None,
                     steps: Any = None, *, rank: int | None = None,
                     ranks: Any = None) -> pd.DataFrame:
        """The per-module metrics of a trial, one row per (training_step, module, metric,
        backward_pass), sorted by (metric, module, training_step, backward_pass).

        Columns: training_step, type_of_execution, module (its qualified name, e.g.
        ``model.fc1``), module_class (``Linear``), metric (``InputCovMaxEig``, a user
        metric's name, ``loss``), backward_pass (0 unless the metric has a value per
        backward pass of the step), value, vector (a numpy float64 array for spectra,
        else None), time (wall time). ``module``, ``metric`` and ``steps`` filter (a
        value or a list). An empty frame for a trial without metrics.

        A distributed recording: one rank's rows (``rank``, by default the lowest), or
        with ``ranks`` (``"all"`` or a list) those ranks' rows with a ``rank`` column.
        Metrics are not merged over ranks: each is a quantity of one rank's batch and
        model state (a spectrum or a dead-unit rate of the combined batch cannot be made
        from the ranks' values); compare the ranks side by side.
        """
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return read_metrics(self._metrics, trial_id, ranks=chosen, with_rank=with_rank,
                            module=module, metric=metric, steps=steps)

    def list_metrics(self, trial_id: str, rank: int | None = None,
                     ranks: Any = None) -> pd.DataFrame:
        """(module, module_class, metric, n_points) of every metric a trial has: one
        rank's (``rank``, by default the lowest), or those of ``ranks`` with a ``rank``
        column (one row per rank)."""
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return list_metrics(self._metrics, trial_id, ranks=chosen, with_rank=with_rank)

    # ----- values ------------------------------------------------------------------------

    def _read_file(self, trial: TrialIndex, f: TensorFile, read: Callable[[TensorFile], T],
                   done: set[str]) -> tuple[TensorFile, T] | None:
        """(the file read, ``read(file)``): ``f``, or the file a compaction replaced it
        with since the last refresh; None for a damaged file (reported) or a file read
        already (in ``done``)."""
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
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                self._index.read_failed(trial, f, e)
                self._drop(lambda kind, t, x, key=(_SERIES, trial.trial_id, f.name):
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
        key = self._key(_STEP, trial_id, (int(step), rank,
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
        key = self._key(_LIST, trial_id, (int(training_step), rank))
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
        key = self._key(_VALUES, trial_id, (int(step), rank, tuple(row_key.items())))

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
        return self._cache.get_or_compute(self._key(_SERIES, trial_id, f.name),
                                          lambda: SeriesIndex.build(f.path), _nbytes)

    def _footer(self, trial_id: str, f: TensorFile) -> Footer:
        return self._cache.get_or_compute(self._key(_FOOTER, trial_id, f.name),
                                          lambda: Footer(f.path), _nbytes)

    def _statistic_column(self, trial_id: str, f: TensorFile, statistic: str) -> np.ndarray:
        """One statistic of every row of a tensors file (cached: the next tensor's series
        of the same statistic is a ``take``)."""
        return self._cache.get_or_compute(
            self._key(_COLUMN, trial_id, (f.name, statistic)),
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

    # ----- gradient flows and probes (issue 18, comgra_like/query/flows.py) --------------
    # The flows/ and probes/ folders are listed at each call (immutable records, committed
    # by their JSON), so a probe's result shows on the GUI's next read without a refresh.

    def read_flows(self, trial_id: str, *, training_step: int | None = None,
                   probe_id: str | None = "*", source: str | None = None,
                   target: str | None = None) -> list:
        """The stored flows of a trial (``FlowInfo``, oldest first); ``probe_id``: "*" for
        all, None for the run's own flows, or one probe's id."""
        from .flows import list_flows
        return list_flows(self.path, trial_id, training_step=training_step, probe_id=probe_id,
                          source=source, target=target)

    def read_flow(self, trial_id: str, record_id: str) -> Any:
        """One flow with its arrays (``FlowData``; memory-mapped)."""
        from .flows import read_flow
        return read_flow(self.path, trial_id, record_id)

    def read_probes(self, trial_id: str) -> list:
        """The probes of a trial (``ProbeInfo``: pending, done or failed), oldest first."""
        from .flows import list_probes
        return list_probes(self.path, trial_id)

    def read_probe_input(self, trial_id: str, probe_id: str) -> np.ndarray:
        """The edited input a probe was submitted with."""
        from .flows import read_probe_input
        return read_probe_input(self.path, trial_id, probe_id)

    # ----- the flight recorder (issue 30, comgra_like/query/flight.py) --------------------
    # The flight/ folder is listed at each call, like flows/ (windows are immutable).

    def list_flight_triggers(self, trial_id: str) -> list:
        """The flight recorder's triggers of a trial (``FlightTrigger``), oldest first."""
        from .flight import list_flight_triggers
        return list_flight_triggers(self.path, trial_id)

    def read_flight(self, trial_id: str, name: str | None = None) -> pd.DataFrame:
        """The statistics rows of a trial's flight windows (or of one), ``flight=True``."""
        from .flight import read_flight
        return read_flight(self.path, trial_id, name)

    def read_flight_values(self, trial_id: str, name: str) -> dict:
        """The full values a flight window kept: {(step, tensor, role): array}."""
        from .flight import read_flight_values
        return read_flight_values(self.path, trial_id, name)


def _rank_rows(trial: TrialIndex, table: str, rank: int) -> pd.DataFrame:
    """The rows of one rank of the trial's ``steps`` or ``kpis`` frame without the rank
    column, made once per frame the index holds (a shallow copy each call: pandas copies
    on write, so a caller's change never reaches the index)."""
    frame = getattr(trial, table)
    made = trial.rank_frames.get((table, rank))
    if made is None or made[0] is not frame:
        ranks = frame[RANK].to_numpy()
        chosen = frame if (ranks == rank).all() else frame[ranks == rank]
        made = (frame, chosen.drop(columns=[RANK]).reset_index(drop=True))
        trial.rank_frames[(table, rank)] = made
    return made[1].copy(deep=False)


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


def open_group(path: str | os.PathLike, cache_bytes: int = DEFAULT_CACHE_BYTES, *,
               cache: ByteLRU | None = None, refresh: bool = True) -> Group:
    """Open a group folder (``<comgra_root_path>/<group>``) and index what is there
    (``refresh=False``: nothing yet; the first :meth:`Group.refresh` does, e.g. in
    another thread, while :meth:`Group.list_trials` lists the trials indexed so far)."""
    path = Path(path)
    files = files_for(path)
    if files.remote:  # s3://bucket/prefix/group: a prefix exists once objects are under it
        if not files.is_dir(path):
            raise NotFoundError(
                f"nothing is stored under {files.display(path)}; pass "
                "s3://<bucket>/<prefix>/<group> with the comgra_root_path the recorder wrote to "
                "(and the same AWS_* environment variables)")
    elif not path.exists():
        raise NotFoundError(
            f"{path} does not exist; pass the folder <comgra_root_path>/<group> that the "
            "recorder writes to"
        )
    elif not path.is_dir():
        raise NotFoundError(f"{path} is not a folder; pass a group folder")
    group = Group(path, cache_bytes=cache_bytes, cache=cache)
    if refresh:
        group.refresh()
    return group


def _values_array(scalar: pa.ListScalar) -> np.ndarray | None:
    """A row's per-neuron values as a float32 array of its own (None: none stored);
    never through Python floats (a list of 20 million took 1.6 GB)."""
    values = scalar.values
    if values is None:
        return None
    return np.array(values.to_numpy(zero_copy_only=False), dtype=np.float32, copy=True)
