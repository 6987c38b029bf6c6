"""The files of a group that a whole-group reader reads (no DuckDB needed): the trials
shown, each table's live shards with their columns, the damaged files left out. A file
the store could not be read now is neither damaged nor absent: the look raises
StoreUnreachable (a StorageError) and nothing is remembered of it. The SQL
views (``query/sql.py``) and the Spark data source (``query/spark.py``) are built on one
:meth:`GroupFiles.list`; it looks at the group through the query API's listing seam
(``query/listing.py``), each folder once with its objects' signatures.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import NotFoundError
from ..format.files import Files, StoreUnreachable, files_for, unreachable
from ..format.layout import (
    LEGACY_NOTES_JSONL,
    NOTES_DIR,
    STEPS,
    TABLES,
    TrialLayout,
    is_hidden,
    live_shards,
    shard_rank,
)
from ..format.schema import OLD_COLUMN_NAMES, SCHEMA_VERSION, SHARD_SCHEMAS, TRIAL_ID_PATTERN
from ..format.trial_config import read_config
from .listing import GroupListing
from .trial_index import reason_of
from .types import SkippedFile

log = logging.getLogger("comgra_like")

#: The views over the shards of every trial: the tables of ``format/layout.py`` and the
#: notes. A table added there (histograms, metrics, ...) becomes a view of the same name.
SHARD_TABLES: tuple[str, ...] = (*TABLES, NOTES_DIR)
# Footers read at once when an object store is listed (each one request, latency-bound).
_REMOTE_CHECKS = 16


@dataclass(frozen=True)
class Shard:
    """A live shard of one table of one trial that a whole-group reader reads."""

    trial_id: str
    table: str
    path: str  # as messages and ``skipped`` name it: a local path, or s3://bucket/key
    location: str  # for the filesystem seam (an object's ``s3:/bucket/key``)
    name_rank: int  # the rank in the file's name, 0 without one
    size: int = field(compare=False, default=0)  # bytes, from the listing
    # The file's columns (from its footer, read when it was checked)
    schema: pa.Schema = field(compare=False, repr=False, default=None)


@dataclass
class FilesListing:
    """What one look at the group found: the trials, the shards to read, the problems."""

    trials: list[dict]
    shards: dict[str, list[Shard]]  # table -> shards, trial by trial, in sequence order
    legacy_notes: list[dict]
    skipped: dict[str, SkippedFile]


class GroupFiles:
    """The files of a group a reader should read (no DuckDB needed): the trials shown,
    each table's live shards, the damaged files left out. A file's check is cached by
    its signature (shards are never modified, so a good file is checked once).

    The group may be a folder or an ``s3://bucket/prefix/group`` location: everything is
    listed and read through the filesystem seam (``format.files.files_for``), so both
    follow the same rules. On an object store the listing of a table folder gives each
    object's signature, and the footers of new objects are read in parallel.
    """

    def __init__(self, group_path: str | os.PathLike):
        self.files: Files = files_for(group_path)
        if self.files.remote:
            self.path = Path(str(group_path))
            self.display = self.files.display(self.path)
            if not self.files.is_dir(self.path):
                raise NotFoundError(
                    f"nothing is stored under {self.display}; pass "
                    "s3://<bucket>/<prefix>/<group> with the comgra_root_path the recorder "
                    "wrote to (and the same AWS_* environment variables)")
        else:
            self.path = Path(os.path.abspath(group_path))
            self.display = str(self.path)
            if not self.path.is_dir():
                raise NotFoundError(
                    f"{self.path} is not a group folder; pass the folder "
                    "<comgra_root_path>/<group> that the recorder writes to")
        # location -> (signature, problem or None, the file's schema)
        self._checked: dict[str, tuple[Any, str | None, pa.Schema | None]] = {}
        self._lock = threading.Lock()

    def list(self) -> FilesListing:
        """Look at the group: its trials, the shards to read, the files left out."""
        skipped: dict[str, SkippedFile] = {}
        trials: list[dict] = []
        found: list[tuple[str, str, Path, Any]] = []  # (trial, table, location, signature)
        legacy: list[dict] = []
        # the query API's listing seam: each folder listed once, with its signatures
        listing = GroupListing(self.path, self.files)
        folder = listing.trials
        names = [n for n in listing.visible_trial_folders() if TRIAL_ID_PATTERN.match(n)]
        if self.files.remote and len(names) > 1:
            # a few requests per trial, each a round trip: the trials at once
            with ThreadPoolExecutor(max_workers=min(_REMOTE_CHECKS, len(names))) as pool:
                looked = list(pool.map(
                    lambda n: self._look(TrialLayout(folder / n), listing), names))
        else:
            looked = [self._look(TrialLayout(folder / n), listing) for n in names]
        for info, problems, listed, notes in looked:
            skipped.update(problems)
            if info is None:
                continue
            trials.append(info)
            found.extend(listed)
            legacy.extend(notes)
        shards: dict[str, list[Shard]] = {t: [] for t in SHARD_TABLES}
        for (trial_id, table, location, sig), (problem, schema) in zip(
                found, self._check_all(found)):
            shown = self.files.display(location)
            if problem is not None:
                skipped[shown] = SkippedFile(shown, problem)
                continue
            shards[table].append(Shard(trial_id, table, shown, str(location),
                                        shard_rank(location.name) or 0, sig[1], schema))
        return FilesListing(trials, shards, legacy, skipped)

    def _look(self, layout: TrialLayout, listing: GroupListing
              ) -> tuple[dict | None, dict[str, SkippedFile], list[tuple[str, str, Path, Any]],
                         list[dict]]:
        """One trial: its trials row (None: not shown), its problems, its live shards
        (trial, table, location, signature) and its legacy notes."""
        problems: dict[str, SkippedFile] = {}
        info = self._trial_info(layout, problems)
        if info is None:
            return None, problems, [], []
        found = []
        # Steps first: the writer renames a step's other shards before its steps
        # shard, so every step listed here has its tensors listed below.
        for table in sorted(SHARD_TABLES, key=lambda t: t != STEPS):
            where = layout.table(table)
            listed = listing.signatures(where)
            for shard in live_shards([n for n in listed if not is_hidden(n)]):
                found.append((layout.trial_id, table, where / shard, listed[shard]))
        return info, problems, found, self._legacy_notes(layout)

    def _trial_info(self, layout: TrialLayout, skipped: dict[str, SkippedFile]) -> dict | None:
        """The trials row of a trial, or None when it is not shown (as the query API:
        no trial.json yet, an unreadable one, or a newer storage format)."""
        path = layout.trial_json
        shown = self.files.display(path)
        try:
            if not self.files.exists(path):
                return None  # being created
            data = json.loads(self.files.read_bytes(path).decode("utf-8"))
            if not isinstance(data, dict):
                raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
            version = int(data["schema_version"])
        except FileNotFoundError:
            return None  # deleted while listed
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
            if unreachable(e):
                # not a trial to leave out of the answer without a word, nor a damaged
                # file: this look at the group fails, the next one reads it again
                raise _now(shown, e) from e
            skipped[shown] = SkippedFile(shown, f"unreadable trial.json ({reason_of(e)})")
            return None
        if version > SCHEMA_VERSION:
            skipped[shown] = SkippedFile(
                shown, f"written with storage format {version}, this version reads up to "
                       f"{SCHEMA_VERSION}: upgrade comgra_like")
            return None
        ended = data.get("ended")
        return {
            "trial_id": layout.trial_id, "status": str(data.get("status", "")),
            "created": float(data.get("created") or 0.0),
            "ended": None if ended is None else float(ended),
            "abort_reason": data.get("abort_reason"), "schema_version": version,
            "settings": json.dumps(data.get("settings") or {}, sort_keys=True),
            "versions": json.dumps(data.get("versions") or {}, sort_keys=True),
            "config": json.dumps(read_config(data), sort_keys=True),
        }

    def _check_all(self, found: list[tuple[str, str, Path, Any]]
                   ) -> list[tuple[str | None, pa.Schema | None]]:
        """(problem, schema) of each listed shard, in order. Footers not checked before
        are read in parallel on an object store (one request each, latency-bound)."""
        def check(item: tuple[str, str, Path, Any]) -> tuple[str | None, pa.Schema | None]:
            _, table, location, sig = item
            return self._problem(location, table, sig)

        new = sum(1 for item in found if self._known(str(item[2]), item[3]) is None)
        if self.files.remote and new > 1:
            with ThreadPoolExecutor(max_workers=min(_REMOTE_CHECKS, new)) as pool:
                return list(pool.map(check, found))
        return [check(item) for item in found]

    def _known(self, location: str, sig: Any) -> tuple[str | None, pa.Schema | None] | None:
        with self._lock:
            checked = self._checked.get(location)
        if checked is not None and checked[0] == sig:
            return checked[1], checked[2]
        return None

    def _problem(self, location: Path, table: str,
                 sig: Any) -> tuple[str | None, pa.Schema | None]:
        """Why a shard cannot be read (its footer is damaged, or it lacks columns of its
        table), or None; and its columns."""
        known = self._known(str(location), sig)
        if known is not None:
            return known
        problem, schema = None, None
        try:
            schema = self.files.parquet_metadata(location).schema.to_arrow_schema()
            expected = SHARD_SCHEMAS.get(table)
            # a column under its older name (format/schema.py OLD_COLUMN_NAMES) is there
            renamed = OLD_COLUMN_NAMES.get(table, {})
            present = {renamed.get(n, n) for n in schema.names}
            missing = ([] if expected is None
                       else [n for n in expected.names if n not in present])
            if missing:
                problem = f"not a {table} shard (no column {', '.join(missing)})"
        except Exception as e:  # any damage is reported, never fatal
            if unreachable(e):
                raise _now(self.files.display(location), e) from e  # not remembered
            problem = f"unreadable shard ({reason_of(e)})"
        with self._lock:
            before = self._checked.get(str(location))
            self._checked[str(location)] = (sig, problem, schema)
        if problem is not None and (before is None or before[1] != problem):
            log.warning("skipping damaged file %s: %s", self.files.display(location), problem)
        return problem, schema

    def mark_damaged(self, shard: Shard, exc: BaseException) -> None:
        """Leave ``shard`` out while its signature stays the same, because reading it
        raised ``exc``; StoreUnreachable instead when ``exc`` says the store could not be
        read now (nothing is marked: the next read tries it again)."""
        if unreachable(exc):
            raise _now(shard.path, exc) from exc
        reason = f"unreadable shard ({reason_of(exc)})"
        location = Path(shard.location)
        with self._lock:
            self._checked[shard.location] = (self.files.signature(location), reason, None)
        log.warning("skipping damaged file %s: %s", shard.path, reason)

    def read_whole(self, shard: Shard) -> None:
        """Read every page of a shard (raises what a damaged one raises)."""
        self.files.read_parquet(Path(shard.location))

    def exists(self, shard: Shard) -> bool:
        return self.files.exists(Path(shard.location))

    def _legacy_notes(self, layout: TrialLayout) -> list[dict]:
        """The notes of ``notes.jsonl`` (recordings made before notes were shards):
        complete lines only; a line that is no note object is shown as its text, as the
        query API."""
        try:
            data = self.files.read_bytes(layout.root / LEGACY_NOTES_JSONL)
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise _now(self.files.display(layout.root / LEGACY_NOTES_JSONL), e) from e
            return []
        return legacy_note_rows(layout.trial_id, data)


def _now(shown: str, exc: BaseException) -> StoreUnreachable:
    return StoreUnreachable(f"{shown} could not be read now ({reason_of(exc)}); nothing "
                            "was left out or marked damaged: try again when the store "
                            "answers")


def legacy_note_rows(trial_id: str, data: bytes) -> list[dict]:
    end = data.rfind(b"\n")
    rows = []
    for line in data[: end + 1].splitlines():
        try:
            obj = json.loads(line)
            step = obj.get("training_step")
            rows.append({"trial_id": trial_id, "text": str(obj.get("text", "")),
                         "wall_time": float(obj.get("wall_time") or 0.0),
                         "training_step": None if step is None else int(step)})
        except (ValueError, TypeError, AttributeError):
            rows.append({"trial_id": trial_id,
                         "text": line.decode("utf-8", "replace"), "wall_time": 0.0,
                         "training_step": None})
    return rows
