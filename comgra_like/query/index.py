"""The incremental index of a group folder: the directory watcher.

Contract (docs/FORMAT.md, "Writing rules"), which is what makes reading while a
recorder writes both safe and cheap:

- A file is written under a hidden name (``.…``) and renamed into place; hidden names
  are never looked at.
- A shard (``<table>/part-<seq>.parquet``) is never modified once it has its name, and
  ``<seq>`` grows strictly within a folder. So new data is *names not seen before*: an
  update lists each folder and reads only those names. Nothing already read is read
  again, except a file reported as damaged whose signature (modification time, size)
  changed since.
- Compaction writes ``compact-<a>-<b>.parquet`` before it deletes the parts ``a..b``;
  parts a compact file covers are ignored from the moment it appears. A compact file
  whose parts were all read adds nothing; one that also holds parts never read (the
  writer compacted before this reader saw them) makes its table read again from the
  files that are live now, so no row is counted twice.
- ``trial.json`` and ``modules.json`` are replaced whole (atomic rename) and read again
  when their signature changes; the legacy ``notes.jsonl`` is appended to and read from
  the end of the last complete line read.
- Rows of the steps table that repeat a (training step, iteration) already read (two
  writers of one trial) are left out, the first kept, and their file is reported.
- Every problem is a :class:`SkippedFile`, reported once, and the rest reads on.

The index holds metadata only: trial info, steps, KPIs, notes, graph structures,
modules, and which tensors shard holds which steps. The provider reads values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import NotFoundError
from ..format.files import Files, files_for
from ..format.layout import (
    LEGACY_NOTES_JSONL,
    MODULES_JSON,
    NOTES_DIR,
    TRIAL_JSON,
    TrialLayout,
    graph_name,
    is_hidden,
    live_shards,
    shard_range,
    shard_rank,
)
from ..format.notes import NOTES_SCHEMA
from ..format.schema import RANK, SCHEMA_VERSION, SCHEMAS, TRIAL_ID_PATTERN
from ..format.trial_config import read_config
from .graphs import GraphStructureError, parse_graph
from .listing import GroupListing, live_now
from .types import (
    ModuleInfo,
    Note,
    ParameterInfo,
    RefreshReport,
    SkippedFile,
    TrialChange,
    TrialInfo,
)

log = logging.getLogger("comgra_like")

STEP_KEY = ["training_step", "iteration"]
KPI_KEY = ["kpi_group", "kpi_name", "type_of_execution", "timepoint"]
# Each rank of a distributed recording has its own rows of every step (the rank comes
# from the file's name, docs/FORMAT.md "Recording ranks"): repeats are within one rank.
RANK_STEP_KEY = [*STEP_KEY, RANK]
#: Step numbers of a file whose row groups have no statistics: consulted for every step.
UNKNOWN_RANGE = (-(2**62), 2**62)
#: At most this many graph files' checked JSON are kept to skip parsing repeats.
CHECKED_GRAPHS = 4096
#: How many repeated (step, iteration) pairs a report names before "…".
_NAMED_DUPLICATES = 3
#: Why a symbolic link inside a group is skipped (format/confine.py).
LINK_REASON = ("a symbolic link, not followed: comgra_like reads nothing through links "
               "inside a group (they could lead anywhere); replace it by the folder or "
               "file itself")


Signature = tuple[int, int]


def signature(path: Path) -> Signature | None:
    """(modification time, size) of a file, None if it cannot be looked at: a file that
    changes (a rewrite, a copy tool, a repair) gets a new signature."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def reason_of(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # pyarrow's messages span lines
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A frame with plain ``str`` columns where the table has dictionary columns."""
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        cols[name] = col
    return pa.table(cols).to_pandas()


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame({
        "training_step": pd.Series(dtype="int64"), "type_of_execution": pd.Series(dtype="object"),
        "iteration": pd.Series(dtype="int32"), "graph_hash": pd.Series(dtype="object"),
        "batch_size": pd.Series(dtype="int32"), "sample_indices": pd.Series(dtype="object"),
        "sample_categories": pd.Series(dtype="object"), "wall_time": pd.Series(dtype="float64"),
        RANK: pd.Series(dtype="int64"),
    })


def empty_kpis() -> pd.DataFrame:
    return pd.DataFrame({
        "kpi_group": pd.Series(dtype="object"), "kpi_name": pd.Series(dtype="object"),
        "type_of_execution": pd.Series(dtype="object"), "timepoint": pd.Series(dtype="int64"),
        "value": pd.Series(dtype="float64"), "wall_time": pd.Series(dtype="float64"),
        RANK: pd.Series(dtype="int64"),
    })


_EMPTY_STEPS = empty_steps()
_EMPTY_KPIS = empty_kpis()


@dataclass(frozen=True)
class TensorFile:
    """A tensors shard and the training steps it holds (from its footer alone)."""

    path: Path
    min_step: int
    max_step: int
    # The steps served from it: all of them, unless it stands in for files a compaction
    # merged since the last update (then only theirs: the rest was never indexed).
    first_served: int = UNKNOWN_RANGE[0]
    last_served: int = UNKNOWN_RANGE[1]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def served(self) -> tuple[int, int]:
        return max(self.min_step, self.first_served), min(self.max_step, self.last_served)

    def serves(self, step: int) -> bool:
        lo, hi = self.served
        return lo <= step <= hi


def step_range(meta: pq.FileMetaData) -> tuple[int, int]:
    """The training steps of a parquet file, from its row groups' statistics."""
    idx = meta.schema.to_arrow_schema().get_field_index("training_step")
    lo, hi = None, None
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(idx).statistics
        if st is None or not st.has_min_max:
            return UNKNOWN_RANGE
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    if lo is None:
        return 1, 0  # empty file
    return int(lo), int(hi)


class TrialIndex:
    """What the last update read of one trial folder.

    Readers use the attributes without a lock: an update replaces each of them whole
    (``steps``, ``kpis``, ``notes``, ``tensor_files`` ...), never changes one in place.
    """

    def __init__(self, root: Path):
        self.layout = TrialLayout(root)
        self.info: TrialInfo | None = None
        # shared empty frames (never changed in place, like every frame here): building
        # two per trial took 6 ms of the 15 ms a trial of a few steps took to index
        self.steps: pd.DataFrame = _EMPTY_STEPS
        self.kpis: pd.DataFrame = _EMPTY_KPIS
        self.notes: tuple[Note, ...] = ()
        self.graphs: dict[str, dict] = {}  # digest -> the file's JSON
        self.tensor_files: dict[str, TensorFile] = {}  # name -> file, in sequence order
        # (table, rank) -> (the frame it was made from, its rows of that rank without the
        # rank column): Group.list_steps / read_kpis made them at every call (0.6 ms)
        self.rank_frames: dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]] = {}
        self.modules: list[ModuleInfo] | None = None
        self.modules_problem: str | None = None  # why modules.json cannot be used
        # Damaged files, "<kind>/<name>" -> (signature when found damaged, reason): looked
        # at again only when their size or modification time changes.
        self.damaged: dict[str, tuple[Signature | None, str]] = {}
        self.damaged_tensor_files: dict[str, TensorFile] = {}  # their step ranges
        # names read (or found damaged) per folder, with their sequence ranges
        self._seen: dict[str, dict[str, tuple[int, int]]] = {}
        self._seen_graphs: set[str] = set()
        self._info_signature: Signature | None = None
        self._modules_signature: Signature | None = None
        self._legacy_notes: list[Note] = []
        self._legacy_offset = 0
        self._shard_notes: list[tuple[str, float, int | None, int]] = []

    @property
    def trial_id(self) -> str:
        return self.layout.trial_id

    @property
    def path(self) -> Path:
        return self.layout.root

    def steps_holding(self, step: int) -> list[TensorFile]:
        return [f for f in self.tensor_files.values() if f.serves(step)]

    def damage_of(self, kind: str, name: str) -> str | None:
        entry = self.damaged.get(f"{kind}/{name}")
        return None if entry is None else entry[1]


@dataclass
class Update:
    """What one :meth:`GroupIndex.update` changed, for the provider's cache."""

    report: RefreshReport
    listing: GroupListing | None = None  # what the update listed (the others read it too)
    forgotten_trials: list[str] = field(default_factory=list)  # deleted folders
    gone_files: list[tuple[str, str]] = field(default_factory=list)  # (trial, tensors file)
    repaired: list[tuple[str, int, int]] = field(default_factory=list)  # (trial, steps lo, hi)


class GroupIndex:
    """The index of every trial of a group folder; :meth:`update` reads what is new."""

    def __init__(self, path: Path, files: Files | None = None):
        self.path = Path(path)
        # Every listing and read goes through it: the local disk or an object store
        # (one prefix listing per folder and refresh there, docs/FORMAT.md).
        self.files = files or files_for(path)
        self.version = 0  # grows whenever an update (or a read) found something new
        #: What the last update listed, each folder once (query/listing.py): the watch()
        #: and metrics tables take their shard names from it too.
        self.listing = GroupListing(self.path, self.files)
        self._trials: dict[str, TrialIndex] = {}
        self._skipped: dict[str, SkippedFile] = {}  # path -> why, each problem once
        # trial folders whose trial.json could not be used -> its signature then
        self._rejected: dict[str, Signature | None] = {}
        self.lock = threading.RLock()
        # the skipped files have a lock of their own: a reader asks for them (the GUI's
        # status) while a long first update holds ``lock``
        self._skipped_lock = threading.Lock()
        # sha256 of a graph file's bytes -> its JSON, parsed and checked (shared, never
        # changed: trials of one model write the same graph files)
        self._checked_graphs: dict[bytes, Any] = {}
        #: (new trials indexed, new trials found) while an update indexes trials it had
        #: not seen; None otherwise. A trial is listed by :meth:`trials` once its first
        #: update is complete, so a reader sees the indexed ones while the rest are read.
        self.progress: tuple[int, int] | None = None

    # ----- what is indexed ---------------------------------------------------------------

    def trial(self, trial_id: str) -> TrialIndex:
        trial = self._trials.get(trial_id)
        if trial is None:
            known = ", ".join(sorted(self._trials)) or "none"
            raise NotFoundError(
                f"no trial {trial_id!r} in {self.path} (trials: {known}); a trial written "
                "since the last refresh() shows after the next one")
        return trial

    def trials(self) -> list[TrialIndex]:
        trials = dict(self._trials)  # a copy: an update in another thread adds to it
        return [t for _, t in sorted(trials.items()) if t.info is not None]

    @property
    def skipped(self) -> list[SkippedFile]:
        with self._skipped_lock:
            return list(self._skipped.values())

    # ----- problems ----------------------------------------------------------------------

    def _skip(self, path: Path, reason: str, report: list[SkippedFile] | None) -> bool:
        """Note a problem; True (and in ``report``) only the first time, or when the
        reason changed."""
        entry = SkippedFile(str(path), reason)
        with self._skipped_lock:
            if self._skipped.get(entry.path) == entry:
                return False
            self._skipped[entry.path] = entry
        if report is not None:
            report.append(entry)
        return True

    def _unskip(self, path: Path) -> bool:
        with self._skipped_lock:
            return self._skipped.pop(str(path), None) is not None

    def _forget_skipped(self, folder: Path) -> None:
        prefix = str(folder) + os.sep
        with self._skipped_lock:
            for path in [p for p in self._skipped if p.startswith(prefix)]:
                del self._skipped[path]

    def _damaged(self, trial: TrialIndex, key: str, reason: str,
                 report: list[SkippedFile] | None) -> bool:
        """A file of ``trial`` (``key`` = "<kind>/<name>") is damaged: note it there and in
        :attr:`skipped`."""
        path = trial.path / key
        trial.damaged[key] = (self.files.signature(path), reason)
        return self._skip(path, reason, report)

    def _recheck_damaged(self, trial: TrialIndex, kind: str, live: list[str] | None) -> list[str]:
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
            if self.files.signature(trial.path / key) != trial.damaged[key][0]:
                del trial.damaged[key]
                trial.damaged_tensor_files.pop(name, None)
                again.append(name)
        return again

    def read_failed(self, trial: TrialIndex, f: TensorFile, exc: BaseException) -> None:
        """A tensors shard failed to read (damaged after it was indexed, e.g. rewritten in
        place): leave it out from now on and report it, once (the version grows, so that
        a GUI polling it shows the report)."""
        with self.lock:
            if trial.tensor_files.get(f.name) is f:
                files = dict(trial.tensor_files)
                del files[f.name]
                trial.tensor_files = files
            trial.damaged_tensor_files[f.name] = f
            if self._damaged(trial, f"tensors/{f.name}", f"unreadable shard ({reason_of(exc)})",
                             None):
                self.version += 1
                log.warning("skipping damaged file %s: %s", f.path, reason_of(exc))

    def replacement(self, trial: TrialIndex, gone: TensorFile) -> TensorFile | None:
        """The file that holds ``gone``'s rows now that a compaction deleted it, or None.

        Not an update: it serves the same steps as the files it stands in for (the
        compact file may hold later steps too; the next update indexes them).
        """
        with self.lock:
            current = trial.tensor_files.get(gone.name)
            if current is not None and current is not gone:
                return current  # an update indexed it again
            if current is None:  # another read found its replacement already
                rng = shard_range(gone.name)
                return next((f for f in trial.tensor_files.values()
                             if _covers(shard_range(f.name), rng)), None)
            folder = trial.layout.table("tensors")
            live = live_now(self.files, folder)
            files = {n: f for n, f in trial.tensor_files.items() if n in live}
            gone_files = [f for n, f in trial.tensor_files.items() if n not in live]
            found = None
            for name in live:
                a, b = shard_range(name)
                covered = [f for f in gone_files if _covers((a, b), shard_range(f.name))]
                if not covered:
                    continue
                try:
                    lo, hi = step_range(self.files.parquet_metadata(folder / name))
                except Exception:  # noqa: BLE001, S112 - the next update reports it
                    continue
                first = min(f.served[0] for f in covered)
                last = max(f.served[1] for f in covered)
                old = files.get(name)
                if old is not None:  # an update indexed it: it serves what it served
                    first, last = min(first, old.served[0]), max(last, old.served[1])
                files[name] = TensorFile(folder / name, lo, hi, first, last)
                if gone in covered:
                    found = files[name]
            trial.tensor_files = dict(sorted(files.items(), key=lambda kv: shard_range(kv[0])))
            return found

    # ----- the update --------------------------------------------------------------------

    def update(self) -> Update:
        """Read what appeared since the last update; cheap when nothing did."""
        with self.lock:
            new_trials: list[str] = []
            changed: dict[str, TrialChange] = {}
            skipped: list[SkippedFile] = []
            self.listing = listing = GroupListing(self.path, self.files)
            update = Update(RefreshReport(0, [], {}, []), listing)
            folder = listing.trials
            names = listing.trial_folders()
            links = listing.links(folder)
            for name in links:  # a linked trial folder is not one of the group's trials
                if not is_hidden(name):
                    self._skip(folder / name, LINK_REASON, skipped)
            names = [n for n in names if n not in links]
            fresh: list[tuple[str, TrialIndex]] = []
            unseen = sum(1 for n in names if n not in self._trials and n not in self._rejected
                         and not is_hidden(n))
            if unseen:  # their trial.json is read first
                self.progress = (0, unseen)
            for name in names:
                if is_hidden(name) or not TRIAL_ID_PATTERN.match(name):
                    continue
                trial = self._trials.get(name)
                if trial is None:
                    # A trial.json that could not be used is looked at again only when
                    # it changes (it was reported once already).
                    info_path = folder / name / TRIAL_JSON
                    if (name in self._rejected
                            and self._rejected[name] == self.files.signature(info_path)):
                        continue
                    trial = TrialIndex(folder / name)
                    if not self._update_info(trial, skipped):
                        self._rejected[name] = trial._info_signature
                        continue
                    self._rejected.pop(name, None)
                    fresh.append((name, trial))
                    continue
                change = self._update_trial(trial, skipped, update)
                if change is not None:
                    changed[name] = change
            try:
                self._index_new(fresh, skipped, update, new_trials)
            finally:
                self.progress = None
            for name in list(self._trials) + list(self._rejected):
                if name not in names:  # deleted (e.g. replaced by a new run)
                    self._rejected.pop(name, None)
                    self._forget_skipped(folder / name)
                    if self._trials.pop(name, None) is not None:
                        update.forgotten_trials.append(name)
                        changed[name] = TrialChange(status_changed=True)
            if new_trials or changed or skipped:
                self.version += 1
            update.report = RefreshReport(self.version, new_trials, changed, skipped)
            return update

    def _index_new(self, fresh: list[tuple[str, TrialIndex]], skipped: list[SkippedFile],
                   update: Update, new_trials: list[str]) -> None:
        """The first update of trials not seen before; each is listed once complete (a
        reader in another thread sees whole trials), and :attr:`progress` counts them.
        (Reading them in 4 threads was no faster on a local disk: the pandas work of a
        small trial holds the GIL.)"""
        self.progress = (0, len(fresh))
        for count, (name, trial) in enumerate(fresh, 1):
            self._update_trial(trial, skipped, update)
            self._trials[name] = trial
            new_trials.append(name)
            self.progress = (count, len(fresh))

    def _update_info(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        """Read trial.json if it changed; whether the trial can be shown."""
        path = trial.layout.trial_json
        sig = self.files.signature(path)
        if sig is None or sig == trial._info_signature:
            return trial.info is not None  # not written yet, or read already
        trial._info_signature = sig
        try:
            data = self.files.read_json(path)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
            version = int(data["schema_version"])
            named = data.get("trial_id", trial.trial_id)
            info = TrialInfo(
                # the folder name is the trial's identity: a renamed (copied) trial folder
                # is listed, opened and read under its new name
                trial_id=trial.trial_id,
                status=str(data.get("status", "")),
                created=float(data.get("created") or 0.0), schema_version=version,
                settings=dict(data.get("settings") or {}),
                versions=dict(data.get("versions") or {}),
                config=read_config(data),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            reason = f"unreadable {TRIAL_JSON} ({reason_of(e)})"
            if isinstance(e, KeyError):
                reason = f"unreadable {TRIAL_JSON} (no {e} field)"
            self._skip(path, reason, skipped)
            return trial.info is not None  # a trial already shown keeps what it had
        if version > SCHEMA_VERSION:
            self._skip(path, f"written with storage format {version}, this version reads up to "
                             f"{SCHEMA_VERSION}: upgrade comgra_like", skipped)
            return False
        self._unskip(path)
        if named != trial.trial_id:
            self._skip(path, f"names the trial {str(named)!r}, but its folder is "
                             f"{trial.trial_id!r} (renamed or copied): the trial is listed and "
                             f"opened as {trial.trial_id!r}; nothing of it is left out",
                       skipped)
        trial.info = info
        return True

    def _update_trial(self, trial: TrialIndex, skipped: list[SkippedFile],
                      update: Update) -> TrialChange | None:
        old_status = trial.info.status if trial.info else None
        for name in self.listing.links(trial.path):  # every access refuses them: say so
            self._skip(trial.path / name, LINK_REASON, skipped)
        self._update_info(trial, skipped)
        status_changed = trial.info is not None and trial.info.status != old_status
        # Steps first: the writer renames a step's tensors (and graphs) before its steps
        # shard, so every step this update lists has them indexed below.
        new_steps = self._update_steps(trial, skipped)
        kpis_changed = self._update_kpis(trial, skipped)
        repaired = self._update_tensor_files(trial, skipped, update)
        new_graphs = self._update_graphs(trial, skipped)
        notes_changed = self._update_notes(trial, skipped)
        modules_changed = self._update_modules(trial, skipped)
        if (new_steps or new_graphs or kpis_changed or notes_changed or status_changed
                or repaired or modules_changed):
            return TrialChange(new_steps, new_graphs, kpis_changed, notes_changed,
                               status_changed, repaired, modules_changed)
        return None

    # ----- shard tables (steps, kpis, notes) ---------------------------------------------

    def _live(self, folder: Path) -> list[str] | None:
        names = self.listing.names(folder)
        if not names:
            return None  # not there (yet): an object store has no empty folders
        return live_shards(names)

    def _new_frames(self, trial: TrialIndex, kind: str, schema: pa.Schema,
                    skipped: list[SkippedFile]) -> tuple[list[tuple[str, pd.DataFrame]], bool]:
        """The rows of a table's files not read before, by file in sequence order, and
        whether they are the whole table (a compaction merged rows read before with
        rows never read: everything live is read again)."""
        folder = trial.layout.table(kind)
        live = self._live(folder)
        again = self._recheck_damaged(trial, kind, live)
        if live is None:
            return [], False
        seen = trial._seen.setdefault(kind, {})
        for name in again:
            seen.pop(name, None)
        new = [n for n in live if n not in seen]
        if not new:
            return [], False
        whole = any(_overlaps_partly(shard_range(n), seen.values()) for n in new)
        if whole:
            seen.clear()
            new = live
        frames = []
        for name in new:
            rng = shard_range(name)
            covered = _covered_by(rng, seen.values())
            seen[name] = rng
            if covered:
                continue  # a compaction of rows read already
            path = folder / name
            try:
                table = self.files.read_parquet(path, schema=schema)
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                self._damaged(trial, f"{kind}/{name}", f"unreadable shard ({reason_of(e)})",
                              skipped)
                continue
            self._unskip(path)
            if "trial_id" in table.column_names:
                table = table.drop_columns(["trial_id"])  # cheaper than the frame's drop
            frame = to_pandas(table)
            frame[RANK] = shard_rank(name)
            frames.append((name, frame))
        return frames, whole

    def _update_steps(self, trial: TrialIndex, skipped: list[SkippedFile]) -> list[int]:
        """New rows of the steps table; the training steps that got new rows."""
        frames, whole = self._new_frames(trial, "steps", SCHEMAS["steps"], skipped)
        if not frames:
            if whole:
                trial.steps = _EMPTY_STEPS
            return []
        before = _EMPTY_STEPS if whole else trial.steps
        parts = [before] + [f for _, f in frames]
        source = np.repeat(np.arange(-1, len(frames)), [len(p) for p in parts])
        # one frame alone is not concatenated (the first read of most trials)
        filled = [p for p in parts if len(p)]
        combined = (filled[0].reset_index(drop=True) if len(filled) == 1
                    else pd.concat(parts, ignore_index=True))
        repeated = combined.duplicated(RANK_STEP_KEY, keep="first").to_numpy()
        if repeated.any():
            for i in np.unique(source[repeated]):
                name = frames[i][0]
                rows = combined[repeated & (source == i)]
                self._report_duplicates(trial, name, rows, skipped)
            combined = combined[~repeated]
            source = source[~repeated]
        if whole:
            old = trial.steps
            known = pd.MultiIndex.from_frame(old[RANK_STEP_KEY]) if len(old) else None
            fresh = combined if known is None else combined[
                ~pd.MultiIndex.from_frame(combined[RANK_STEP_KEY]).isin(known)]
        else:
            fresh = combined[source >= 0]
        trial.steps = combined.sort_values(RANK_STEP_KEY, kind="stable").reset_index(drop=True)
        return sorted({int(s) for s in fresh["training_step"]})

    def _report_duplicates(self, trial: TrialIndex, name: str, rows: pd.DataFrame,
                           skipped: list[SkippedFile]) -> None:
        pairs = list(zip(rows["training_step"].tolist(), rows["iteration"].tolist()))
        named = ", ".join(f"step {s} iteration {i}" for s, i in pairs[:_NAMED_DUPLICATES])
        if len(pairs) > _NAMED_DUPLICATES:
            named += f" and {len(pairs) - _NAMED_DUPLICATES} more"
        reason = (f"{len(pairs)} recorded step rows ({named}) repeat rows read from "
                  "another file and were left out, the first kept: two recorders wrote this "
                  "trial; record each run under its own trial id")
        path = trial.layout.table("steps") / name
        if self._skip(path, reason, skipped):
            log.warning("%s: %s", path, reason)

    def _update_kpis(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        frames, whole = self._new_frames(trial, "kpis", SCHEMAS["kpis"], skipped)
        if not frames:
            if whole and len(trial.kpis):
                trial.kpis = _EMPTY_KPIS
                return True
            return False
        before = _EMPTY_KPIS if whole else trial.kpis
        parts = [p for p in [before] + [f for _, f in frames] if len(p)]
        if not parts:
            changed = len(trial.kpis) > 0
            trial.kpis = _EMPTY_KPIS
            return changed or bool(frames)
        combined = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        trial.kpis = (combined.drop_duplicates(subset=[*KPI_KEY, RANK])
                      .sort_values("timepoint", kind="stable").reset_index(drop=True))
        return True

    def _update_notes(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        legacy = self._update_legacy_notes(trial)
        frames, whole = self._new_frames(trial, NOTES_DIR, NOTES_SCHEMA, skipped)
        if whole:
            trial._shard_notes = []
        for _, frame in frames:
            steps = frame["training_step"].tolist()
            trial._shard_notes.extend(
                (str(text), float(wall_time), None if pd.isna(step) else int(step), int(rank))
                for text, wall_time, step, rank in zip(frame["text"], frame["wall_time"], steps,
                                                       frame[RANK]))
        if not (legacy or frames or whole):
            return False
        notes = list(trial._legacy_notes)
        notes += [Note(len(notes) + i, text, wall_time, step, rank)
                  for i, (text, wall_time, step, rank) in enumerate(trial._shard_notes)]
        changed = tuple(notes) != trial.notes
        trial.notes = tuple(notes)
        return changed

    def _update_legacy_notes(self, trial: TrialIndex) -> bool:
        """Lines appended to notes.jsonl since the last update (complete lines only)."""
        path = trial.path / LEGACY_NOTES_JSONL
        if self.files.remote:
            return False  # written before notes were shards, never to object storage
        if self.files.refusal(path) is not None:
            return False  # a link (reported with the trial folder's links)
        try:
            size = path.stat().st_size
        except OSError:
            return False
        if size <= trial._legacy_offset:
            return False
        with open(path, "rb") as f:
            f.seek(trial._legacy_offset)
            data = f.read(size - trial._legacy_offset)
        end = data.rfind(b"\n")
        if end < 0:
            return False  # a line still being written
        trial._legacy_offset += end + 1
        notes = trial._legacy_notes
        for line in data[: end + 1].splitlines():
            try:
                obj = json.loads(line)
                step = obj.get("training_step")
                notes.append(Note(len(notes), str(obj.get("text", "")),
                                  float(obj.get("wall_time") or 0.0),
                                  None if step is None else int(step)))
            except (ValueError, TypeError, AttributeError):  # not a note object: show the line
                notes.append(Note(len(notes), line.decode("utf-8", "replace"), 0.0))
        return True

    # ----- tensors (footers only), graphs, modules ---------------------------------------

    def _update_tensor_files(self, trial: TrialIndex, skipped: list[SkippedFile],
                             update: Update) -> int:
        """Index new tensors shards by their step range; how many damaged ones were
        repaired since."""
        folder = trial.layout.table("tensors")
        live = self._live(folder)
        again = self._recheck_damaged(trial, "tensors", live)
        if live is None:
            return 0
        seen = trial._seen.setdefault("tensors", {})
        for name in again:
            seen.pop(name, None)
        files = trial.tensor_files
        gone = [n for n in files if n not in live]  # a compaction replaced them
        new = [n for n in live if n not in seen]
        if not (gone or new):
            return 0
        files = {n: f for n, f in files.items() if n in live}
        update.gone_files.extend((trial.trial_id, n) for n in gone)
        repaired = 0
        for name in new:
            path = folder / name
            seen[name] = shard_range(name)
            try:
                lo, hi = step_range(self.files.parquet_metadata(path))
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                self._damaged(trial, f"tensors/{name}", f"unreadable shard ({reason_of(e)})",
                              skipped)
                files.pop(name, None)
                continue
            files[name] = TensorFile(path, lo, hi)
            if self._unskip(path):  # repaired: steps read without it read again
                repaired += 1
                update.repaired.append((trial.trial_id, lo, hi))
        trial.tensor_files = dict(sorted(files.items(), key=lambda kv: shard_range(kv[0])))
        return repaired

    def _update_graphs(self, trial: TrialIndex, skipped: list[SkippedFile]) -> int:
        folder = trial.layout.graphs
        names = [n for n in self.listing.names(folder) if n.endswith(".json")]
        if not names:
            return 0
        for name in self._recheck_damaged(trial, "graphs", names):
            trial._seen_graphs.discard(name)
        new = {}
        for name in names:
            if name in trial._seen_graphs:
                continue
            trial._seen_graphs.add(name)
            path = folder / name
            digest = name[: -len(".json")]
            try:
                raw = self.files.read_bytes(path)
            except OSError as e:
                self._damaged(trial, f"graphs/{name}", f"unreadable graph ({reason_of(e)})",
                              skipped)
                continue
            # Trials of one model write the same graph files: a file whose bytes were
            # parsed and checked before (in any trial) is not parsed again (checking
            # 4,200 graphs took 6.4 of the 10.5 s that 200 trials took to index).
            key = hashlib.sha256(raw).digest()
            structure = self._checked_graphs.get(key)
            if structure is None:
                try:
                    structure = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    self._damaged(trial, f"graphs/{name}", f"unreadable graph ({reason_of(e)})",
                                  skipped)
                    continue
                try:
                    parse_graph(digest, 0, structure)
                except GraphStructureError as e:
                    self._damaged(trial, f"graphs/{name}",
                                  f"graph of the wrong structure ({e})", skipped)
                    continue
                if len(self._checked_graphs) >= CHECKED_GRAPHS:
                    self._checked_graphs.clear()
                self._checked_graphs[key] = structure
            self._unskip(path)
            new[digest] = structure
        if new:
            trial.graphs = {**trial.graphs, **new}
        return len(new)

    def _update_modules(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        """Read modules.json if it changed; whether the module tree did."""
        path = trial.layout.modules_json
        sig = self.files.signature(path)
        if sig == trial._modules_signature:
            return False
        trial._modules_signature = sig
        if sig is None:  # not written yet, or deleted
            changed = trial.modules is not None
            trial.modules, trial.modules_problem = None, None
            return changed
        try:
            data = self.files.read_json(path)
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
            reason = f"unreadable {MODULES_JSON} ({reason_of(e)})"
            trial.modules, trial.modules_problem = None, reason
            self._damaged(trial, MODULES_JSON, reason, skipped)
            return True
        trial.damaged.pop(MODULES_JSON, None)
        self._unskip(path)
        trial.modules, trial.modules_problem = modules, None
        return True


def _covers(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _covered_by(rng: tuple[int, int], seen: Iterable[tuple[int, int]]) -> bool:
    """Whether every sequence number of ``rng`` is in a range read already."""
    inside = sorted(r for r in seen if r[1] >= rng[0] and r[0] <= rng[1])
    expect = rng[0]
    for a, b in inside:
        if a > expect:
            return False
        expect = max(expect, b + 1)
    return expect > rng[1]


def _overlaps_partly(rng: tuple[int, int], seen: Iterable[Any]) -> bool:
    """Whether ``rng`` shares sequence numbers with ranges read already without being
    covered by them."""
    seen = list(seen)
    return (any(r[1] >= rng[0] and r[0] <= rng[1] for r in seen)
            and not _covered_by(rng, seen))


def graph_key(digest: str) -> str:
    """The key of a graph file in :attr:`TrialIndex.damaged`."""
    return f"graphs/{graph_name(digest)}"
