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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format.files import files_for
from ..format.layout import shard_rank
from ..format.schema import RANK
from . import ranks as rank_merge
from .cache import ByteLRU
from .graphs import parse_graph
from .index import GroupIndex
from .metrics import MetricsIndex
from .table_reads import TableReads
from .tensor_reads import (
    CACHE_COLUMN,
    CACHE_FOOTER,
    CACHE_LIST,
    CACHE_SERIES,
    CACHE_STEP,
    TensorReads,
)
from .trial_index import TensorFile, TrialIndex, graph_key
from .trials import trials_table
from .types import (
    Graph,
    ModuleInfo,
    Note,
    RefreshReport,
    SkippedFile,
    TrialInfo,
)
from .watch import WatchIndex

DEFAULT_CACHE_BYTES = 256 * 2**20

# A cache key is (the group's namespace, a kind of tensor_reads.py, trial id, step or
# file name), so that groups and the GUI can share one cache without mixing values up.
_NAMESPACES = itertools.count()


class Group(TensorReads, TableReads):
    """A group folder of recordings, read incrementally. Create it with :func:`open_group`.

    The metadata reads and the refresh are here; the reads of tensor values and
    statistics are :class:`~comgra_like.query.tensor_reads.TensorReads`', those of the
    watch(), metrics, flows and flight tables
    :class:`~comgra_like.query.table_reads.TableReads`'.

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
        # the watch() and metrics tables from the same listing: each folder listed once;
        # a folder it could not list now is reported with the index's and keeps its shards
        skipped = update.report.skipped

        def listed_now(folder: Path) -> bool:
            return self._index.listed_now(folder, skipped)

        if self._watch.update(update.listing, listed_now):
            self._tables_version += 1
        if self._metrics.update(update.listing, listed_now):
            self._tables_version += 1
        for trial_id in update.forgotten_trials:
            self._drop(lambda kind, t, x, trial_id=trial_id: t == trial_id)
        for trial_id, name in update.gone_files:
            self._drop(lambda kind, t, x, trial_id=trial_id, name=name: t == trial_id and (
                (kind in (CACHE_SERIES, CACHE_FOOTER) and x == name)
                or (kind == CACHE_COLUMN and x[0] == name)))
        for trial_id, lo, hi in update.repaired:  # steps read without the file read again
            self._drop(lambda kind, t, x, trial_id=trial_id, lo=lo, hi=hi:
                       kind in (CACHE_STEP, CACHE_LIST) and t == trial_id and lo <= x <= hi)
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


def open_group(path: str | os.PathLike, cache_bytes: int = DEFAULT_CACHE_BYTES, *,
               cache: ByteLRU | None = None, refresh: bool = True) -> Group:
    """Open a group folder (``<comgra_root_path>/<group>``) and index what is there
    (``refresh=False``: nothing yet; the first :meth:`Group.refresh` does, e.g. in
    another thread, while :meth:`Group.list_trials` lists the trials indexed so far).

    A StorageError (``StoreUnreachable``) when the store does not answer now for a part
    of the group: a fresh open lists the whole group or says so, never a group with
    trials or steps silently left out (an open Group's refresh() reports such a part in
    :attr:`Group.skipped` and reads it at the next refresh)."""
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
        group._index.raise_if_unreachable()
    return group
