"""A Spark data source "comgra": a table of every trial and rank of a group, on disk or
on S3 (docs/QUERYING.md, "Spark")::

    from comgra_like.query.spark import register
    register(spark)
    tensors = (spark.read.format("comgra").option("path", "s3://bucket/prefix/group")
               .option("table", "tensors").load())

The driver lists the group as ``query/sql.py`` does (the live shards of each table, the
trials shown, damaged files left out or raised); each live shard is one partition, read
by an executor through the filesystem seam (``format.files.files_for``: the local disk,
or pyarrow's S3FileSystem with the endpoint and credentials of the executor's ``AWS_*``
environment variables). No hadoop-aws jars: this works wherever pyarrow reaches the
files. ``trial_id`` is the trial's folder name and ``rank`` the recording rank, as in
the SQL views.

Options: ``path`` (the group), ``table`` (``tensors`` by default; any of
``sql.SHARD_TABLES``), ``columns`` (comma-separated: read only these, e.g. to leave the
``values`` lists unread), ``damaged`` (``skip``, the default, or ``raise``).

pyspark (4.0 or newer, for the Python data source API) is imported with this module,
which nothing else in the project imports.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from ..errors import ConfigurationError, StorageError
from ..format.files import files_for
from ..format.schema import RANK
from .sql import (
    DAMAGED_CHOICES,
    SHARD_TABLES,
    GroupFiles,
    remote_parquet_format,
    table_schema,
)

_INSTALL_HINT = "pip install comgra-like[spark] (pyspark 4.0 or newer, and Java 17+)"

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError as e:  # pyspark missing, or older than 4.0
    raise ConfigurationError(
        f"comgra_like.query.spark needs pyspark's Python data sources: {_INSTALL_HINT}"
    ) from e

#: The name to pass to ``spark.read.format``.
FORMAT = "comgra"
DEFAULT_TABLE = "tensors"


def register(spark: Any) -> None:
    """Make ``spark.read.format("comgra")`` available in a SparkSession."""
    spark.dataSource.register(ComgraDataSource)


class ShardPartition(InputPartition):
    """One live shard: where it is, its trial (the folder name) and its name's rank."""

    def __init__(self, location: str, shown: str, trial_id: str, name_rank: int):
        super().__init__(location)
        self.location = location
        self.shown = shown
        self.trial_id = trial_id
        self.name_rank = name_rank


class ComgraDataSource(DataSource):
    """``spark.read.format("comgra")``: one table of a group (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        path = self.options.get("path")
        if not path:
            raise ConfigurationError(
                'pass the group: spark.read.format("comgra").option("path", '
                '"<comgra_root_path>/<group>") (a folder or s3://bucket/prefix/group)')
        self.path = str(path)
        self.table = self.options.get("table", DEFAULT_TABLE)
        if self.table not in SHARD_TABLES:
            raise ConfigurationError(f"option table={self.table!r}: choose one of "
                                     f"{', '.join(SHARD_TABLES)}")
        self.damaged = self.options.get("damaged", "skip")
        if self.damaged not in DAMAGED_CHOICES:
            raise ConfigurationError(
                f"option damaged={self.damaged!r}: choose 'skip' (leave damaged files out) "
                "or 'raise'")
        columns = self.options.get("columns")
        self.columns = ([c.strip() for c in columns.split(",") if c.strip()]
                        if columns else None)
        self._listed: tuple[pa.Schema, list[ShardPartition]] | None = None

    def _listing(self) -> tuple[pa.Schema, list[ShardPartition]]:
        """The table's columns and its partitions, from one listing of the group."""
        if self._listed is not None:
            return self._listed
        files = GroupFiles(self.path)
        listing = files.list()
        if self.damaged == "raise" and listing.skipped:
            named = "; ".join(f"{s.path}: {s.reason}" for s in listing.skipped.values())
            raise StorageError(f"damaged files in {files.display}: {named}. Repair or "
                               "delete them, or pass .option('damaged', 'skip')")
        shards = listing.shards[self.table]
        schema = table_schema(self.table, [s.schema for s in shards])
        schema = schema.set(schema.get_field_index("trial_id"),
                            pa.field("trial_id", pa.string()))
        schema = schema.set(schema.get_field_index(RANK), pa.field(RANK, pa.int32()))
        if self.columns is not None:
            unknown = [c for c in self.columns if c not in schema.names]
            if unknown:
                raise ConfigurationError(
                    f"option columns: no column {', '.join(unknown)} in {self.table}; its "
                    f"columns are {', '.join(schema.names)}")
            schema = pa.schema([schema.field(c) for c in self.columns])
        parts = [ShardPartition(s.location, s.path, s.trial_id, s.name_rank) for s in shards]
        self._listed = (schema, parts)
        return self._listed

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self._listing()[0])

    def reader(self, schema: Any) -> DataSourceReader:
        arrow_schema, parts = self._listing()
        return ShardReader(arrow_schema, parts)


class ShardReader(DataSourceReader):
    """Reads one shard per partition, in the executor, through the filesystem seam."""

    def __init__(self, schema: pa.Schema, parts: list[ShardPartition]):
        self.schema = schema
        self.parts = parts

    def partitions(self) -> list[ShardPartition]:
        return self.parts

    def read(self, partition: ShardPartition) -> Iterator[pa.RecordBatch]:
        return read_shard(partition, self.schema)


def read_shard(part: ShardPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of one shard in ``schema``, a row group's batches at a time (memory stays
    bounded by a row group, whatever the shard's size)."""
    files = files_for(part.location)
    fs, key = files.arrow(Path(part.location))
    parquet = remote_parquet_format() if files.remote else pads.ParquetFileFormat()
    # the columns read from the file; trial_id comes from the folder, not the file
    read = pa.schema([f for f in schema if f.name != "trial_id"])
    try:
        dataset = pads.dataset(key, schema=read, format=parquet, filesystem=fs)
        for batch in dataset.to_batches(columns=read.names):
            if not batch.num_rows:
                continue
            columns = []
            for f in schema:
                if f.name == "trial_id":
                    columns.append(pa.array([part.trial_id] * batch.num_rows, pa.string()))
                elif f.name == RANK:
                    rank = batch.column(RANK)
                    columns.append(pc.fill_null(rank, pa.scalar(part.name_rank, rank.type)))
                else:
                    columns.append(batch.column(f.name))
            yield pa.RecordBatch.from_arrays(columns, schema=schema)
    except FileNotFoundError as e:
        raise StorageError(
            f"{part.shown} is gone since the group was listed (a compaction replaced it, "
            "or the trial was recorded again): run the query again") from e
