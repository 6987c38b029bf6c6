"""SQL over every trial of a group, with DuckDB embedded (docs/QUERYING.md).

``sql(group, "SELECT ...")`` answers one query; ``connect(group)`` keeps the views for
many. Each table of a trial (``format.layout.TABLES`` and the notes) is one view over the
parquet shards of every trial, with ``trial_id`` (the trial's folder name) as the first
column; ``trials`` holds one row per trial from its ``trial.json``.

Only final names are read: hidden names (files being written) never, and of a table's
shards only those no compacted file supersedes (``layout.live_shards``), as the query API
does. A damaged file is left out and reported in :attr:`GroupSQL.skipped` (the query API's
``Group.skipped``), or raises a :class:`StorageError` with ``damaged="raise"``.

The group may be on S3 (``s3://bucket/prefix/group``): it is listed and read through the
filesystem seam (``format.files.files_for``, endpoint and credentials from the ``AWS_*``
variables). DuckDB's own s3:// reader is its httpfs extension, downloaded at first use;
instead each table is a pyarrow dataset over the live objects, registered in the
connection, into which DuckDB pushes the query's columns and filters. The same rules
apply; the answers are the same as for the group on disk.

DuckDB is an optional dependency (``pip install comgra-like[sql]``), imported only when
a connection is made: the GUI, the rest of the query API and the writer never load it.
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

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format.files import Files, files_for
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
from ..format.schema import (
    FILE_SCHEMAS,
    OLD_COLUMN_NAMES,
    RANK,
    RANK_FIELD,
    SCHEMA_VERSION,
    SHARD_SCHEMAS,
    TRIAL_ID_PATTERN,
)
from ..format.trial_config import read_config
from .listing import GroupListing
from .trial_index import reason_of
from .types import SkippedFile

log = logging.getLogger("comgra_like")

#: The views over the shards of every trial: the tables of ``format/layout.py`` and the
#: notes. A table added there (histograms, metrics, ...) becomes a view of the same name.
SHARD_TABLES: tuple[str, ...] = (*TABLES, NOTES_DIR)
TRIALS_TABLE = "trials"
CONFIG_TABLE = "config"
#: Every table a query can name.
TABLE_NAMES: tuple[str, ...] = (TRIALS_TABLE, *SHARD_TABLES)

DAMAGED_CHOICES = ("skip", "raise")
_INSTALL_HINT = "pip install comgra-like[sql]"
# How often a query is run again after a file it read vanished (a compaction replaced it)
# or turned out damaged while reading.
_MAX_ATTEMPTS = 4
# A name DuckDB's parquet reader gives its file-name column, unlikely to clash with ours.
_FILE_COLUMN = "__comgra_file"
# The trial's folder name in a dataset over objects (a column of every row of a file).
_TRIAL_COLUMN = "__comgra_trial"
# Footers read at once when an object store is listed (each one request, latency-bound).
_REMOTE_CHECKS = 16


def remote_parquet_format() -> pads.ParquetFileFormat:
    """How objects are read (by the SQL views and the Spark data source): the column
    chunks of a query's columns that lie less than about a latency's worth of bytes
    apart are fetched in one ranged request (pyarrow's model: 50 ms to the first byte,
    100 MiB/s), not one request per chunk. The aggregate of
    benchmarks/benchmark_sql_s3.py read 4 of 26 columns of 14 row groups in 0.11 s
    instead of 0.51 s from the loopback server."""
    cache = getattr(pa, "CacheOptions", None)  # pyarrow 15 and newer
    tuned = {} if cache is None else {"cache_options": cache.from_network_metrics(50, 100)}
    return pads.ParquetFileFormat(default_fragment_scan_options=pads.ParquetFragmentScanOptions(
        pre_buffer=True, **tuned))


_TRIALS_SCHEMA = pa.schema([
    ("trial_id", pa.string()), ("status", pa.string()), ("created", pa.float64()),
    ("ended", pa.float64()), ("abort_reason", pa.string()), ("schema_version", pa.int64()),
    ("settings", pa.string()), ("versions", pa.string()), ("config", pa.string()),
])
#: ``config``: one row per trial and config key (flattened with dots, as stored); the
#: value as JSON text and, where it is a number or a boolean, as a double.
_CONFIG_SCHEMA = pa.schema([
    ("trial_id", pa.string()), ("key", pa.string()), ("value", pa.string()),
    ("number", pa.float64()),
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
    path: str  # as messages and ``skipped`` name it: a local path, or s3://bucket/key
    location: str  # for the filesystem seam (an object's ``s3:/bucket/key``)
    name_rank: int  # the rank in the file's name, 0 without one
    size: int = field(compare=False, default=0)  # bytes, from the listing
    # The file's columns (from its footer, read when it was checked)
    schema: pa.Schema = field(compare=False, repr=False, default=None)


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

    def list(self) -> _Listing:
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
        shards: dict[str, list[_Shard]] = {t: [] for t in SHARD_TABLES}
        for (trial_id, table, location, sig), (problem, schema) in zip(
                found, self._check_all(found)):
            shown = self.files.display(location)
            if problem is not None:
                skipped[shown] = SkippedFile(shown, problem)
                continue
            shards[table].append(_Shard(trial_id, table, shown, str(location),
                                        shard_rank(location.name) or 0, sig[1], schema))
        return _Listing(trials, shards, legacy, skipped)

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
        except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
            problem = f"unreadable shard ({reason_of(e)})"
        with self._lock:
            before = self._checked.get(str(location))
            self._checked[str(location)] = (sig, problem, schema)
        if problem is not None and (before is None or before[1] != problem):
            log.warning("skipping damaged file %s: %s", self.files.display(location), problem)
        return problem, schema

    def mark_damaged(self, shard: _Shard, exc: BaseException) -> None:
        reason = f"unreadable shard ({reason_of(exc)})"
        location = Path(shard.location)
        with self._lock:
            self._checked[shard.location] = (self.files.signature(location), reason, None)
        log.warning("skipping damaged file %s: %s", shard.path, reason)

    def read_whole(self, shard: _Shard) -> None:
        """Read every page of a shard (raises what a damaged one raises)."""
        self.files.read_parquet(Path(shard.location))

    def exists(self, shard: _Shard) -> bool:
        return self.files.exists(Path(shard.location))

    def _legacy_notes(self, layout: TrialLayout) -> list[dict]:
        """The notes of ``notes.jsonl`` (recordings made before notes were shards):
        complete lines only; a line that is no note object is shown as its text, as the
        query API."""
        try:
            data = self.files.read_bytes(layout.root / LEGACY_NOTES_JSONL)
        except (OSError, pa.ArrowException):
            return []
        return _legacy_note_rows(layout.trial_id, data)


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
        #: The group as messages name it (a folder, or ``s3://bucket/prefix/group``).
        self.location = self._files.display
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
                f"damaged files in {self.location}: {named}. Repair or delete them, or pass "
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
        config = pa.Table.from_pylist(_config_rows(listing.trials), schema=_CONFIG_SCHEMA)
        con.register("__comgra_config", config)
        con.execute(f"CREATE OR REPLACE VIEW {CONFIG_TABLE} AS SELECT * FROM __comgra_config")
        for table in SHARD_TABLES:
            parts = []
            paths = [shard.path for shard in listing.shards[table]]
            if paths and self._files.files.remote:
                # DuckDB's own reader needs its httpfs extension for s3:// (downloaded at
                # first use); pyarrow reads the objects through the seam's filesystem
                # instead, and DuckDB pushes projections and filters into that scan.
                con.register(f"__comgra_objects_{table}",
                             self._dataset(table, listing.shards[table]))
                parts.append(f"SELECT {_TRIAL_COLUMN} AS trial_id, "
                             f"* EXCLUDE (trial_id, {_TRIAL_COLUMN}) "
                             f"FROM __comgra_objects_{table}")
            elif paths:
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
            excluded = [_FILE_COLUMN]
            replaced = [f"CAST(coalesce({RANK}, {from_name}, 0) AS INTEGER) AS {RANK}"]
            old = OLD_COLUMN_NAMES.get(table, {})
            if old:
                # Older files name some columns otherwise (format/schema.py): the view has
                # the current names, filled from the old ones in those files.
                con.register(f"__comgra_old_{table}", _old_columns(table))
                parts.append(f"SELECT * FROM __comgra_old_{table}")
                excluded += list(old)
                replaced += [f"coalesce({new}, {name}) AS {new}" for name, new in old.items()]
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * EXCLUDE "
                        f"({', '.join(excluded)}) REPLACE ({', '.join(replaced)}) "
                        "FROM (" + " UNION ALL BY NAME ".join(parts) + ")")

    def _dataset(self, table: str, shards: list[_Shard]) -> pads.Dataset:
        """A pyarrow dataset over a table's objects: one fragment per shard, whose trial
        (the folder name) and file name are columns of its rows (constants of the
        fragment: a filter on trial_id skips the other trials' objects unread). Its
        columns are the table's and those any file has (a column missing in a file is
        null there), as ``union_by_name`` on disk."""
        files = self._files.files
        parquet = remote_parquet_format()
        fs = None
        fragments = []
        for shard in shards:
            fs, key = files.arrow(Path(shard.location))
            where = ((pads.field(_TRIAL_COLUMN) == shard.trial_id)
                     & (pads.field(_FILE_COLUMN) == shard.path))
            # the size from the listing spares a request per object
            try:
                fragments.append(parquet.make_fragment(key, fs, partition_expression=where,
                                                       file_size=shard.size or None))
            except TypeError:  # pyarrow 14: no file_size
                fragments.append(parquet.make_fragment(key, fs, partition_expression=where))
        schema = table_schema(table, [s.schema for s in shards]).append(pa.field(_TRIAL_COLUMN, pa.string())).append(
            pa.field(_FILE_COLUMN, pa.string()))
        return pads.FileSystemDataset(fragments, schema, parquet, fs)

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
                raise StorageError(f"reading {self.location} failed: {text}") from e

    def _recover(self, exc: BaseException) -> bool:
        """After a failed read: list the group again (a file vanished, was replaced or
        changed since the listing) and, when that changes nothing, read each listed file
        whole to find the damaged one. Whether the views changed (run the query again)."""
        before = self._listing
        named = self._file_named_in(str(exc))
        if named is not None and self._files.exists(named):
            self._files.mark_damaged(named, exc)
        self._listing = self._files.list()
        self._skipped = dict(self._listing.skipped)
        changed = before is None or _files(before) != _files(self._listing)
        if not changed:
            for shards in self._listing.shards.values():
                for shard in shards:
                    try:
                        self._files.read_whole(shard)
                    except FileNotFoundError:
                        continue  # gone since: the next listing leaves it out
                    except Exception as e:  # noqa: BLE001 - any damage is reported
                        self._files.mark_damaged(shard, e)
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

    def _file_named_in(self, message: str) -> _Shard | None:
        """The listed shard an error message names (pyarrow names an object by its key,
        bucket/key, without the scheme)."""
        listing = self._listing
        if listing is None:
            return None
        for shards in listing.shards.values():
            for shard in shards:
                key = shard.path.split("://", 1)[-1]
                if shard.path in message or key in message:
                    return shard
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
    out (with a warning in the log); ``s3://bucket/key`` URIs for a group on S3 (Spark's
    hadoop-aws calls them ``s3a://``). For engines other than DuckDB (Spark, polars,
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


def _old_columns(table: str) -> pa.Table:
    """An empty table with the older names of a table's columns (``OLD_COLUMN_NAMES``,
    the types of the current ones) and the file-name column: every view has them, so
    that it can fill the current columns from them."""
    empty = _empty(table).schema
    fields = [pa.field(name, empty.field(new).type)
              for name, new in OLD_COLUMN_NAMES.get(table, {}).items()]
    return pa.schema([*fields, pa.field(_FILE_COLUMN, pa.string())]).empty_table()


def table_schema(table: str, file_schemas: list[pa.Schema]) -> pa.Schema:
    """The columns of a table over files with these schemas: the table's own
    (``format/schema.py``) and any other a file has, dictionary columns as their values'
    type; a file without a column has nulls there (as DuckDB's ``union_by_name``)."""
    empty = _empty(table).schema
    own = empty.remove(empty.get_field_index(_FILE_COLUMN))
    return pa.unify_schemas([own, *(_plain(s) for s in file_schemas if s is not None)],
                            promote_options="permissive")


def _plain(schema: pa.Schema) -> pa.Schema:
    """A file's schema with dictionary columns as their values' type (the views' types)."""
    return pa.schema([pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type)
                      else f for f in schema])


def _legacy_note_rows(trial_id: str, data: bytes) -> list[dict]:
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


def _config_rows(trials: list[dict]) -> list[dict]:
    rows = []
    for trial in trials:
        for key, value in json.loads(trial.get("config") or "{}").items():
            number = (float(value) if isinstance(value, (int, float)) else None)
            rows.append({"trial_id": trial["trial_id"], "key": key,
                         "value": json.dumps(value), "number": number})
    return rows
