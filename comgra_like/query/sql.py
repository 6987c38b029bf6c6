"""SQL over every trial of a group, with DuckDB embedded (docs/QUERYING.md).

``sql(group, "SELECT ...")`` answers one query; ``connect(group)`` keeps the views for
many. Each table of a trial (``format.layout.TABLES`` and the notes) is one view over the
parquet shards of every trial, with ``trial_id`` (the trial's folder name) as the first
column; ``trials`` holds one row per trial from its ``trial.json``.

Only final names are read: hidden names (files being written) never, and of a table's
shards only those no compacted file supersedes (``layout.live_shards``), as the query API
does. A damaged file is left out and reported in :attr:`GroupSQL.skipped` (the query API's
``Group.skipped``), or raises a :class:`StorageError` with ``damaged="raise"``. A file the
store could not read now (a connection refused, a timeout, an I/O error) is not damaged:
the listing or the query raises a ``StoreUnreachable`` (a :class:`StorageError`), nothing
is left out or marked, and the next query or refresh reads it again.

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

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads

from ..errors import ConfigurationError, StorageError
from ..format.files import StoreUnreachable, unreachable
from ..format.layout import NOTES_DIR
from ..format.schema import FILE_SCHEMAS, OLD_COLUMN_NAMES, RANK, RANK_FIELD
from .group_files import SHARD_TABLES, FilesListing, GroupFiles, Shard
from .types import SkippedFile

log = logging.getLogger("comgra_like")

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
# What the system says (DuckDB passes it on in its message) of a read that may work later.
_NOW_WORDS = tuple(os.strerror(n) for n in (
    errno.EIO, errno.ESTALE, errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT,
    errno.EAGAIN, errno.EHOSTUNREACH, errno.ENETUNREACH)) + ("timed out",)


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
        self._listing: FilesListing | None = None
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

    def _dataset(self, table: str, shards: list[Shard]) -> pads.Dataset:
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
                    try:
                        recovered = attempt < _MAX_ATTEMPTS and self._recover(e)
                    except StoreUnreachable as now:
                        raise StoreUnreachable(
                            f"the query over {self.location} was not answered: {now}") from e
                    if recovered:
                        continue
                if isinstance(e, self._query_errors):
                    raise ConfigurationError(
                        f"the query failed: {text}. Tables: {', '.join(TABLE_NAMES)} "
                        "(columns in docs/QUERYING.md)") from e
                raise StorageError(f"reading {self.location} failed: {text}") from e

    def _recover(self, exc: BaseException) -> bool:
        """After a failed read: list the group again (a file vanished, was replaced or
        changed since the listing) and, when that changes nothing, read each listed file
        whole to find the damaged one. Whether the views changed (run the query again).

        A file is marked damaged only when it is: the file a failed read names is read
        whole through the seam first. StoreUnreachable when that read, or a listing, could
        not be made now (nothing is marked); when it reads now and the failure was one
        that may pass (an I/O error, a timeout), the query is run again unmarked."""
        before = self._listing
        named = self._file_named_in(str(exc))
        passed = False
        if named is not None and self._files.exists(named):
            try:
                self._files.read_whole(named)
            except FileNotFoundError:
                pass  # gone since: the listing below leaves it out
            except Exception as e:  # noqa: BLE001 - any damage is reported
                if unreachable(e):
                    self._files.mark_damaged(named, e)  # raises StoreUnreachable
                self._files.mark_damaged(named, exc)
            else:
                passed = _may_pass(str(exc))
                if not passed:  # DuckDB cannot read what pyarrow reads: as damaged
                    self._files.mark_damaged(named, exc)
        self._listing = self._files.list()
        self._skipped = dict(self._listing.skipped)
        changed = passed or before is None or _files(before) != _files(self._listing)
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

    def _file_named_in(self, message: str) -> Shard | None:
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


def _may_pass(message: str) -> bool:
    """Whether a reader's error message says the read may work later (the store's or the
    system's words for it), not that the file is damaged."""
    return (unreachable(OSError(message))
            or any(word.lower() in message.lower() for word in _NOW_WORDS))


def _files(listing: FilesListing) -> set[str]:
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


def _config_rows(trials: list[dict]) -> list[dict]:
    rows = []
    for trial in trials:
        for key, value in json.loads(trial.get("config") or "{}").items():
            number = (float(value) if isinstance(value, (int, float)) else None)
            rows.append({"trial_id": trial["trial_id"], "key": key,
                         "value": json.dumps(value), "number": number})
    return rows
