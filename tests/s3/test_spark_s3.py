"""Spark over a group on S3 (issue 19, whole-group queries): the "comgra" data source
(comgra_like/query/spark.py) reads a group the real recorder wrote to an S3-compatible
server, and the issue's aggregate equals DuckDB's on S3, DuckDB's on disk and Spark's on
disk, exactly.

Slow (a JVM starts); skipped without pyspark or Java unless REQUIRE_SPARK=1.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from comgra_like.format.files import files_for, s3_options
from comgra_like.format.layout import part_name, shard_seqs
from comgra_like.query import sql
from tests.query.test_spark import REQUIRED, _java_runs, comgra_largest_norms, start_spark

from .conftest import use_server
from .sql_group import GROUP, LARGEST_GRADIENT_NORM, RANKS, TRIALS, record_group, rows

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning")]

AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL")


@pytest.fixture(scope="module")
def setup(s3_server, tmp_path_factory):
    """(spark, the group on S3, the same group on disk)."""
    if REQUIRED:
        import pyspark  # noqa: F401 - a failure here says what is missing
        assert _java_runs(), "no Java: bash scripts/dev.sh setup-test installs it"
    else:
        pytest.importorskip("pyspark")
        if not _java_runs():
            pytest.skip("no Java to run Spark (bash scripts/dev.sh setup-test installs it)")
    pytest.importorskip("duckdb")
    with pytest.MonkeyPatch.context() as mp:
        root = use_server(mp, s3_server)
        remote = record_group(root, mp)
        local = record_group(tmp_path_factory.mktemp("disk"), mp)
        # The executors' S3 settings, as on a cluster: the same AWS_* variables the
        # recorder used, given to the executors' environment (a JVM started earlier in
        # this process does not have them in its own).
        env = {f"spark.executorEnv.{k}": os.environ[k] for k in AWS_VARIABLES}
        spark = start_spark(mp, **env)
        yield spark, remote, Path(local)
        spark.stop()


def _duckdb_by_rank(group) -> list[tuple]:
    return rows(sql(group, LARGEST_GRADIENT_NORM))


def test_spark_and_duckdb_on_s3_and_on_disk_give_the_same_largest_gradient_norms(setup):
    spark, remote, local = setup
    duckdb_disk, duckdb_s3 = _duckdb_by_rank(local), _duckdb_by_rank(remote)
    spark_disk, spark_s3 = comgra_largest_norms(spark, str(local)), \
        comgra_largest_norms(spark, remote)
    assert {(t, r) for t, r, *_ in duckdb_disk} == {(t, r) for t in TRIALS for r in RANKS}
    assert len(duckdb_disk) > 10
    assert duckdb_s3 == duckdb_disk
    assert spark_disk == duckdb_disk
    assert spark_s3 == duckdb_disk


def _fs() -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**s3_options())


def _key(location: str) -> str:
    return files_for(location).key(location)


def _copy(group: str) -> str:
    target = f"{group.rsplit('/', 2)[0]}/{uuid.uuid4().hex[:8]}/{GROUP}"
    pafs.copy_files(_key(group), _key(target), source_filesystem=_fs(),
                    destination_filesystem=_fs())
    return target


def _object(group: str, rest: str, data: bytes | None = None) -> bytes:
    """Read an object of the group, or replace it with ``data``."""
    if data is None:
        with _fs().open_input_stream(f"{_key(group)}/{rest}") as f:
            return f.read()
    with _fs().open_output_stream(f"{_key(group)}/{rest}") as f:
        f.write(data)
    return data


def _count(spark, group: str, **options: str) -> int:
    reader = spark.read.format("comgra").option("path", group).option("table", "tensors")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.option("columns", "trial_id,rank").load().count()


def test_spark_reads_neither_hidden_nor_superseded_objects_on_s3(setup):
    spark, remote, _ = setup
    group = _copy(remote)
    folder = "trials/trial_a/tensors"
    compact = min(i.base_name for i in _fs().get_file_info(
        pafs.FileSelector(f"{_key(group)}/{folder}")))
    data = _object(group, f"{folder}/{compact}")
    first, last = shard_seqs(compact)[1:]
    _object(group, f"{folder}/{part_name(first)}", data)  # merged, not deleted yet
    _object(group, f"{folder}/.{part_name(last + 1)}.tmp", data)  # being written
    total = sql(group, "SELECT count(*) AS n FROM tensors")["n"][0]
    assert total == sql(remote, "SELECT count(*) AS n FROM tensors")["n"][0]
    assert _count(spark, group) == total


def test_a_damaged_object_on_s3_is_left_out_or_raised_by_spark(setup):
    spark, remote, _ = setup
    group = _copy(remote)
    folder = "trials/trial_b/tensors"
    compact = min(i.base_name for i in _fs().get_file_info(
        pafs.FileSelector(f"{_key(group)}/{folder}")))
    _object(group, f"{folder}/{compact}", b"PAR1 not a parquet file")
    expected = sql(group, "SELECT count(*) AS n FROM tensors")
    assert [s.path for s in expected.attrs["skipped"]] == [f"{group}/{folder}/{compact}"]
    assert _count(spark, group) == expected["n"][0]
    with pytest.raises(Exception, match=f"damaged files in {group}: {group}/{folder}/{compact}"):
        _count(spark, group, damaged="raise")
