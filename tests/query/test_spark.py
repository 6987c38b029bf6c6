"""The Spark recipe of docs/QUERYING.md (issue 19, whole-group queries): pyspark in local
mode reads a group recorded by the real recorder and its aggregate equals DuckDB's.

Slow (a JVM starts). ``bash scripts/dev.sh test`` installs pyspark and Java and sets
REQUIRE_SPARK=1, which makes a missing pyspark or Java a failure instead of a skip.
The same aggregate over a group on an S3-compatible server comes with the object
storage work (issue 19, "Object storage").
"""

from __future__ import annotations

import os
import shutil
import subprocess

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
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("comgra_like-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
