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

``AppData`` is three parts: the group, its refreshes and the status (``GroupRefresh``,
app/data_refresh.py), the tensor reads and painted values (``TensorReads``,
app/data_tensors.py), and here the derived cache, the listing of trials, steps, graphs
and what each step recorded, and the findings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from comgra_like.errors import NotFoundError
from comgra_like.query.cache import ByteLRU, estimate_bytes
from comgra_like.vocabulary import ANY_TYPE

from . import selection as sel
from .data_refresh import (  # noqa: F401  (the names app.data had before the split)
    KEEP_REFRESHES,
    MAX_READ_PROBLEMS,
    DataStatus,
    GroupRefresh,
    RefreshRecord,
)
from .data_tensors import TensorReads
from .findings_scan import Findings
from .steps import StepList

DEFAULT_CACHE_BYTES = 256 * 2**20
_NAMESPACE = "comgra_like.app"  # the first part of every key the GUI puts in the cache

_INDEX_COLUMNS = ("iteration", "node", "role", "recording_type", "aggregation", "sample_index")


def _tensor_index_bytes(index: Mapping[tuple, Mapping[str, tuple[str, ...]]]) -> int:
    """A rough size of a tensor index, from its shape (walking it with estimate_bytes cost
    ~15% of building it); the aggregation tuples are shared between entries."""
    return 256 + sum(400 + 250 * len(by_type) for by_type in index.values())


class AppData(GroupRefresh, TensorReads):
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
        self._start_group(open_group)
        self._findings = Findings(self, _NAMESPACE)
        self._open_first(index_wait)

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