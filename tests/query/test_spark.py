"""The Spark recipe of docs/QUERYING.md (issue 19, whole-group queries): pyspark in local
mode reads a group recorded by the real recorder and its aggregate equals DuckDB's.

Slow (a JVM starts). ``bash scripts/dev.sh test`` installs pyspark and Java and sets
REQUIRE_SPARK=1, which makes a missing pyspark or Java a failure instead of a skip.
The "comgra" data source (``comgra_like/query/spark.py``) is tested here on disk and in
tests/s3/test_spark_s3.py on an S3-compatible server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from comgra_like.format.layout import compact_name
from comgra_like.query import shard_files, sql

from .helpers import one_shard_per_step

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning")]

REQUIRED = os.environ.get("REQUIRE_SPARK") == "1"

LARGEST_GRADIENT_NORM = """
    SELECT trial_id, node, max(norm) AS max_norm, count(*) AS n
    FROM tensors
    WHERE recording_type LIKE 'gradient:%' AND aggregation IN ('none', 'batch_abs_max')
    GROUP BY trial_id, node ORDER BY trial_id, node
"""


def _java_runs() -> bool:
    try:
        return subprocess.run(["java", "-version"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


@pytest.fixture(scope="module")
def spark():
    if REQUIRED:
        import pyspark  # noqa: F401 - a failure here says what is missing
        assert _java_runs(), "no Java: bash scripts/dev.sh setup-test installs it"
    else:
        pytest.importorskip("pyspark")
        if not _java_runs():
            pytest.skip("no Java to run Spark (bash scripts/dev.sh setup-test installs it)")
    with pytest.MonkeyPatch.context() as mp:
        session = start_spark(mp)
        yield session
        session.stop()


def start_spark(mp: pytest.MonkeyPatch, **config: str):
    """A local-mode session whose Python workers (the "comgra" data source's planning
    and reading) run this interpreter, which has comgra_like: PYSPARK_PYTHON is read when
    the session's context is made."""
    from pyspark.sql import SparkSession

    mp.setenv("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master("local[2]").appName("comgra_like-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for key, value in config.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def group(tmp_path_factory, tiny_group):
    """The tiny group plus trial_c: trial_b's data with a compaction caught between
    writing compact-00000000-00000002 and deleting its parts, and a hidden file."""
    path = shutil.copytree(tiny_group, tmp_path_factory.mktemp("spark") / "g")
    trial = path / "trials" / "trial_c"
    shutil.copytree(path / "trials" / "trial_b", trial)
    one_shard_per_step(trial)
    folder = trial / "tensors"
    parts = [folder / f"part-{n:08d}.parquet" for n in range(3)]
    pq.write_table(pa.concat_tables([pq.read_table(p) for p in parts]),
                   folder / compact_name(0, 2))
    shutil.copy(parts[0], folder / ".part-00000099.tmp")
    return path


def _spark_tensors(spark, group):
    """docs/QUERYING.md's recipe: the live shards, schemas merged, trial_id from the path."""
    from pyspark.sql import functions as F

    files = [p for paths in shard_files(group, "tensors").values() for p in paths]
    return (spark.read.option("mergeSchema", "true").parquet(*files)
            .withColumn("trial_id", F.regexp_extract(
                F.col("_metadata.file_path"), r"/trials/([^/]+)/tensors/[^/]+$", 1)))


def test_spark_and_duckdb_agree_on_the_largest_gradient_norms(spark, group):
    from pyspark.sql import functions as F

    tensors = _spark_tensors(spark, group)
    rows = (tensors.where(F.col("recording_type").startswith("gradient:")
                          & F.col("aggregation").isin("none", "batch_abs_max"))
            .groupBy("trial_id", "node")
            .agg(F.max("norm").alias("max_norm"), F.count("*").alias("n"))
            .orderBy("trial_id", "node").collect())
    got = [(r["trial_id"], r["node"], float(r["max_norm"]), int(r["n"])) for r in rows]
    expected = sql(group, LARGEST_GRADIENT_NORM)
    want = [(t, node, float(m), int(n)) for t, node, m, n in expected.itertuples(index=False)]
    assert {t for t, *_ in got} == {"trial_a", "trial_b", "trial_c"}
    assert len(got) > 10
    assert got == want
    # trial_c holds trial_b's rows once, although its parts 0..2 are still on disk
    by_trial = {}
    for t, node, m, n in got:
        by_trial.setdefault(t, []).append((node, m, n))
    assert by_trial["trial_c"] == by_trial["trial_b"]


def test_a_plain_glob_counts_the_merged_parts_twice(spark, group):
    """Why the recipe lists the live shards: the glob also matches parts a compaction
    merged and has not deleted yet (Spark skips the hidden name by itself)."""
    total = sql(group, "SELECT count(*) AS n FROM tensors")["n"][0]
    assert _spark_tensors(spark, group).count() == total
    globbed = spark.read.option("mergeSchema", "true").parquet(
        str(group / "trials" / "*" / "tensors" / "*.parquet")).count()
    merged = sum(pq.read_metadata(group / "trials" / "trial_c" / "tensors"
                                  / f"part-{n:08d}.parquet").num_rows for n in range(3))
    assert globbed == total + merged


def comgra_largest_norms(spark, path: str) -> list[tuple]:
    """The issue's aggregate through the "comgra" data source, as LARGEST_GRADIENT_NORM
    per trial, rank and node."""
    from pyspark.sql import functions as F

    from comgra_like.query.spark import register

    register(spark)
    tensors = (spark.read.format("comgra").option("path", path).option("table", "tensors")
               .option("columns", "trial_id,rank,node,recording_type,aggregation,norm").load())
    found = (tensors.where(F.col("recording_type").startswith("gradient:")
                           & F.col("aggregation").isin("none", "batch_abs_max"))
             .groupBy("trial_id", "rank", "node")
             .agg(F.max("norm").alias("max_norm"), F.count("*").alias("n"))
             .orderBy("trial_id", "rank", "node").collect())
    return [(r["trial_id"], int(r["rank"]), r["node"], float(r["max_norm"]), int(r["n"]))
            for r in found]


def test_the_comgra_data_source_reads_the_live_shards_as_duckdb(spark, group):
    """spark.read.format("comgra"): one partition per live shard, trial_id from the
    folder, the merged parts and the hidden file of trial_c not read."""
    from comgra_like.query.spark import register

    by_rank = LARGEST_GRADIENT_NORM.replace("trial_id, node", "trial_id, rank, node")
    want = [(t, int(r), node, float(m), int(n))
            for t, r, node, m, n in sql(group, by_rank).itertuples(index=False)]
    assert comgra_largest_norms(spark, str(group)) == want
    register(spark)
    steps = spark.read.format("comgra").option("path", str(group)).option("table", "steps")
    assert steps.load().count() == sql(group, "SELECT count(*) AS n FROM steps")["n"][0]
    tensors = spark.read.format("comgra").option("path", str(group)).load()
    assert tensors.rdd.getNumPartitions() == sum(
        len(paths) for paths in shard_files(group, "tensors").values())
    assert tensors.columns[0] == "trial_id" and "values" in tensors.columns


def test_the_comgra_data_source_says_what_was_wrong(spark, group, tmp_path):
    from comgra_like.query.spark import register

    register(spark)
    with pytest.raises(Exception, match="no table 'nope'|table='nope'"):
        spark.read.format("comgra").option("path", str(group)).option("table", "nope").load()
    with pytest.raises(Exception, match="no column nope in tensors"):
        spark.read.format("comgra").option("path", str(group)).option("columns", "nope").load()
    with pytest.raises(Exception, match="not a group folder"):
        spark.read.format("comgra").option("path", str(tmp_path / "missing")).load()


def test_without_pyspark_the_module_names_the_extra():
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from comgra_like.errors import ConfigurationError\n"
            "try:\n"
            "    import comgra_like.query.spark\n"
            "except ConfigurationError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install comgra-like[spark]" in out
