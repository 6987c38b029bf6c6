"""The query API: the only way anything reads recordings (see docs/QUERY_API.md).

``open_group(path)`` returns a :class:`Group` that keeps a small per-trial index in
memory (steps, KPIs, notes, graphs, which tensor shard holds which steps) and extends
it with only the new files on each :meth:`Group.refresh` (files are append-only and
never modified, so "new" means "a name not seen before"). Values are read on demand
and kept in an LRU cache whose size the caller sets. Needs numpy, pandas and pyarrow;
never torch or dash.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import NotFoundError, StorageError
from .store.files import live_shards, shard_range
from .store.schema import ALL_STATISTICS, SCHEMA_VERSION, SCHEMAS, TRIAL_ID_PATTERN

log = logging.getLogger("comgra_like")

KEY_COLUMNS = ["training_step", "type_of_execution", "iteration", "node", "role", "tensor_name",
               "kind", "recording_type", "aggregation", "sample_index", "shape"]


# ----- value classes ---------------------------------------------------------------------


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass(frozen=True)
class TrialChange:
    new_steps: list[int] = field(default_factory=list)
    new_graphs: int = 0
    kpis_changed: bool = False
    notes_changed: bool = False
    status_changed: bool = False
    repaired_files: int = 0  # damaged tensors shards that changed since and read again


@dataclass(frozen=True)
class RefreshReport:
    version: int
    new_trials: list[str]
    changed_trials: dict[str, TrialChange]
    skipped: list[SkippedFile]

    @property
    def changed(self) -> bool:
        return bool(self.new_trials or self.changed_trials or self.skipped)


@dataclass(frozen=True)
class TrialInfo:
    trial_id: str
    status: str
    created: float
    schema_version: int
    settings: dict
    versions: dict


@dataclass(frozen=True)
class GraphNode:
    name: str  # unique key in this graph (import nodes: "<node>@<iteration>")
    node: str  # the node name the data is stored under
    kind: str
    roles: tuple[str, ...]
    tensor_names: dict[str, str]
    shapes: dict[str, tuple]
    iteration: int
    is_import: bool
    module_group: str | None
    alias_of: dict[str, tuple] = field(default_factory=dict)  # role -> (node, role, iteration)


@dataclass(frozen=True)
class GraphEdge:
    source: str
    target: str
    source_role: str
    target_role: str


@dataclass(frozen=True)
class Graph:
    graph_hash: str
    iteration: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]

    def node(self, name: str) -> GraphNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise NotFoundError(f"no node {name!r} in this graph")


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    full_name: str
    shape: tuple
    numel: int


@dataclass(frozen=True)
class ModuleInfo:
    name: str
    parent: str | None
    parameters: list[ParameterInfo]
    num_parameters_total: int


@dataclass(frozen=True)
class Note:
    index: int
    text: str
    wall_time: float
    training_step: int | None = None


@dataclass(frozen=True)
class TensorRecord:
    trial_id: str
    training_step: int
    iteration: int
    node: str
    role: str
    tensor_name: str
    kind: str
    recording_type: str
    aggregation: str
    sample_index: int
    shape: tuple
    stats: dict[str, float]
    values: np.ndarray | None


# ----- the cache -------------------------------------------------------------------------


class _LRU:
    """A byte-bounded LRU cache (thread-safe; Dash may call from several threads)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key, value, size: int) -> None:
        if size > self.max_bytes:
            return  # larger than the whole budget: used once, never kept
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            self._items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes and len(self._items) > 1:
                _, (_, s) = self._items.popitem(last=False)
                self.bytes -= s

    def drop(self, predicate) -> None:
        with self._lock:
            for key in [k for k in self._items if predicate(k)]:
                self.bytes -= self._items.pop(key)[1]


# ----- per-trial index -------------------------------------------------------------------


@dataclass
class _TensorFile:
    path: Path
    min_step: int
    max_step: int


class _Trial:
    def __init__(self, path: Path):
        self.path = path
        self.info: TrialInfo | None = None
        self.info_signature: tuple[int, int] | None = None
        self.seen: dict[str, set[str]] = {"steps": set(), "tensors": set(), "kpis": set(),
                                          "graphs": set()}
        self.steps_parts: list[pd.DataFrame] = []
        self.steps: pd.DataFrame = _empty_steps()
        self.kpi_parts: list[pd.DataFrame] = []
        self.kpis: pd.DataFrame = _empty_kpis()
        self.tensor_files: dict[str, _TensorFile] = {}
        self.graphs: dict[str, dict] = {}
        self.notes: list[Note] = []
        self.notes_offset = 0
        self.modules: list[ModuleInfo] | None = None
        self.modules_signature: tuple[int, int] | None = None
        # Damaged files, "<kind>/<name>" -> (signature when found damaged, reason): looked
        # at again only when their size or modification time changes.
        self.damaged: dict[str, tuple[tuple[int, int] | None, str]] = {}
        self.damaged_tensor_files: dict[str, _TensorFile] = {}  # their step ranges
        self.lock = threading.RLock()


def _signature(path: Path) -> tuple[int, int] | None:
    """(modification time, size) of a file, None if it cannot be looked at: a file that
    changes (a rewrite, a copy tool, a repair) gets a new signature."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # pyarrow's messages span lines
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({
        "training_step": pd.Series(dtype="int64"), "type_of_execution": pd.Series(dtype="object"),
        "iteration": pd.Series(dtype="int32"), "graph_hash": pd.Series(dtype="object"),
        "batch_size": pd.Series(dtype="int32"), "sample_indices": pd.Series(dtype="object"),
        "sample_categories": pd.Series(dtype="object"), "wall_time": pd.Series(dtype="float64"),
    })


def _empty_kpis() -> pd.DataFrame:
    return pd.DataFrame({
        "kpi_group": pd.Series(dtype="object"), "kpi_name": pd.Series(dtype="object"),
        "type_of_execution": pd.Series(dtype="object"), "timepoint": pd.Series(dtype="int64"),
        "value": pd.Series(dtype="float64"), "wall_time": pd.Series(dtype="float64"),
    })


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        cols[name] = col
    return pa.table(cols).to_pandas()


class Group:
    """A group folder of recordings, read incrementally. Create it with :func:`open_group`."""

    def __init__(self, path: str | os.PathLike, cache_bytes: int = 256 * 2**20):
        self.path = Path(path)
        self._trials: dict[str, _Trial] = {}
        self._cache = _LRU(cache_bytes)
        self.version = 0
        self._skipped: dict[str, SkippedFile] = {}  # path -> why, each damaged file once
        # trial folders whose trial.json could not be used -> its signature then
        self._rejected: dict[str, tuple[int, int] | None] = {}
        self._lock = threading.RLock()

    @property
    def cache_bytes_used(self) -> int:
        return self._cache.bytes

    @property
    def skipped(self) -> list[SkippedFile]:
        """The files skipped because they are damaged, each once (a file that was repaired
        since leaves this list)."""
        with self._lock:
            return list(self._skipped.values())

    def _skip(self, path: Path, reason: str, report: list[SkippedFile] | None) -> bool:
        """Note a damaged file; True (and in ``report``) only the first time, or when the
        reason changed."""
        entry = SkippedFile(str(path), reason)
        with self._lock:
            if self._skipped.get(entry.path) == entry:
                return False
            self._skipped[entry.path] = entry
        if report is not None:
            report.append(entry)
        return True

    def _unskip(self, path: Path) -> bool:
        with self._lock:
            return self._skipped.pop(str(path), None) is not None

    def _damaged(self, trial: _Trial, key: str, reason: str,
                 report: list[SkippedFile] | None) -> bool:
        """A file of ``trial`` (``key`` = "<kind>/<name>") is damaged: note it there and in
        :attr:`skipped`."""
        path = trial.path / key
        trial.damaged[key] = (_signature(path), reason)
        return self._skip(path, reason, report)

    def _recheck_damaged(self, trial: _Trial, kind: str, live: list[str] | None) -> list[str]:
        """Names of ``kind`` noted as damaged that changed since (or are gone): forget
        them, so that the caller reads them again (their report stays until they read)."""
        again = []
        for key in [k for k in trial.damaged if k.startswith(kind + "/")]:
            name = key[len(kind) + 1:]
            if live is not None and name not in live:
                del trial.damaged[key]  # deleted, or replaced by a compaction
                trial.damaged_tensor_files.pop(name, None)
                self._unskip(trial.path / key)
                continue
            if _signature(trial.path / key) != trial.damaged[key][0]:
                del trial.damaged[key]
                trial.damaged_tensor_files.pop(name, None)
                again.append(name)
        return again

    # ----- refresh -----------------------------------------------------------------------

    def refresh(self) -> RefreshReport:
        """Read what appeared since the last refresh; cheap when nothing did."""
        with self._lock:
            new_trials: list[str] = []
            changed: dict[str, TrialChange] = {}
            skipped: list[SkippedFile] = []
            trials_dir = self.path / "trials"
            names = []
            if trials_dir.is_dir():
                try:
                    names = sorted(e.name for e in os.scandir(trials_dir) if e.is_dir())
                except OSError:
                    names = []
            for name in names:
                if name.startswith(".") or not TRIAL_ID_PATTERN.match(name):
                    continue
                trial = self._trials.get(name)
                if trial is None:
                    # A trial.json that could not be used is looked at again only when
                    # it changes (it was reported once already).
                    info_path = trials_dir / name / "trial.json"
                    if name in self._rejected and self._rejected[name] == _signature(info_path):
                        continue
                    trial = _Trial(trials_dir / name)
                    if not self._refresh_info(trial, skipped):
                        self._rejected[name] = trial.info_signature
                        continue
                    self._rejected.pop(name, None)
                    self._trials[name] = trial
                    new_trials.append(name)
                change = self._refresh_trial(trial, skipped)
                if change is not None and name not in new_trials:
                    changed[name] = change
            for name in list(self._trials) + list(self._rejected):
                if name not in names:  # deleted (e.g. replaced by a new run)
                    self._rejected.pop(name, None)
                    self._forget_skipped(trials_dir / name)
                    if self._trials.pop(name, None) is not None:
                        self._cache.drop(lambda k, n=name: k[0] == n)
                        changed[name] = TrialChange(status_changed=True)
            if new_trials or changed or skipped:
                self.version += 1
            return RefreshReport(self.version, new_trials, changed, skipped)

    def _forget_skipped(self, folder: Path) -> None:
        prefix = str(folder) + os.sep
        with self._lock:
            for path in [p for p in self._skipped if p.startswith(prefix)]:
                del self._skipped[path]

    def _refresh_info(self, trial: _Trial, skipped: list[SkippedFile]) -> bool:
        """Read trial.json if it changed; whether the trial can be shown."""
        path = trial.path / "trial.json"
        signature = _signature(path)
        if signature is None:
            return trial.info is not None  # not written yet
        if signature == trial.info_signature:
            return trial.info is not None
        trial.info_signature = signature
        try:
            data = json.loads(path.read_text("utf-8"))
            if not isinstance(data, dict):
                raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
            version = int(data["schema_version"])
            info = TrialInfo(
                trial_id=str(data.get("trial_id", trial.path.name)),
                status=str(data.get("status", "")),
                created=float(data.get("created") or 0.0), schema_version=version,
                settings=dict(data.get("settings") or {}),
                versions=dict(data.get("versions") or {}),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            reason = f"unreadable trial.json ({_reason(e)})"
            if isinstance(e, KeyError):
                reason = f"unreadable trial.json (no {e} field)"
            self._skip(path, reason, skipped)
            return trial.info is not None  # a trial already shown keeps what it had
        if version > SCHEMA_VERSION:
            self._skip(path, f"written with storage format {version}, this version reads up to "
                             f"{SCHEMA_VERSION}: upgrade comgra_like", skipped)
            return False
        self._unskip(path)
        trial.info = info
        return True

    def _refresh_trial(self, trial: _Trial, skipped: list[SkippedFile]) -> TrialChange | None:
        with trial.lock:
            old_status = trial.info.status if trial.info else None
            self._refresh_info(trial, skipped)
            status_changed = trial.info is not None and trial.info.status != old_status
            new_steps = self._refresh_table(trial, "steps", skipped)
            kpis_changed = bool(self._refresh_table(trial, "kpis", skipped))
            repaired = self._refresh_table(trial, "tensors", skipped)
            new_graphs = self._refresh_graphs(trial, skipped)
            notes_changed = self._refresh_notes(trial)
            steps = sorted({int(s) for s in new_steps}) if new_steps else []
            if steps or new_graphs or kpis_changed or notes_changed or status_changed or repaired:
                return TrialChange(steps, new_graphs, kpis_changed, notes_changed, status_changed,
                                   len(repaired))
            return None

    def _list_new(self, trial: _Trial, kind: str) -> tuple[list[str], list[str]]:
        folder = trial.path / kind
        try:
            names = [e.name for e in os.scandir(folder) if not e.name.startswith(".")]
        except OSError:
            return [], []
        live = live_shards(names)
        return live, [n for n in live if n not in trial.seen[kind]]

    def _refresh_table(self, trial: _Trial, kind: str, skipped: list[SkippedFile]):
        live, new = self._list_new(trial, kind)
        again = self._recheck_damaged(trial, kind, live)
        for name in again:
            trial.seen[kind].discard(name)
        new += again
        result = []
        if kind == "tensors":
            # A compaction replaced files we indexed: point the index at the new file.
            for name in list(trial.tensor_files):
                if name not in live:
                    del trial.tensor_files[name]
                    self._cache.drop(lambda k, t=trial.path.name, n=name: k[0] == t and k[1] == n)
        if not new:
            return []
        for name in new:
            path = trial.path / kind / name
            trial.seen[kind].add(name)
            covered_only = self._covers_seen(trial, kind, name)
            try:
                if kind == "tensors":
                    meta = pq.read_metadata(path)
                    lo, hi = _step_range(meta)
                    trial.tensor_files[name] = _TensorFile(path, lo, hi)
                    if self._unskip(path):  # repaired: steps read without it read again
                        result.append(name)
                        self._cache.drop(lambda k, t=trial.path.name, a=lo, b=hi: k[0] == t and
                                         k[1] in ("step", "list") and a <= k[2] <= b)
                    continue
                if covered_only:
                    continue  # a compaction of data already loaded
                table = pq.read_table(path, schema=SCHEMAS[kind])
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                self._damaged(trial, f"{kind}/{name}", f"unreadable shard ({_reason(e)})",
                              skipped)
                trial.tensor_files.pop(name, None)
                continue
            self._unskip(path)
            frame = _to_pandas(table).drop(columns=["trial_id"])
            if kind == "steps":
                trial.steps_parts.append(frame)
                result.extend(frame["training_step"].unique().tolist())
            else:
                trial.kpi_parts.append(frame)
                result.append(name)
        if kind == "steps" and result:
            trial.steps = (pd.concat(trial.steps_parts, ignore_index=True)
                           .drop_duplicates(subset=["training_step", "iteration"])
                           .sort_values(["training_step", "iteration"], kind="stable")
                           .reset_index(drop=True))
            trial.steps_parts = [trial.steps]
        if kind == "kpis" and result:
            trial.kpis = (pd.concat(trial.kpi_parts, ignore_index=True)
                          .drop_duplicates(subset=["kpi_group", "kpi_name", "type_of_execution",
                                                   "timepoint"])
                          .sort_values("timepoint", kind="stable").reset_index(drop=True))
            trial.kpi_parts = [trial.kpis]
        return result

    @staticmethod
    def _covers_seen(trial: _Trial, kind: str, name: str) -> bool:
        """Whether ``name`` is a compacted file whose sources were all loaded already."""
        if not name.startswith("compact-"):
            return False
        a, b = shard_range(name)
        seen_ranges = [shard_range(n) for n in trial.seen[kind] if n != name]
        covered = set()
        for r in seen_ranges:
            if r and a <= r[0] and r[1] <= b:
                covered.update(range(r[0], r[1] + 1))
        return covered >= set(range(a, b + 1))

    def _refresh_graphs(self, trial: _Trial, skipped: list[SkippedFile]) -> int:
        folder = trial.path / "graphs"
        try:
            names = [e.name for e in os.scandir(folder)
                     if e.name.endswith(".json") and not e.name.startswith(".")]
        except OSError:
            return 0
        for name in self._recheck_damaged(trial, "graphs", names):
            trial.seen["graphs"].discard(name)
        count = 0
        for name in names:
            if name in trial.seen["graphs"]:
                continue
            trial.seen["graphs"].add(name)
            path = folder / name
            try:
                structure = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError) as e:
                self._damaged(trial, f"graphs/{name}", f"unreadable graph ({_reason(e)})",
                              skipped)
                continue
            try:
                _graph_from_structure(name[:-5], 0, structure)
            except _GraphStructureError as e:
                self._damaged(trial, f"graphs/{name}", f"graph of the wrong structure ({e})",
                              skipped)
                continue
            self._unskip(path)
            trial.graphs[name[:-5]] = structure
            count += 1
        return count

    def _refresh_notes(self, trial: _Trial) -> bool:
        path = trial.path / "notes.jsonl"
        try:
            size = path.stat().st_size
        except OSError:
            return False
        if size <= trial.notes_offset:
            return False
        with open(path, "rb") as f:
            f.seek(trial.notes_offset)
            data = f.read(size - trial.notes_offset)
        end = data.rfind(b"\n")
        if end < 0:
            return False  # a line still being written
        trial.notes_offset += end + 1
        for line in data[: end + 1].splitlines():
            try:
                obj = json.loads(line)
                step = obj.get("training_step")
                trial.notes.append(Note(len(trial.notes), str(obj.get("text", "")),
                                        float(obj.get("wall_time") or 0.0),
                                        None if step is None else int(step)))
            except (ValueError, TypeError, AttributeError):  # not a note object: show the line
                trial.notes.append(Note(len(trial.notes), line.decode("utf-8", "replace"), 0.0))
        return True

    # ----- lists -------------------------------------------------------------------------

    def _trial(self, trial_id: str) -> _Trial:
        trial = self._trials.get(trial_id)
        if trial is None:
            self.refresh()
            trial = self._trials.get(trial_id)
        if trial is None:
            known = ", ".join(sorted(self._trials)) or "none"
            raise NotFoundError(f"no trial {trial_id!r} in {self.path} (trials: {known})")
        return trial

    def list_trials(self) -> list[TrialInfo]:
        return [t.info for _, t in sorted(self._trials.items()) if t.info is not None]

    def list_steps(self, trial_id: str) -> pd.DataFrame:
        return self._trial(trial_id).steps.copy()

    def read_modules(self, trial_id: str) -> list[ModuleInfo]:
        """The module tree; raises StorageError (and lists the file in :attr:`skipped`)
        for a damaged modules.json."""
        trial = self._trial(trial_id)
        path = trial.path / "modules.json"
        signature = _signature(path)
        if signature is None:
            return []
        with self._lock:  # not trial.lock: refresh takes the group's lock first
            if trial.modules is None or trial.modules_signature != signature:
                try:
                    data = json.loads(path.read_text("utf-8"))
                    modules = [
                        ModuleInfo(
                            name=str(m["name"]), parent=m.get("parent"),
                            parameters=[ParameterInfo(str(p["name"]), str(p["full_name"]),
                                                      tuple(int(d) for d in p["shape"]),
                                                      int(p["numel"]))
                                        for p in m.get("parameters", [])],
                            num_parameters_total=int(m.get("num_parameters_total", 0)),
                        )
                        for m in data.get("modules", [])
                    ]
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                    reason = f"unreadable modules.json ({_reason(e)})"
                    if self._damaged(trial, "modules.json", reason, None):
                        self.version += 1
                    raise StorageError(f"{path}: {reason}; the module tree cannot be shown "
                                       "until the recorder writes it again") from e
                trial.damaged.pop("modules.json", None)
                self._unskip(path)
                trial.modules = modules
                trial.modules_signature = signature
            return list(trial.modules)

    def read_notes(self, trial_id: str) -> list[Note]:
        return list(self._trial(trial_id).notes)

    def read_kpis(self, trial_id: str) -> pd.DataFrame:
        return self._trial(trial_id).kpis.copy()

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
        if structure is None and f"graphs/{digest}.json" not in trial.damaged:
            self.refresh()
            structure = trial.graphs.get(digest)
        if structure is None:
            damage = trial.damaged.get(f"graphs/{digest}.json")
            if damage is not None:
                raise StorageError(
                    f"the graph of step {training_step}, iteration {iteration} of trial "
                    f"{trial_id!r} is damaged and was skipped: "
                    f"{trial.path / 'graphs' / (digest + '.json')}: {damage[1]}")
            raise NotFoundError(f"graph {digest} of trial {trial_id!r} is missing on disk")
        return _graph_from_structure(digest, int(iteration), structure)

    # ----- values ------------------------------------------------------------------------

    def _files_for_step(self, trial: _Trial, step: int) -> list[_TensorFile]:
        return [f for f in trial.tensor_files.values() if f.min_step <= step <= f.max_step]

    def _tensor_file_failed(self, trial_id: str, trial: _Trial, f: _TensorFile,
                            exc: Exception) -> None:
        """A tensors shard failed to read (damaged after it was indexed, e.g. rewritten in
        place): leave it out from now on and report it, once."""
        name = f.path.name
        with self._lock:  # not trial.lock: refresh takes the group's lock first
            if trial.tensor_files.get(name) is f:
                del trial.tensor_files[name]
            trial.damaged_tensor_files[name] = f
            if self._damaged(trial, f"tensors/{name}", f"unreadable shard ({_reason(exc)})",
                             None):
                self.version += 1
                log.warning("skipping damaged file %s: %s", f.path, _reason(exc))
        self._cache.drop(lambda k: k[0] == trial_id and k[1] == name)

    def _step_table(self, trial_id: str, step: int) -> pa.Table:
        trial = self._trial(trial_id)
        key = (trial_id, "step", int(step))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        for attempt in range(2):
            tables = []
            try:
                for f in self._files_for_step(trial, step):
                    try:
                        tables.append(pq.read_table(
                            f.path, filters=[("training_step", "=", int(step))],
                            schema=SCHEMAS["tensors"]))
                    except FileNotFoundError:
                        raise
                    except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                        self._tensor_file_failed(trial_id, trial, f, e)
                break
            except FileNotFoundError:
                if attempt:
                    raise
                self.refresh()  # compacted in between: the index points at the new file
        if not tables:
            damaged = [f for f in list(trial.damaged_tensor_files.values())
                       if f.min_step <= step <= f.max_step]
            if damaged:
                reason = trial.damaged.get(f"tensors/{damaged[0].path.name}", (None, ""))[1]
                raise StorageError(
                    f"the tensors of step {step} of trial {trial_id!r} are in a damaged file, "
                    f"which was skipped: {damaged[0].path}: {reason}")
            raise NotFoundError(f"trial {trial_id!r} has no tensor data for step {step}")
        table = pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]
        self._cache.put(key, table, table.nbytes)
        return table

    def list_tensors(self, trial_id: str, training_step: int) -> pd.DataFrame:
        """What is recorded at a step (no values): one row per tensor row on disk."""
        key = (trial_id, "list", int(training_step))
        cached = self._cache.get(key)
        if cached is None:
            table = self._step_table(trial_id, training_step)
            cached = _to_pandas(table.select([c for c in KEY_COLUMNS if c != "shape"]))
            cached["shape"] = [tuple(s) for s in table.column("shape").to_pylist()]
            self._cache.put(key, cached, int(cached.memory_usage(index=False).sum()) * 4)
        return cached.copy()

    def read_tensor(self, trial_id: str, training_step: int, iteration: int, node: str,
                    role: str, recording_type: str, aggregation: str,
                    sample_index: int = -1) -> TensorRecord:
        table = self._step_table(trial_id, training_step)
        mask = pc.and_(
            pc.and_(pc.equal(table["iteration"], int(iteration)),
                    pc.equal(table["node"].cast(pa.string()), node)),
            pc.and_(pc.and_(pc.equal(table["role"].cast(pa.string()), role),
                            pc.equal(table["recording_type"].cast(pa.string()), recording_type)),
                    pc.and_(pc.equal(table["aggregation"].cast(pa.string()), aggregation),
                            pc.equal(table["sample_index"], int(sample_index)))),
        )
        rows = table.filter(mask)
        if rows.num_rows == 0:
            target = self._alias_target(trial_id, training_step, iteration, node, role)
            if target is not None:  # a re-registered tensor: its data lives under the original
                return self.read_tensor(trial_id, training_step, target[2], target[0], target[1],
                                        recording_type, aggregation, sample_index)
            raise NotFoundError(
                f"trial {trial_id!r}, step {training_step}, iteration {iteration}: nothing "
                f"recorded for node {node!r} role {role!r} ({recording_type}, {aggregation}, "
                f"sample {sample_index})"
            )
        row = rows.slice(0, 1).to_pylist()[0]
        shape = tuple(int(s) for s in (row["shape"] or ()))
        values = row["values"]
        arr = None
        if values is not None:
            arr = np.asarray(values, dtype=np.float32)
            if shape and int(np.prod(shape)) == arr.size:
                arr = arr.reshape(shape)
        stats = {name: (float(row[name]) if row[name] is not None else float("nan"))
                 for name in ALL_STATISTICS}
        return TensorRecord(
            trial_id=trial_id, training_step=int(training_step), iteration=int(iteration),
            node=node, role=role, tensor_name=row["tensor_name"], kind=row["kind"],
            recording_type=recording_type, aggregation=aggregation,
            sample_index=int(sample_index), shape=shape, stats=stats, values=arr,
        )

    def _alias_target(self, trial_id, training_step, iteration, node, role):
        trial = self._trial(trial_id)
        steps = trial.steps
        rows = steps[steps["training_step"] == training_step]
        for it, digest in zip(rows["iteration"], rows["graph_hash"]):
            structure = trial.graphs.get(digest)
            if structure is None:
                continue
            graph = _graph_from_structure(digest, int(it), structure)
            for n in graph.nodes:
                if n.node == node and n.iteration == iteration and role in n.alias_of:
                    return n.alias_of[role]
        return None

    def _stats_index(self, trial_id: str, path: Path) -> _SeriesIndex:
        key = (trial_id, path.name, "stats")
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        index = _SeriesIndex.build(path)
        self._cache.put(key, index, index.nbytes)
        return index

    def read_series(self, trial_id: str, node: str, role: str, recording_type: str,
                    aggregation: str, statistic: str, iteration: int | None = None,
                    sample_index: int = -1, type_of_execution: str | None = None) -> pd.DataFrame:
        """One statistic of one tensor over all recorded steps of a trial."""
        if statistic not in ALL_STATISTICS:
            raise NotFoundError(f"unknown statistic {statistic!r}; choose one of {ALL_STATISTICS}")
        trial = self._trial(trial_id)
        frames = []
        for f in list(trial.tensor_files.values()):
            try:
                index = self._stats_index(trial_id, f.path)
            except FileNotFoundError:
                self.refresh()
                return self.read_series(trial_id, node, role, recording_type, aggregation,
                                        statistic, iteration, sample_index, type_of_execution)
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                self._tensor_file_failed(trial_id, trial, f, e)
                continue
            frame = index.series(node, role, recording_type, aggregation, int(sample_index),
                                 statistic)
            if frame is None:
                continue
            if iteration is not None:
                frame = frame[frame["iteration"] == int(iteration)]
            if type_of_execution is not None:
                frame = frame[frame["type_of_execution"] == type_of_execution]
            frames.append(frame)
        if not frames:
            return pd.DataFrame({"training_step": pd.Series(dtype="int64"),
                                 "type_of_execution": pd.Series(dtype="object"),
                                 "iteration": pd.Series(dtype="int32"),
                                 "value": pd.Series(dtype="float64")})
        out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        return out.sort_values(["training_step", "iteration"], kind="stable").reset_index(drop=True)


class _SeriesIndex:
    """The statistics of one tensor file, grouped by tensor (no values).

    Rows are grouped once, by the dictionary codes of node, role, recording type and
    aggregation plus the sample index, so a series is a lookup and a ``take`` instead of
    a scan that compares strings over the whole trial.
    """

    COLUMNS = ("training_step", "type_of_execution", "iteration", "node", "role",
               "recording_type", "aggregation", "sample_index", *ALL_STATISTICS)
    KEYS = ("node", "role", "recording_type", "aggregation")

    def __init__(self, columns: dict[str, np.ndarray], dictionaries: dict[str, list[str]],
                 order: np.ndarray, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 radix: list[int]):
        self.columns = columns
        self.codes = {k: {v: i for i, v in enumerate(d)} for k, d in dictionaries.items()}
        self.toe_values = np.asarray(dictionaries["type_of_execution"], dtype=object)
        self.order, self.keys, self.starts, self.ends, self.radix = order, keys, starts, ends, radix
        self.nbytes = (sum(c.nbytes for c in columns.values()) + order.nbytes + keys.nbytes
                       + starts.nbytes + ends.nbytes)

    @classmethod
    def build(cls, path: Path) -> _SeriesIndex:
        table = pq.read_table(path, columns=list(cls.COLUMNS), schema=SCHEMAS["tensors"])
        table = table.unify_dictionaries().combine_chunks()
        columns, dictionaries = {}, {}
        for name in cls.COLUMNS:
            col = table.column(name)
            arr = col.chunk(0) if col.num_chunks else pa.array([], col.type)
            if pa.types.is_dictionary(col.type):
                dictionaries[name] = arr.dictionary.to_pylist()
                columns[name] = arr.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                columns[name] = arr.to_numpy(zero_copy_only=False)
        samples = columns["sample_index"].astype(np.int64) + 1  # -1 -> 0
        radix = [len(dictionaries[k]) for k in cls.KEYS] + [int(samples.max(initial=0)) + 1]
        key = np.zeros(table.num_rows, np.int64)
        for part, size in zip([columns[k] for k in cls.KEYS] + [samples], radix):
            key = key * size + part
        order = np.argsort(key, kind="stable")  # keeps the file's step order in a group
        keys, starts, counts = np.unique(key[order], return_index=True, return_counts=True)
        return cls(columns, dictionaries, order, keys, starts, starts + counts, radix)

    def series(self, node, role, recording_type, aggregation, sample_index, statistic):
        key = 0
        for name, value, size in zip(self.KEYS, (node, role, recording_type, aggregation),
                                     self.radix):
            code = self.codes[name].get(value)
            if code is None:
                return None
            key = key * size + code
        sample = sample_index + 1
        if not 0 <= sample < self.radix[-1]:
            return None
        key = key * self.radix[-1] + sample
        pos = int(np.searchsorted(self.keys, key))
        if pos >= len(self.keys) or self.keys[pos] != key:
            return None
        rows = self.order[self.starts[pos]:self.ends[pos]]
        return pd.DataFrame({
            "training_step": self.columns["training_step"][rows].astype(np.int64),
            "type_of_execution": self.toe_values[self.columns["type_of_execution"][rows]],
            "iteration": self.columns["iteration"][rows].astype(np.int32),
            "value": self.columns[statistic][rows].astype(np.float64),
        })


def _step_range(meta: pq.FileMetaData) -> tuple[int, int]:
    idx = meta.schema.to_arrow_schema().get_field_index("training_step")
    lo, hi = None, None
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(idx).statistics
        if st is None or not st.has_min_max:
            return -(2**62), 2**62  # unknown: always consult this file
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    if lo is None:
        return 1, 0  # empty file
    return int(lo), int(hi)


class _GraphStructureError(ValueError):
    """A graph file holds valid JSON of another structure (says where)."""


_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
               bool: "true/false", float: "a number", type(None): "null"}


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _GraphStructureError(f"{where} should be {_JSON_NAMES.get(kind, kind.__name__)}, "
                                   f"not {_JSON_NAMES.get(type(value), type(value).__name__)}")
    return value


def _relative_iteration(value: Any, iteration: int, where: str) -> int:
    if value == "step":
        return -1
    return iteration + _expect(value, int, where)


def _graph_from_structure(digest: str, iteration: int, structure: Any) -> Graph:
    """The Graph of a graph file's JSON (docs/FORMAT.md); _GraphStructureError names the
    first thing of another structure, so that a damaged file is reported, not shown."""
    _expect(structure, dict, "the file")
    nodes = []
    for i, n in enumerate(_expect(structure.get("nodes", []), list, "'nodes'")):
        where = f"nodes[{i}]"
        _expect(n, dict, where)
        for key in ("id", "node", "kind"):
            if key not in n:
                raise _GraphStructureError(f"{where} has no {key!r}")
            _expect(n[key], str, f"{where}.{key}")
        it = _relative_iteration(n.get("iteration"), iteration, f"{where}.iteration")
        roles = _expect(n.get("roles", {}), dict, f"{where}.roles")
        tensor_names, shapes, alias_of = {}, {}, {}
        for r, v in roles.items():
            at = f"{where}.roles[{r!r}]"
            _expect(v, dict, at)
            tensor_names[r] = _expect(v.get("tensor_name", ""), str, f"{at}.tensor_name")
            shape = _expect(v.get("shape", []), list, f"{at}.shape")
            shapes[r] = tuple(_expect(d, int, f"{at}.shape") for d in shape)
            alias = v.get("alias_of")
            if alias:
                if not (isinstance(alias, list) and len(alias) == 3):
                    raise _GraphStructureError(f"{at}.alias_of should be [node, role, iteration]")
                alias_of[r] = (_expect(alias[0], str, f"{at}.alias_of"),
                               _expect(alias[1], str, f"{at}.alias_of"),
                               _relative_iteration(alias[2], iteration, f"{at}.alias_of"))
        group = n.get("module_group")
        nodes.append(GraphNode(
            name=n["id"], node=n["node"], kind=n["kind"], roles=tuple(sorted(roles)),
            tensor_names=tensor_names, shapes=shapes, iteration=it,
            is_import=bool(n.get("is_import")),
            module_group=None if group is None else _expect(group, str, f"{where}.module_group"),
            alias_of=alias_of,
        ))
    edges = []
    for i, e in enumerate(_expect(structure.get("edges", []), list, "'edges'")):
        if not (isinstance(e, list) and len(e) == 4 and all(isinstance(x, str) for x in e)):
            raise _GraphStructureError(
                f"edges[{i}] should be [source, target, source role, target role]")
        edges.append(GraphEdge(*e))
    return Graph(digest, iteration, nodes, edges)


def open_group(path: str | os.PathLike, cache_bytes: int = 256 * 2**20) -> Group:
    """Open a group folder (``<comgra_root_path>/<group>``) and read what is there."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(
            f"{path} does not exist; pass the folder <comgra_root_path>/<group> that the "
            "recorder writes to"
        )
    if not path.is_dir():
        raise NotFoundError(f"{path} is not a folder; pass a group folder")
    group = Group(path, cache_bytes=cache_bytes)
    group.refresh()
    return group
