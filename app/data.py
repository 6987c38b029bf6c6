"""The data layer of one GUI: the group, refreshes, and a bounded cache of derived data.

One :class:`AppData` per ``create_app`` call, shared by every browser session of that
app (the selection lives in the browser; only data lives here). Everything goes through
the query API (``comgra_like.query``); nothing here opens a file, builds a figure or
knows a page. What it derives is what the selection needs: the recorded steps, graphs
and the index of what each step recorded (:class:`GroupOptions`).

One cache, one bound: the query API's :class:`~comgra_like.query.ByteLRU` of
``cache_bytes`` holds both the raw tables the group reads and what the GUI derives from
them (option indexes, series, and the views' models through :meth:`AppData.cached`),
each under keys of its own namespace. Derived entries are keyed by the trial's data
version, so a refresh that finds new data for a trial makes them stale by construction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from comgra_like.errors import ComgraError, ConfigurationError, NotFoundError
from comgra_like.query.cache import ByteLRU, estimate_bytes
from comgra_like.vocabulary import ANY_TYPE, BATCH_AGGREGATIONS, NO_BATCH

from . import selection as sel
from .controls.rank_selector import MERGED
from .findings_scan import Findings
from .statistic_table import StatisticTable
from .steps import StepList

DEFAULT_CACHE_BYTES = 256 * 2**20
_NAMESPACE = "comgra_like.app"  # the first part of every key the GUI puts in the cache
#: At most this many unforeseen read failures are kept for the banner (the log has all).
MAX_READ_PROBLEMS = 50
#: The last this many refreshes are kept (:meth:`AppData.refreshes`).
KEEP_REFRESHES = 50
log = logging.getLogger("comgra_like.app")


_INDEX_COLUMNS = ("iteration", "node", "role", "recording_type", "aggregation", "sample_index")


def _tensor_index_bytes(index: Mapping[tuple, Mapping[str, tuple[str, ...]]]) -> int:
    """A rough size of a tensor index, from its shape (walking it with estimate_bytes cost
    ~15% of building it); the aggregation tuples are shared between entries."""
    return 256 + sum(400 + 250 * len(by_type) for by_type in index.values())


@dataclass(frozen=True)
class DataStatus:
    """What the live-status badge and the banners show."""

    version: int
    trial_statuses: tuple[tuple[str, str], ...]
    last_data_time: float | None
    skipped: tuple[tuple[str, str], ...]
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "trials": dict(self.trial_statuses),
            "last_data": self.last_data_time,
            "skipped": [list(s) for s in self.skipped],
            "problem": self.problem,
        }


@dataclass(frozen=True)
class RefreshRecord:
    """One look for new data: when it ended, what it cost and the data version it left."""

    wall_time: float  # time.time() at its end
    seconds: float  # the whole refresh
    group_seconds: float  # of which in the query API (opening the group, Group.refresh)
    version: int  # the group's data version after it (0: no group yet)


class AppData:
    """The data side of one GUI: the group (opened lazily), refreshes, derived caches."""

    def __init__(
        self,
        path: str | Path,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        refresh_seconds: float = 2.0,
        open_group: Callable[..., Any] | None = None,
        index_wait: float | None = None,
    ):
        self.path = Path(path).expanduser()
        self.refresh_seconds = float(refresh_seconds)
        self.cache = ByteLRU(int(cache_bytes))
        if open_group is None:
            from comgra_like.query import open_group
        self._open_group = open_group
        self._group: Any = None
        self._problem: str | None = None
        self._lock = threading.RLock()
        self._last_refresh = 0.0
        self._last_data_time: float | None = None
        self._trial_versions: dict[str, int] = {}
        # reads that failed in a way the query API did not foresee: where -> why
        self._read_problems: dict[str, str] = {}
        self._refreshes: deque[RefreshRecord] = deque(maxlen=KEEP_REFRESHES)
        self._findings = Findings(self, _NAMESPACE)
        self._indexer: threading.Thread | None = None
        if index_wait is None:
            self.refresh(force=True)
        else:
            self._index_in_background(index_wait)

    # --- refresh ----------------------------------------------------------------------

    @property
    def group(self) -> Any:
        """The query API's Group, or None while the path does not exist yet."""
        return self._group

    def _index_in_background(self, wait: float) -> None:
        """Open the group and index it in a thread of its own (the first index of
        thousands of trials takes tens of seconds); wait at most ``wait`` seconds for it.
        Meanwhile the pages show the trials indexed so far and the status says how far
        the index is."""
        started = time.perf_counter()
        try:
            self._group = self._open_group(self.path, cache=self.cache, refresh=False)
        except ComgraError as exc:
            self._problem = str(exc)
            return  # the next refresh tries again
        except OSError as exc:
            self._problem = f"{self.path} cannot be read: {exc}"
            return

        def index() -> None:
            # not under self._lock: status() and the pages go on meanwhile
            try:
                report = self._group.refresh()
            except (ComgraError, OSError) as exc:
                self._problem = f"Reading {self.path} failed: {exc}"
                return  # the next refresh tries again
            except Exception as exc:
                log.exception("indexing %s failed", self.path)
                self._problem = f"Indexing {self.path} failed ({type(exc).__name__}: {exc})"
                return
            with self._lock:
                self._note_report(report)
                seconds = time.perf_counter() - started
                self._refreshes.append(
                    RefreshRecord(time.time(), seconds, seconds, int(self._group.version)))

        self._indexer = threading.Thread(target=index, name="comgra-index", daemon=True)
        self._indexer.start()
        self._indexer.join(max(0.0, wait))

    @property
    def indexing(self) -> tuple[int, int] | None:
        """(trial folders indexed, listed) while the first index runs in the background
        (``index_wait``), else None."""
        indexer = self._indexer
        if indexer is None or not indexer.is_alive():
            return None
        progress = self._group.indexing if self._group is not None else None
        return progress or (0, 0)

    def refresh(self, force: bool = False) -> DataStatus:
        """Look for new data (at most twice per refresh interval, whoever asks) and report."""
        if self.indexing is not None and not force:
            return self.status()  # the first index is still running: report how far
        with self._lock:
            now = time.monotonic()
            if force or now - self._last_refresh >= self.refresh_seconds / 2:
                self._last_refresh = now
                started = time.perf_counter()
                group_seconds = self._refresh_now()
                version = int(self._group.version) if self._group is not None else 0
                self._refreshes.append(
                    RefreshRecord(
                        time.time(), time.perf_counter() - started, group_seconds, version
                    )
                )
            return self.status()

    def refreshes(self) -> list[RefreshRecord]:
        """The last refreshes that looked for new data, oldest first (for benchmarks and the
        debug log; a refresh asked for too soon after the last one is not among them)."""
        with self._lock:
            return list(self._refreshes)

    def _refresh_now(self) -> float:
        """Open or refresh the group; the seconds spent in the query API."""
        started = time.perf_counter()
        if self._group is None:
            try:
                self._group = self._open_group(self.path, cache=self.cache)
            except ComgraError as exc:
                self._problem = str(exc)
                return time.perf_counter() - started
            except OSError as exc:
                self._problem = f"{self.path} cannot be read: {exc}"
                return time.perf_counter() - started
            group_seconds = time.perf_counter() - started
            self._problem = None
            trials = [t.trial_id for t in self._group.list_trials()]
            for trial_id in trials:
                self._trial_versions[trial_id] = 1
            if trials:
                self._last_data_time = time.time()
            return group_seconds
        try:
            report = self._group.refresh()
        except (ComgraError, OSError) as exc:
            self._problem = f"Reading {self.path} failed: {exc}"
            return time.perf_counter() - started
        group_seconds = time.perf_counter() - started
        self._note_report(report)
        return group_seconds

    def _note_report(self, report: Any) -> None:
        """A refresh's report: the trials it found something in get a new data version."""
        self._problem = None
        touched = list(report.new_trials) + list(report.changed_trials)
        for trial_id in touched:
            self._trial_versions[trial_id] = self._trial_versions.get(trial_id, 0) + 1
        if touched:
            self._last_data_time = time.time()

    def status(self) -> DataStatus:
        group = self._group
        if group is None:
            return DataStatus(0, (), None, (), self._problem)
        skipped = tuple((self._shown_path(s.path), str(s.reason)) for s in group.skipped)
        with self._lock:
            skipped += tuple(self._read_problems.items())
        problem = self._problem
        trials = tuple((t.trial_id, str(t.status)) for t in group.list_trials())
        indexing = self.indexing
        if problem is None and indexing is not None:
            done, total = indexing
            problem = (f"Indexing {self.path}: {done} of {total} trial folders read; the "
                       f"{len(trials)} trials read so far are shown.")
        elif problem is None and not trials:
            problem = f"No trials in {self.path} yet; waiting for the recorder to write some."
        return DataStatus(int(group.version), trials, self._last_data_time, skipped, problem)

    def _shown_path(self, path: str) -> str:
        """A skipped file's path as the banner shows it: inside the group folder."""
        try:
            return Path(path).relative_to(self.path).as_posix()
        except ValueError:
            return str(path)

    def safely(self, where: str, read: Callable[[], Any], default: Any) -> Any:
        """``read()``, or ``default`` when the data is missing or damaged.

        The query API reports damaged files itself (``Group.skipped``); anything else that
        fails is a problem nobody foresaw: it is logged and shown in the banner under
        ``where``, and the page goes on without that piece.
        """
        try:
            return read()
        except ComgraError:
            return default
        except Exception as exc:  # one unreadable piece must not break the page
            log.exception("reading %s failed", where)
            text = " ".join(str(exc).split())
            with self._lock:
                if len(self._read_problems) < MAX_READ_PROBLEMS:
                    self._read_problems[where] = f"reading failed ({type(exc).__name__}: {text})"
            return default

    def cache_usage(self) -> dict[str, int]:
        """Bytes held and allowed by the one cache (the query API's tables and what the
        GUI derives from them)."""
        return {"bytes": self.cache.bytes, "limit": self.cache.max_bytes}

    def trial_version(self, trial_id: str | None) -> int:
        """Grows whenever a refresh found something new in the trial (0: unknown trial)."""
        return self._trial_versions.get(trial_id, 0) if trial_id else 0

    # --- cached reads -----------------------------------------------------------------

    def cached(
        self, key: tuple, compute: Callable[[], Any], size: Callable[[Any], int] = estimate_bytes
    ) -> Any:
        """``compute()``, kept in the derived cache under ``key`` (None is never kept).

        The views keep their models here too; a key that depends on data that can grow
        must contain :meth:`trial_version`.
        """
        # The group's keys share the cache; computed once however many callbacks ask
        # at the same time. None ("not there yet") is never kept: asked again next time.
        return self.cache.get_or_compute((_NAMESPACE, key), compute, size)

    def trial_ids(self) -> list[str]:
        if self._group is None:
            return []
        return [t.trial_id for t in self._group.list_trials()]

    def trial_info(self, trial_id: str) -> Any | None:
        if self._group is None:
            return None
        try:
            return self._group.trial_info(trial_id)
        except NotFoundError:
            return None

    def steps(self, trial_id: str) -> StepList:
        """The recorded steps of a trial, by training step (sorted; a compact mapping the
        cache counts at its size, :mod:`app.steps`)."""
        if self._group is None or trial_id not in self.trial_ids():
            return StepList.empty()
        key = ("steps", trial_id, self.trial_version(trial_id))
        return self.cached(
            key,
            lambda: self.safely(f"steps of {trial_id}", lambda: self._build_steps(trial_id),
                                 StepList.empty()),
            lambda steps: steps.nbytes,
        )

    def types_of_execution(self, trial_id: str) -> tuple[str, ...]:
        """The types of execution of a trial's recorded steps, sorted."""
        key = ("types_of_execution", trial_id, self.trial_version(trial_id))
        steps = self.steps(trial_id)
        return self.cached(key, steps.types_of_execution)

    def step_options(self, trial_id: str, type_of_execution: str) -> tuple[int, ...]:
        """The recorded steps of one type of execution (all of them for ``ANY_TYPE``).

        Cached: the selection asks for them many times per call (thousands of steps)."""
        key = ("step_options", trial_id, self.trial_version(trial_id), type_of_execution)
        steps = self.steps(trial_id)
        return self.cached(key, lambda: steps.steps_of(type_of_execution))

    def _build_steps(self, trial_id: str) -> StepList:
        frame = self._group.list_steps(trial_id).sort_values(
            ["training_step", "iteration"], kind="stable"
        )
        return StepList.from_frame(frame)

    def graph(self, trial_id: str, training_step: int, iteration: int) -> Any | None:
        """The dependency graph of a step and iteration (None if not on disk yet)."""
        info = self.steps(trial_id).get(training_step)
        if info is None or iteration not in info.graph_hashes:
            return None
        digest = info.graph_hashes[iteration]

        def read() -> Any:
            return self.safely(
                f"graph of {trial_id} step {training_step} iteration {iteration}",
                lambda: self._group.read_graph(trial_id, training_step, iteration),
                None,
            )

        # A graph's content (and its node iterations) is fixed by its hash and iteration.
        graph = self.cached(("graph", trial_id, digest, iteration), read)
        return graph

    def graph_node(
        self, trial_id: str, training_step: int, iteration: int, name: str
    ) -> Any | None:
        graph = self.graph(trial_id, training_step, iteration)
        if graph is None:
            return None
        return next((n for n in graph.nodes if n.name == name), None)

    def tensor_index(
        self, trial_id: str, training_step: int
    ) -> dict[tuple, dict[str, tuple[str, ...]]]:
        """What a step recorded: (iteration, node, role) -> recording type -> aggregation keys."""
        key = ("tensor_index", trial_id, training_step, self.trial_version(trial_id))

        def build() -> dict:
            frame = self.safely(
                f"tensors of {trial_id} step {training_step}",
                lambda: self._group.list_tensors(trial_id, training_step),
                None,
            )
            if frame is None:  # not written yet, or in a damaged file (reported)
                return {}
            # Whole columns as lists, not row tuples: iterating Arrow-backed columns row by
            # row cost ~5x more (a step of 20 iterations has ~5,000 rows).
            columns = [frame[c].tolist() for c in _INDEX_COLUMNS]
            agg_keys: dict[tuple, str] = {}
            index: dict[tuple, dict[str, set[str]]] = {}
            for it, node, role, rt, agg, sample in zip(*columns):
                agg_key = agg_keys.get((agg, sample))
                if agg_key is None:
                    agg_key = agg_keys[(agg, sample)] = sel.aggregation_key(str(agg), int(sample))
                by_type = index.setdefault((int(it), str(node), str(role)), {})
                by_type.setdefault(str(rt), set()).add(agg_key)
            ordered: dict[frozenset, tuple[str, ...]] = {}  # most entries share a few sets

            def sort(aggs: set[str]) -> tuple[str, ...]:
                frozen = frozenset(aggs)
                if frozen not in ordered:
                    ordered[frozen] = tuple(sorted(frozen, key=sel.aggregation_sort_key))
                return ordered[frozen]

            return {k: {rt: sort(aggs) for rt, aggs in v.items()} for k, v in index.items()}

        return self.cached(key, build, _tensor_index_bytes)

    def is_indexed(self, trial_id: str, training_step: int) -> bool:
        """Whether :meth:`tensor_index` of the step is in the cache (at the current version)."""
        key = ("tensor_index", trial_id, training_step, self.trial_version(trial_id))
        return self.cache.get((_NAMESPACE, key)) is not None

    def data_location(self, node: Any, role: str) -> tuple[str, str, int]:
        """(node, role, iteration) where a graph node's tensor is stored (follows aliases)."""
        alias = (getattr(node, "alias_of", None) or {}).get(role)
        if alias:
            return str(alias[0]), str(alias[1]), int(alias[2])
        return str(getattr(node, "node", node.name)), role, int(node.iteration)

    def recorded(
        self, trial_id: str, training_step: int, node: Any, role: str
    ) -> dict[str, tuple[str, ...]]:
        """Recording type -> aggregation keys recorded for one role of a graph node."""
        stored_node, stored_role, iteration = self.data_location(node, role)
        return self.tensor_index(trial_id, training_step).get(
            (iteration, stored_node, stored_role), {}
        )

    def ranks(self, trial_id: str | None) -> list[int]:
        """The ranks that recorded a trial ([0] for a single process; [] when unknown)."""
        if not trial_id:
            return []
        return self.safely("ranks", lambda: self._group.list_ranks(trial_id), [])

    def read_tensor(self, current: Mapping[str, Any], rank: Any = None) -> Any:
        """The TensorRecord of a complete selection (raises NotFoundError); ``rank``: one
        rank's (None: the lowest) or ``MERGED`` (``controls.rank_selector``), all ranks
        merged (a selection of one sample cannot be merged: a ConfigurationError says so)."""
        node = self.graph_node(
            current["trial"], current["training_step"], current["iteration"], current["node"]
        )
        if node is None:
            raise NotFoundError(f"node {current['node']!r} is not in this graph")
        stored_node, stored_role, iteration = self.data_location(node, current["role"])
        aggregation, sample_index = sel.parse_aggregation(current["aggregation"])
        args = (current["trial"], current["training_step"], iteration, stored_node,
                stored_role, current["recording_type"], aggregation)
        if rank == MERGED:
            return self._group.read_merged_tensor(*args)
        return self._group.read_tensor(*args, sample_index, rank)

    def read_series(self, current: Mapping[str, Any], statistic: str,
                    rank: Any = None) -> pd.DataFrame:
        """The statistic of the selected tensor over all recorded steps (cached per
        version), of one rank (None: the lowest) or ``MERGED``."""
        node = self.graph_node(
            current["trial"], current["training_step"], current["iteration"], current["node"]
        )
        if node is None:
            raise NotFoundError(f"node {current['node']!r} is not in this graph")
        stored_node, stored_role, iteration = self.data_location(node, current["role"])
        aggregation, sample_index = sel.parse_aggregation(current["aggregation"])
        toe = current.get("type_of_execution")
        toe = None if toe in (None, ANY_TYPE) else toe
        # Iterations are relative for nodes of a recurrent graph: a node stored at the
        # current iteration is followed at that iteration; step-level data at -1.
        key = (
            "series",
            current["trial"],
            self.trial_version(current["trial"]),
            stored_node,
            stored_role,
            iteration,
            current["recording_type"],
            aggregation,
            sample_index,
            statistic,
            toe,
            rank,
        )
        if rank == MERGED:
            return self.cached(key, lambda: self._merged_series(
                current["trial"], stored_node, stored_role, iteration,
                current["recording_type"], aggregation, statistic, toe))
        return self.cached(
            key,
            lambda: self._group.read_series(
                current["trial"],
                stored_node,
                stored_role,
                current["recording_type"],
                aggregation,
                statistic,
                iteration=iteration,
                sample_index=sample_index,
                type_of_execution=toe,
                rank=rank,
            ),
        )

    def _merged_series(self, trial_id: str, node: str, role: str, iteration: int,
                       recording_type: str, aggregation: str, statistic: str,
                       toe: str | None) -> pd.DataFrame:
        """read_series' frame of every rank merged (query/ranks.py's rules)."""
        if aggregation not in (*BATCH_AGGREGATIONS, NO_BATCH):
            raise ConfigurationError(
                "one sample belongs to one rank's batch and cannot be merged over ranks: "
                "choose a rank, or a batch aggregation")
        frame = self._group.read_merged_statistics(
            trial_id, nodes=node, roles=role, recording_types=recording_type,
            aggregations=aggregation, statistics=statistic, iterations=iteration,
            types_of_execution=toe)
        return frame[["training_step", "type_of_execution", "iteration", statistic]].rename(
            columns={statistic: "value"}).reset_index(drop=True)

    def statistic_table(self, trial_id: str, statistic: str) -> StatisticTable | None:
        """One statistic of the whole trial for painting (one query, cached per version;
        None: the trial has no readable statistics)."""
        if self._group is None or trial_id not in self.trial_ids():
            return None
        key = ("statistic_table", trial_id, self.trial_version(trial_id), statistic)
        return self.cached(
            key,
            lambda: self.safely(
                f"{statistic} of {trial_id}",
                lambda: StatisticTable(self._group, trial_id, statistic),
                None,
            ),
        )

    def node_values(
        self,
        trial_id: str,
        training_step: int,
        iteration: int,
        statistic: str,
        recording_type: str,
        aggregation: str,
    ) -> dict[str, tuple[float | None, str | None, bool]] | None:
        """Graph node name -> (value, role, holds NaN/Inf) of ``statistic`` at a step.

        A node shows its first role (in graph order) with a value of ``recording_type``
        and ``aggregation`` (a tensor without a batch dimension its own); it holds
        NaN/Inf when any of its roles does. Nodes are found where their data is stored
        (imports follow their alias, like :meth:`read_tensor`). None: no table or graph.
        """
        table = self.statistic_table(trial_id, statistic)
        graph = self.graph(trial_id, training_step, iteration)
        if table is None or graph is None:
            return None
        at_step = table.at_step(training_step, recording_type, aggregation)
        out: dict[str, tuple[float | None, str | None, bool]] = {}
        for node in graph.nodes:
            value, shown_role, non_finite = None, None, False
            for role in node.roles:
                found = at_step.get(self._stored_key(node, role))
                if found is None:
                    continue
                non_finite |= found[1]
                if value is None and found[0] is not None:
                    value, shown_role = found[0], role
            out[node.name] = (value, shown_role, non_finite)
        return out

    def _stored_key(self, node: Any, role: str) -> tuple[int, str, str]:
        stored_node, stored_role, iteration = self.data_location(node, role)
        return iteration, stored_node, stored_role

    def findings(self, trial_id: str) -> list[dict[str, Any]]:
        """The findings of one trial (``comgra_like.analysis``) as dicts, most severe
        first, as of :meth:`findings_version`, scanned now if needed (app/findings_scan.py:
        once per data version; a running trial at most once per ``findings_pause`` times
        its last scan's duration, the older findings meanwhile)."""
        if self._group is None or self.trial_info(trial_id) is None:
            return []
        return self._findings.of(trial_id)

    def gather_findings(self, trial_ids: Sequence[str], wait: float
                        ) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
        """(findings of the trials scanned so far, by trial; trials still being scanned in
        the background), after waiting at most ``wait`` seconds (app/findings_scan.py)."""
        if self._group is None:
            return {}, []
        return self._findings.gather(trial_ids, wait)

    @property
    def findings_pause(self) -> float:
        return self._findings.pause

    @findings_pause.setter
    def findings_pause(self, value: float) -> None:
        self._findings.pause = float(value)

    def findings_version(self, trial_id: str) -> int:
        """The data version of the trial that :meth:`findings` last scanned (0: none)."""
        return self._findings.version(trial_id)

    def modules(self, trial_id: str) -> list[Any]:
        return self._group.read_modules(trial_id) if self._group is not None else []

    def notes(self, trial_id: str) -> list[Any]:
        return self._group.read_notes(trial_id) if self._group is not None else []

    def kpis(self, trial_id: str) -> pd.DataFrame:
        if self._group is None:
            return pd.DataFrame()
        return self._group.read_kpis(trial_id)

    # --- selector options -------------------------------------------------------------

    def option_source(self) -> GroupOptions:
        return GroupOptions(self)


class GroupOptions:
    """The selector options of the recordings (``selection.OptionSource``)."""

    def __init__(self, data: AppData):
        self.data = data

    def options(self, field: str, up: Mapping[str, Any]) -> Sequence[Any]:
        data = self.data
        if field == "trial":
            return data.trial_ids()
        if field == "type_of_execution":
            return [ANY_TYPE, *data.types_of_execution(up["trial"])]
        if field == "training_step":
            return list(data.step_options(up["trial"], up["type_of_execution"]))
        steps = data.steps(up["trial"])
        info = steps.get(up["training_step"])
        if info is None:
            return []
        if field == "iteration":
            return sorted(info.graph_hashes)
        graph = data.graph(up["trial"], up["training_step"], up["iteration"])
        if graph is None:
            return []
        if field == "node":
            return [n.name for n in graph.nodes]
        node = next((n for n in graph.nodes if n.name == up["node"]), None)
        if node is None:
            return []
        if field == "role":
            return list(node.roles)
        recorded = data.recorded(up["trial"], up["training_step"], node, up["role"])
        if field == "recording_type":
            return sorted(recorded, key=sel.recording_type_sort_key)
        if field == "aggregation":
            return list(recorded.get(up["recording_type"], ()))
        raise KeyError(f"unknown selector field {field!r}")
