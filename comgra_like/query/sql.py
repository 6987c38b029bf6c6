"""SQL over every trial of a group, with DuckDB embedded (docs/QUERYING.md).

``sql(group, "SELECT ...")`` answers one query; ``connect(group)`` keeps the views for
many. Each table of a trial (``format.layout.TABLES`` and the notes) is one view over the
parquet shards of every trial, with ``trial_id`` (the trial's folder name) as the first
column; ``trials`` holds one row per trial from its ``trial.json``.

Only final names are read: hidden names (files being written) never, and of a table's
shards only those no compacted file supersedes (``layout.live_shards``), as the query API
does. A damaged file is left out and reported in :attr:`GroupSQL.skipped` (the query API's
``Group.skipped``), or raises a :class:`StorageError` with ``damaged="raise"``.

DuckDB is an optional dependency (``pip install comgra-like[sql]``), imported only when
a connection is made: the GUI, the rest of the query API and the writer never load it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format.layout import (
    LEGACY_NOTES_JSONL,
    NOTES_DIR,
    STEPS,
    TABLES,
    TrialLayout,
    is_hidden,
    live_shards,
    trials_dir,
)
from ..format.schema import (
    FILE_SCHEMAS,
    RANK,
    RANK_FIELD,
    SCHEMA_VERSION,
    SHARD_SCHEMAS,
    TRIAL_ID_PATTERN,
)
from .index import reason_of, signature
from .types import SkippedFile

log = logging.getLogger("comgra_like")

#: The views over the shards of every trial: the tables of ``format/layout.py`` and the
#: notes. A table added there (histograms, metrics, ...) becomes a view of the same name.
SHARD_TABLES: tuple[str, ...] = (*TABLES, NOTES_DIR)
TRIALS_TABLE = "trials"
#: Every table a query can name.
TABLE_NAMES: tuple[str, ...] = (TRIALS_TABLE, *SHARD_TABLES)

DAMAGED_CHOICES = ("skip", "raise")
_INSTALL_HINT = "pip install comgra-like[sql]"
# How often a query is run again after a file it read vanished (a compaction replaced it)
# or turned out damaged while reading.
_MAX_ATTEMPTS = 4
# A name DuckDB's parquet reader gives its file-name column, unlikely to clash with ours.
_FILE_COLUMN = "__comgra_file"

_TRIALS_SCHEMA = pa.schema([
    ("trial_id", pa.string()), ("status", pa.string()), ("created", pa.float64()),
    ("ended", pa.float64()), ("abort_reason", pa.string()), ("schema_version", pa.int64()),
    ("settings", pa.string()), ("versions", pa.string()),
])
_LEGACY_NOTES_SCHEMA = pa.schema([
    ("trial_id", pa.string()), ("text", pa.string()), ("wall_time", pa.float64()),
    ("training_step", pa.int64()),
])


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError as e:
        raise ConfigurationError(
            "comgra_like.query.sql needs DuckDB, which is not installed: "
            f"{_INSTALL_HINT} (or pip install duckdb)") from e
    return duckdb


@dataclass(frozen=True)
class _Shard:
    trial_id: str
    table: str
    path: str


@dataclass
class _Listing:
    """What one look at the group found: the trials, the shards to read, the problems."""

    trials: list[dict]
    shards: dict[str, list[_Shard]]  # table -> shards, trial by trial, in sequence order
    legacy_notes: list[dict]
    skipped: dict[str, SkippedFile]


class GroupFiles:
    """The files of a group a reader should read (no DuckDB needed): the trials shown,
    each table's live shards, the damaged files left out. A file's check is cached by
    its signature (shards are never modified, so a good file is checked once)."""

    def __init__(self, group_path: str | os.PathLike):
        self.path = Path(os.path.abspath(group_path))
        if not self.path.is_dir():
            raise NotFoundError(
                f"{self.path} is not a group folder; pass the folder "
                "<comgra_root_path>/<group> that the recorder writes to")
        self._checked: dict[str, tuple[Any, str | None]] = {}

    def list(self) -> _Listing:
        """Look at the group: its trials, the shards to read, the files left out."""
        skipped: dict[str, SkippedFile] = {}
        trials: list[dict] = []
        shards: dict[str, list[_Shard]] = {t: [] for t in SHARD_TABLES}
        legacy: list[dict] = []
        folder = trials_dir(self.path)
        try:
            names = sorted(e.name for e in os.scandir(folder) if e.is_dir())
        except OSError:
            names = []
        for name in names:
            if is_hidden(name) or not TRIAL_ID_PATTERN.match(name):
                continue
            layout = TrialLayout(folder / name)
            info = self._trial_info(layout, skipped)
            if info is None:
                continue
            trials.append(info)
            # Steps first: the writer renames a step's other shards before its steps
            # shard, so every step listed here has its tensors listed below.
            for table in sorted(SHARD_TABLES, key=lambda t: t != STEPS):
                shards[table].extend(self._shards(layout, table, skipped))
            legacy.extend(_legacy_notes(layout))
        return _Listing(trials, shards, legacy, skipped)

    def _trial_info(self, layout: TrialLayout, skipped: dict[str, SkippedFile]) -> dict | None:
        """The trials row of a trial, or None when it is not shown (as the query API:
        no trial.json yet, an unreadable one, or a newer storage format)."""
        path = layout.trial_json
        if not path.exists():
            return None  # being created
        try:
            data = json.loads(path.read_text("utf-8"))
            if not isinstance(data, dict):
                raise TypeError(f"a JSON object was expected, not {type(data).__name__}")
            version = int(data["schema_version"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            skipped[str(path)] = SkippedFile(str(path), f"unreadable trial.json ({reason_of(e)})")
            return None
        if version > SCHEMA_VERSION:
            skipped[str(path)] = SkippedFile(
                str(path), f"written with storage format {version}, this version reads up to "
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
        }

    def _shards(self, layout: TrialLayout, table: str,
                skipped: dict[str, SkippedFile]) -> list[_Shard]:
        folder = layout.table(table)
        try:
            names = [e.name for e in os.scandir(folder) if not is_hidden(e.name)]
        except OSError:
            return []
        out = []
        for name in live_shards(names):
            path = folder / name
            problem = self._problem(path, table)
            if problem is not None:
                skipped[str(path)] = SkippedFile(str(path), problem)
                continue
            out.append(_Shard(layout.trial_id, table, str(path)))
        return out

    def _problem(self, path: Path, table: str) -> str | None:
        """Why a shard cannot be read (its footer is damaged, or it lacks columns of its
        table), or None."""
        sig = signature(path)
        checked = self._checked.get(str(path))
        if checked is not None and checked[0] == sig:
            return checked[1]
        problem = None
        try:
            names = set(pq.read_schema(path).names)
            expected = SHARD_SCHEMAS.get(table)
            missing = [] if expected is None else [n for n in expected.names if n not in names]
            if missing:
                problem = f"not a {table} shard (no column {', '.join(missing)})"
        except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
            problem = f"unreadable shard ({reason_of(e)})"
        if problem is not None and (checked is None or checked[1] != problem):
            log.warning("skipping damaged file %s: %s", path, problem)
        self._checked[str(path)] = (sig, problem)
        return problem

    def mark_damaged(self, path: str, exc: BaseException) -> None:
        reason = f"unreadable shard ({reason_of(exc)})"
        self._checked[path] = (signature(Path(path)), reason)
        log.warning("skipping damaged file %s: %s", path, reason)


class GroupSQL:
    """DuckDB views over every trial of a group. Create it with :func:`connect`.

    ``sql(query)`` runs a query on what the last :meth:`refresh` listed (the constructor
    lists once); files written since show after the next refresh.
    """

    def __init__(self, group_path: str | os.PathLike, *, damaged: str = "skip",
                 threads: int | None = None):
        if damaged not in DAMAGED_CHOICES:
            raise ConfigurationError(
                f"damaged={damaged!r}: choose 'skip' (leave damaged files out and list them "
                "in .skipped) or 'raise' (a StorageError names them)")
        self._files = GroupFiles(group_path)
        self.path = self._files.path
        self.damaged = damaged
        duckdb = _duckdb()
        self._error = duckdb.Error
        # Errors of the query itself (syntax, unknown names, types, values), as opposed
        # to errors reading a file.
        self._query_errors = (duckdb.ProgrammingError, duckdb.DataError)
        self._input_error = duckdb.InvalidInputException  # also "not a parquet file"
        self._con = duckdb.connect(":memory:")
        if threads is not None:
            self._con.execute(f"SET threads TO {int(threads)}")
        self._skipped: dict[str, SkippedFile] = {}
        self._listing: _Listing | None = None
        try:
            self.refresh()
        except BaseException:
            self._con.close()
            raise

    def close(self) -> None:
        self._con.close()

    @property
    def connection(self) -> Any:
        """The DuckDB connection holding the views (for DuckDB's own API)."""
        return self._con

    @property
    def tables(self) -> tuple[str, ...]:
        return TABLE_NAMES

    @property
    def skipped(self) -> list[SkippedFile]:
        """The files left out because they are damaged (each once), as ``Group.skipped``."""
        return list(self._skipped.values())

    def trial_ids(self) -> list[str]:
        return [t["trial_id"] for t in (self._listing.trials if self._listing else [])]

    # ----- listing -----------------------------------------------------------------------

    def refresh(self) -> None:
        """List the group again and rebuild the views."""
        listing = self._files.list()
        self._listing = listing
        self._skipped = dict(listing.skipped)
        self._raise_if_damaged()
        self._build_views()

    def _raise_if_damaged(self) -> None:
        if self.damaged == "raise" and self._skipped:
            named = "; ".join(f"{s.path}: {s.reason}" for s in self._skipped.values())
            raise StorageError(
                f"damaged files in {self.path}: {named}. Repair or delete them, or pass "
                "damaged='skip' to query without them")

    # ----- views -------------------------------------------------------------------------

    def _build_views(self) -> None:
        listing = self._listing
        if listing is None:
            return
        con = self._con
        trials = pa.Table.from_pylist(listing.trials, schema=_TRIALS_SCHEMA)
        con.register("__comgra_trials", trials)
        con.execute(f"CREATE OR REPLACE VIEW {TRIALS_TABLE} AS SELECT * FROM __comgra_trials")
        for table in SHARD_TABLES:
            parts = []
            paths = [shard.path for shard in listing.shards[table]]
            if paths:
                files = ", ".join(_literal(p) for p in paths)
                # One scan of every trial's files (many trials cost no more than one).
                # trial_id from the path, <group>/trials/<trial_id>/<table>/<file>: the
                # query API's name of the trial, also in a copied or renamed folder.
                # union_by_name: a column added later shows, null in older files.
                parts.append(
                    f"SELECT parse_path({_FILE_COLUMN})[-3] AS trial_id, "
                    f"* EXCLUDE (trial_id) FROM read_parquet([{files}], "
                    f"filename = {_literal(_FILE_COLUMN)}, union_by_name = true)")
            if table == NOTES_DIR and listing.legacy_notes:
                con.register("__comgra_legacy_notes",
                             pa.Table.from_pylist(listing.legacy_notes,
                                                  schema=_LEGACY_NOTES_SCHEMA))
                parts.insert(0, "SELECT * FROM __comgra_legacy_notes")
            # Every column of the table's files, also where no file has it yet (rank).
            con.register(f"__comgra_empty_{table}", _empty(table))
            parts.append(f"SELECT * FROM __comgra_empty_{table}")
            # The rank of a row: the file's rank column, or (files written before ranks,
            # the legacy notes) the rank in the file's name, 0 without one.
            from_name = (f"TRY_CAST(regexp_extract(parse_filename({_FILE_COLUMN}), "
                         f"'^(?:part|compact)-r([0-9]+)-', 1) AS INTEGER)")
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * EXCLUDE ({_FILE_COLUMN}) "
                        f"REPLACE (CAST(coalesce({RANK}, {from_name}, 0) AS INTEGER) AS {RANK}) "
                        "FROM (" + " UNION ALL BY NAME ".join(parts) + ")")

    # ----- queries -----------------------------------------------------------------------

    def sql(self, query: str, *, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Run ``query``; a pandas frame, or an Arrow table with ``arrow=True``.

        A file that vanished since the listing (a compaction replaced it) makes the group
        be listed again and the query run again; a file found damaged while reading is
        left out (reported in :attr:`skipped`) the same way.
        """
        if not isinstance(query, str) or not query.strip():
            raise ConfigurationError("pass the query as a non-empty SQL string, e.g. "
                                     "\"SELECT trial_id, count(*) FROM steps GROUP BY 1\"")
        attempt = 0
        while True:
            try:
                result = self._con.sql(query)
                if result is None:  # a statement that returns nothing
                    return pa.table({}) if arrow else pd.DataFrame()
                if not arrow:
                    return result.df()
                to_arrow = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
                return to_arrow()
            except self._error as e:
                text = " ".join(str(e).split())
                query_error = (isinstance(e, self._query_errors)
                               and not isinstance(e, self._input_error))
                if not (query_error and self._file_named_in(str(e)) is None):
                    attempt += 1
                    if attempt < _MAX_ATTEMPTS and self._recover(e):
                        continue
                if isinstance(e, self._query_errors):
                    raise ConfigurationError(
                        f"the query failed: {text}. Tables: {', '.join(TABLE_NAMES)} "
                        "(columns in docs/QUERYING.md)") from e
                raise StorageError(f"reading {self.path} failed: {text}") from e

    def _recover(self, exc: BaseException) -> bool:
        """After a failed read: list the group again (a file vanished, was replaced or
        changed since the listing) and, when that changes nothing, read each listed file
        whole to find the damaged one. Whether the views changed (run the query again)."""
        before = self._listing
        named = self._file_named_in(str(exc))
        if named is not None and os.path.exists(named):
            self._files.mark_damaged(named, exc)
        self._listing = self._files.list()
        self._skipped = dict(self._listing.skipped)
        changed = before is None or _files(before) != _files(self._listing)
        if not changed:
            for shards in self._listing.shards.values():
                for shard in shards:
                    try:
                        pq.ParquetFile(shard.path).read()
                    except Exception as e:  # noqa: BLE001 - any damage is reported
                        self._files.mark_damaged(shard.path, e)
                        changed = True
                        break
                if changed:
                    break
            if changed:
                self._listing = self._files.list()
                self._skipped = dict(self._listing.skipped)
        self._raise_if_damaged()
        self._build_views()
        return changed

    def _file_named_in(self, message: str) -> str | None:
        listing = self._listing
        if listing is None:
            return None
        for shards in listing.shards.values():
            for shard in shards:
                if shard.path in message:
                    return shard.path
        return None


def _files(listing: _Listing) -> set[str]:
    return {s.path for shards in listing.shards.values() for s in shards}


def connect(group_path: str | os.PathLike, *, damaged: str = "skip",
            threads: int | None = None) -> GroupSQL:
    """DuckDB views over every trial of a group folder (``<comgra_root_path>/<group>``).

    ``damaged``: ``"skip"`` leaves damaged files out and lists them in ``.skipped``;
    ``"raise"`` raises a :class:`StorageError` naming them. ``threads``: DuckDB's
    threads (all cores by default).
    """
    return GroupSQL(group_path, damaged=damaged, threads=threads)


def sql(group_path: str | os.PathLike, query: str, *, arrow: bool = False,
        damaged: str = "skip") -> pd.DataFrame | pa.Table:
    """Run one SQL query over every trial of a group; a pandas frame (or an Arrow table
    with ``arrow=True``).

    Tables: ``trials``, ``steps``, ``tensors``, ``kpis``, ``notes`` and the tables of
    ``format/layout.py`` that later features add (``histograms`` ...), each with
    ``trial_id`` as a column (docs/QUERYING.md lists the columns). Example, the largest
    gradient norm per node over all trials::

        sql(group, "SELECT node, max(norm) AS max_norm FROM tensors "
                   "WHERE recording_type LIKE 'gradient:%' "
                   "AND aggregation IN ('none', 'batch_abs_max') "
                   "GROUP BY node ORDER BY max_norm DESC")

    Damaged files are left out (``damaged="skip"``, the default; they are listed in the
    frame's ``attrs["skipped"]``) or raise a :class:`StorageError` (``damaged="raise"``).
    """
    db = GroupSQL(group_path, damaged=damaged)
    try:
        result = db.sql(query, arrow=arrow)
    finally:
        db.close()
    if isinstance(result, pd.DataFrame):
        result.attrs["skipped"] = db.skipped
    return result


def shard_files(group_path: str | os.PathLike, table: str) -> dict[str, list[str]]:
    """The parquet files of ``table`` that a reader of the whole group should read, by
    trial id (the folder name): the live shards of every trial shown, damaged files left
    out (with a warning in the log). For engines other than DuckDB (Spark, polars,
    pyarrow.dataset): a glob like ``trials/*/tensors/*.parquet`` also matches the parts
    a compaction has merged but not yet deleted (or never will, after a crash), whose
    rows would then count twice. No DuckDB needed."""
    if table not in SHARD_TABLES:
        raise ConfigurationError(f"no table {table!r}; the tables of shards are "
                                 f"{', '.join(SHARD_TABLES)}")
    out: dict[str, list[str]] = {}
    for shard in GroupFiles(group_path).list().shards[table]:
        out.setdefault(shard.trial_id, []).append(shard.path)
    return out


# ----- helpers ---------------------------------------------------------------------------

def _literal(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _empty(table: str) -> pa.Table:
    """An empty table with the columns a table's files have (trial_id as a string), and
    the file-name column of the views."""
    schema = FILE_SCHEMAS.get(table)
    if schema is None:
        schema = pa.schema([("trial_id", pa.string()), RANK_FIELD])
    fields = [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
              for f in schema]
    return pa.schema([*fields, pa.field(_FILE_COLUMN, pa.string())]).empty_table()


def _legacy_notes(layout: TrialLayout) -> list[dict]:
    """The notes of ``notes.jsonl`` (recordings made before notes were shards): complete
    lines only; a line that is no note object is shown as its text, as the query API."""
    path = layout.root / LEGACY_NOTES_JSONL
    try:
        data = path.read_bytes()
    except OSError:
        return []
    end = data.rfind(b"\n")
    rows = []
    for line in data[: end + 1].splitlines():
        try:
            obj = json.loads(line)
            step = obj.get("training_step")
            rows.append({"trial_id": layout.trial_id, "text": str(obj.get("text", "")),
                         "wall_time": float(obj.get("wall_time") or 0.0),
                         "training_step": None if step is None else int(step)})
        except (ValueError, TypeError, AttributeError):
            rows.append({"trial_id": layout.trial_id,
                         "text": line.decode("utf-8", "replace"), "wall_time": 0.0,
                         "training_step": None})
    return rows
