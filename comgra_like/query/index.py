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
- A file or folder that cannot be read *now* (the store does not answer: connection
  errors, timeouts, 5xx, I/O errors; ``format.files.unreachable``) is neither absent nor
  damaged: nothing is rejected, forgotten or marked damaged for it. What was known stays
  (a listed trial keeps its info), it is reported once as "could not be read now", and
  it is read again at the next update; the report ends once it reads.

The index holds metadata only: trial info, steps, KPIs, notes, graph structures,
modules, and which tensors shard holds which steps. The provider reads values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import NotFoundError
from ..format.files import Files, StoreUnreachable, files_for, unreachable
from ..format.layout import MODULES_JSON, TRIAL_JSON, is_hidden, shard_range
from ..format.schema import SCHEMA_VERSION, TRIAL_ID_PATTERN
from ..format.trial_config import read_config
from .graphs import GraphStructureError, parse_graph
from .index_tables import ShardTables
from .listing import GroupListing, live_now
from .trial_index import (
    CHECKED_GRAPHS,
    LINK_REASON,
    Signature,
    TensorFile,
    TrialIndex,
    Update,
    covers,
    reason_of,
    step_range,
)
from .types import (
    ModuleInfo,
    ParameterInfo,
    RefreshReport,
    SkippedFile,
    TrialChange,
    TrialInfo,
)

#: What :meth:`GroupIndex._signature_now` answers when the store could not be asked now.
NOT_NOW = object()

log = logging.getLogger("comgra_like")


class GroupIndex(ShardTables):
    """The index of every trial of a group folder; :meth:`update` reads what is new.

    This module has the update, trial.json, graphs, modules.json and the reports of
    damaged files; the shard tables (steps, KPIs, notes, tensors footers) are
    :class:`~comgra_like.query.index_tables.ShardTables`'."""

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
        # the skipped paths that could not be read now (not damaged): read again at the
        # next update, their report ends once they read; those a value read found
        # (tensors shards) end at the next update that reaches the store
        self._unreachable: set[str] = set()
        self._read_outages: set[str] = set()
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
            self._unreachable.discard(entry.path)
            self._read_outages.discard(entry.path)
            if self._skipped.get(entry.path) == entry:
                return False
            self._skipped[entry.path] = entry
        if report is not None:
            report.append(entry)
        return True

    def _unskip(self, path: Path) -> bool:
        key = str(path)
        with self._skipped_lock:
            self._unreachable.discard(key)
            self._read_outages.discard(key)
            return self._skipped.pop(key, None) is not None

    def _forget_skipped(self, folder: Path) -> None:
        prefix = str(folder) + os.sep
        with self._skipped_lock:
            for path in [p for p in self._skipped if p.startswith(prefix)]:
                del self._skipped[path]
                self._unreachable.discard(path)
                self._read_outages.discard(path)

    def _signature_now(self, path: Path, report: list[SkippedFile] | None = None) -> Any:
        """``path``'s signature (None: not there), or :data:`NOT_NOW` when the store could
        not be asked now (reported in ``report`` when given, as :meth:`_cannot_read_now`)."""
        try:
            return self.files.signature_now(path)
        except OSError as e:
            if not unreachable(e):
                raise
            if report is not None:
                self._cannot_read_now(path, e, report)
            return NOT_NOW

    def _cannot_read_now(self, path: Path, exc: BaseException,
                         report: list[SkippedFile] | None, *, by_read: bool = False) -> bool:
        """``path`` could not be read now (:func:`~comgra_like.format.files.unreachable`):
        reported once while it stays so (True then), never marked damaged; the caller
        keeps what it knew and the next update reads it again."""
        key = str(path)
        with self._skipped_lock:
            if key in self._unreachable or key in self._skipped:
                return False  # said already (or reported as damaged: that report stands)
        reason = (f"could not be read now ({reason_of(exc)}); nothing of it is left out "
                  "for good: it is read again at the next refresh")
        self._skip(path, reason, report)
        with self._skipped_lock:
            self._unreachable.add(key)
            if by_read:
                self._read_outages.add(key)
        log.warning("could not read %s now (read again at the next refresh): %s", path,
                    reason_of(exc))
        return True

    def _reached(self, path: Path) -> None:
        """``path`` was looked at or read: a report that it could not be, ends."""
        if self._unreachable and str(path) in self._unreachable:
            self._unskip(path)

    @property
    def unreachable(self) -> list[SkippedFile]:
        """The files and folders the last updates (or value reads) could not read now and
        have not read since: a part of :attr:`skipped`."""
        with self._skipped_lock:
            return [self._skipped[p] for p in sorted(self._unreachable) if p in self._skipped]

    def raise_if_unreachable(self) -> None:
        """StoreUnreachable naming what could not be read now, if anything: what a fresh
        ``open_group`` raises rather than list a group with parts left out."""
        missing = self.unreachable
        if not missing:
            return
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise StoreUnreachable(
            f"{self.files.display(self.path)} could not be read whole: "
            f"{self.files.display(missing[0].path)}"
            f"{more} {missing[0].reason.split(';')[0]}; open it again once the store "
            "answers (an open Group's refresh() reads them then)")

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
            now = self._signature_now(trial.path / key)
            if now is NOT_NOW:
                continue  # not looked at now: as it was
            if now != trial.damaged[key][0]:
                del trial.damaged[key]
                trial.damaged_tensor_files.pop(name, None)
                again.append(name)
        return again

    def read_unreachable(self, f: TensorFile, exc: BaseException) -> None:
        """A tensors shard could not be read now (not damaged): reported once, until the
        next update that reaches the store (the version grows, so that a GUI polling it
        shows the report); the read raises, and the next one tries again."""
        with self.lock:
            if self._cannot_read_now(f.path, exc, None, by_read=True):
                self.version += 1

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
                             if covers(shard_range(f.name), rng)), None)
            folder = trial.layout.table("tensors")
            live = live_now(self.files, folder)
            files = {n: f for n, f in trial.tensor_files.items() if n in live}
            gone_files = [f for n, f in trial.tensor_files.items() if n not in live]
            found = None
            for name in live:
                a, b = shard_range(name)
                covered = [f for f in gone_files if covers((a, b), shard_range(f.name))]
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
            listing = GroupListing(self.path, self.files)
            # StoreUnreachable when the trials folder cannot be listed now: raised before
            # anything changed, so no trial is forgotten (the next update lists again)
            names = listing.trial_folders()
            self.listing = listing
            with self._skipped_lock:
                reported = set(self._unreachable)
                # what value reads could not read: the store answered the listing now;
                # the next read tries again (and reports again if it fails)
                outages, self._read_outages = self._read_outages, set()
            for path in outages:
                self._unskip(Path(path))
            update = Update(RefreshReport(0, [], {}, []), listing)
            folder = listing.trials
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
                    if name in self._rejected:
                        now = self._signature_now(info_path)
                        if now is NOT_NOW or now == self._rejected[name]:
                            continue  # as it was (not looked at now: at the next update)
                    trial = TrialIndex(folder / name)
                    if not self._update_info(trial, skipped):
                        if str(info_path) not in self._unreachable:
                            self._rejected[name] = trial.info_signature
                        # else: not read now (reported); read again at the next update
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
            with self._skipped_lock:
                ended = bool(reported - self._unreachable) or bool(outages)
            if new_trials or changed or skipped or ended:
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
        sig = self._signature_now(path, skipped)
        if sig is NOT_NOW:  # not "not written yet": a trial already shown keeps its info
            return trial.info is not None
        if sig is None or sig == trial.info_signature:
            self._reached(path)
            return trial.info is not None  # not written yet, or read already
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
            if unreachable(e):
                # not damaged: the signature is not kept, the next update reads it again
                self._cannot_read_now(path, e, skipped)
                return trial.info is not None  # a trial already shown keeps its info
            trial.info_signature = sig
            reason = f"unreadable {TRIAL_JSON} ({reason_of(e)})"
            if isinstance(e, KeyError):
                reason = f"unreadable {TRIAL_JSON} (no {e} field)"
            self._skip(path, reason, skipped)
            return trial.info is not None  # a trial already shown keeps what it had
        trial.info_signature = sig
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

    # ----- graphs, modules ----------------------------------------------------------------

    def _update_graphs(self, trial: TrialIndex, skipped: list[SkippedFile]) -> int:
        folder = trial.layout.graphs
        listed = self._listed(folder, skipped)
        names = [n for n in listed or () if n.endswith(".json")]
        if not names:
            return 0
        for name in self._recheck_damaged(trial, "graphs", names):
            trial.seen_graphs.discard(name)
        new = {}
        for name in names:
            if name in trial.seen_graphs:
                continue
            trial.seen_graphs.add(name)
            path = folder / name
            digest = name[: -len(".json")]
            try:
                raw = self.files.read_bytes(path)
            except OSError as e:
                if unreachable(e):  # not read now: the next update reads it again
                    trial.seen_graphs.discard(name)
                    self._cannot_read_now(path, e, skipped)
                    break
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
        sig = self._signature_now(path, skipped)
        if sig is NOT_NOW:
            return False  # the module tree known stays
        if sig == trial.modules_signature:
            self._reached(path)
            return False
        if sig is None:  # not written yet, or deleted
            trial.modules_signature = sig
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
            if unreachable(e):
                self._cannot_read_now(path, e, skipped)
                return False  # the signature is not kept: read again at the next update
            trial.modules_signature = sig
            reason = f"unreadable {MODULES_JSON} ({reason_of(e)})"
            trial.modules, trial.modules_problem = None, reason
            self._damaged(trial, MODULES_JSON, reason, skipped)
            return True
        trial.modules_signature = sig
        trial.damaged.pop(MODULES_JSON, None)
        self._unskip(path)
        trial.modules, trial.modules_problem = modules, None
        return True
