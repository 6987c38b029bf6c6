"""Whole-group SQL over a group on S3 (issue 19): DuckDB reads the objects through the
filesystem seam (pyarrow's S3FileSystem; DuckDB's httpfs is not used) and answers as it
does for the same group on disk, with the same rules for what is read."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from comgra_like.errors import NotFoundError, StorageError
from comgra_like.format.files import files_for, s3_options
from comgra_like.format.layout import TABLES, part_name, shard_seqs
from comgra_like.query import connect, shard_files, sql

from .conftest import use_server
from .sql_group import GROUP, LARGEST_GRADIENT_NORM, RANKS, TRIALS, record_group, rows

pytest.importorskip("duckdb")

# Columns whose values depend on when a row was written, not on what was recorded.
TIME_COLUMNS = {"wall_time", "created", "ended", "versions"}


@pytest.fixture(scope="module")
def groups(s3_server, tmp_path_factory):
    """(the group on S3, the same group on disk), recorded by the real recorder."""
    with pytest.MonkeyPatch.context() as mp:
        root = use_server(mp, s3_server)
        remote = record_group(root, mp)
        local = record_group(tmp_path_factory.mktemp("disk"), mp)
        yield remote, Path(local)


def _fs() -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**s3_options())


def _key(location: str) -> str:
    return files_for(location).key(location)


def _copy(group: str) -> str:
    """A copy of a group under a new prefix (for tests that change it)."""
    target = f"{group.rsplit('/', 2)[0]}/{uuid.uuid4().hex[:8]}/{GROUP}"
    pafs.copy_files(_key(group), _key(target), source_filesystem=_fs(),
                    destination_filesystem=_fs())
    return target


def _names(group: str, trial: str, table: str) -> list[str]:
    return sorted(i.base_name for i in _fs().get_file_info(
        pafs.FileSelector(f"{_key(group)}/trials/{trial}/{table}", allow_not_found=True)))


def _put(group: str, rest: str, data: bytes) -> str:
    with _fs().open_output_stream(f"{_key(group)}/{rest}") as f:
        f.write(data)
    return f"{group}/{rest}"


def _get(group: str, rest: str) -> bytes:
    with _fs().open_input_stream(f"{_key(group)}/{rest}") as f:
        return f.read()


def test_the_largest_gradient_norms_on_s3_equal_those_on_disk(groups):
    remote, local = groups
    got, want = sql(remote, LARGEST_GRADIENT_NORM), sql(local, LARGEST_GRADIENT_NORM)
    assert rows(got) == rows(want)
    assert got.attrs["skipped"] == []
    # every trial and both ranks, with data that differs between the ranks
    assert {(t, r) for t, r, *_ in rows(got)} == {(t, r) for t in TRIALS for r in RANKS}
    by = {}
    for t, r, node, m, _ in rows(got):
        by.setdefault((t, r), {})[node] = m
    assert by[("trial_a", 0)] != by[("trial_a", 1)]
    # compaction ran on the store: one compact object per rank, the parts deleted
    assert [shard_seqs(n)[0] for n in _names(remote, "trial_a", "tensors")] == [0, 1]
    assert all(n.startswith("compact-") for n in _names(remote, "trial_a", "tensors"))


def test_every_table_reads_the_same_rows_and_columns_on_s3(groups):
    remote, local = groups
    on_s3, on_disk = connect(remote), connect(local)
    assert on_s3.location == remote and on_s3.trial_ids() == list(TRIALS)
    for table in (*TABLES, "notes", "trials"):
        columns = on_disk.sql(f"SELECT * FROM {table} LIMIT 0").columns.tolist()
        assert on_s3.sql(f"SELECT * FROM {table} LIMIT 0").columns.tolist() == columns
        kept = ", ".join(c for c in columns if c not in TIME_COLUMNS)
        query = f"SELECT {kept} FROM {table} ORDER BY ALL"
        got, want = on_s3.sql(query, arrow=True), on_disk.sql(query, arrow=True)
        assert got.num_rows == want.num_rows and got.equals(want), table
    per_rank = "SELECT trial_id, rank, count(*) FROM steps GROUP BY ALL ORDER BY ALL"
    assert len(rows(on_s3.sql(per_rank))) == len(TRIALS) * len(RANKS)
    assert on_s3.sql("SELECT DISTINCT status FROM trials")["status"].tolist() == ["finished"]


def test_duckdb_pushes_columns_and_filters_into_the_s3_scan(groups):
    remote, _ = groups
    db = connect(remote)
    plan = "\n".join(r[1] for r in db.connection.sql(
        "EXPLAIN SELECT node, max(norm) FROM tensors WHERE aggregation = 'batch_abs_max' "
        "AND trial_id = 'trial_b' GROUP BY node").fetchall())
    scan = plan[plan.index("PYTHON_ARROW_SCAN"):]
    # only the columns the query names are read (not the values lists) ...
    projections = scan[scan.index("Projections:"):]
    assert "norm" in projections and "node" in projections and "values" not in projections
    # ... and the filters reach pyarrow, which skips row groups and other trials' objects
    assert "Filters:" in scan and "batch_abs_max" in scan and "trial_b" in scan
    only_b = db.sql("SELECT DISTINCT trial_id FROM tensors WHERE trial_id = 'trial_b'")
    assert only_b["trial_id"].tolist() == ["trial_b"]


def test_a_filter_on_trial_id_leaves_the_other_trials_objects_unread(groups):
    """trial_a's objects are damaged after the listing (footers intact, pages not): a
    query of trial_b alone answers without touching them, one of every trial finds them."""
    remote, local = groups
    group = _copy(remote)
    db = connect(group)
    folder = "trials/trial_a/tensors"
    for name in _names(group, "trial_a", "tensors"):
        data = _get(group, f"{folder}/{name}")
        footer = int.from_bytes(data[-8:-4], "little") + 8
        _put(group, f"{folder}/{name}", data[:4] + b"\x07" * (len(data) - 4 - footer)
             + data[-footer:])
    query = "SELECT rank, count(*) AS n, sum(norm) AS s FROM tensors " \
            "WHERE trial_id = 'trial_b' GROUP BY ALL ORDER BY ALL"
    assert rows(db.sql(query)) == rows(sql(local, query))
    assert db.skipped == []
    db.sql("SELECT sum(norm) FROM tensors")
    assert sorted(s.path for s in db.skipped) == [
        f"{group}/{folder}/{n}" for n in _names(group, "trial_a", "tensors")]


def test_hidden_and_superseded_objects_on_s3_are_not_read(groups):
    remote, local = groups
    group = _copy(remote)
    folder = "trials/trial_a/tensors"
    compacts = _names(group, "trial_a", "tensors")  # one per rank
    compact = compacts[0]
    data = _get(group, f"{folder}/{compact}")
    first, last = shard_seqs(compact)[1:]
    # a compaction's merged parts not deleted yet (a killed process), and an object
    # with a hidden name: both hold rows that would count twice
    _put(group, f"{folder}/{part_name(first)}", data)
    _put(group, f"{folder}/{part_name(last)}", data)
    _put(group, f"{folder}/.{part_name(last + 1)}.tmp", data)
    count = "SELECT trial_id, rank, count(*) AS n, sum(norm) AS s FROM tensors GROUP BY ALL " \
            "ORDER BY ALL"
    got = sql(group, count)
    assert rows(got) == rows(sql(local, count))
    assert got.attrs["skipped"] == []
    # the files another engine should read: the compact objects, as s3:// URIs
    assert shard_files(group, "tensors")["trial_a"] == [f"{group}/{folder}/{n}"
                                                        for n in compacts]


def test_a_damaged_object_on_s3_is_reported_and_left_out(groups):
    remote, _ = groups
    group = _copy(remote)
    folder = "trials/trial_b/tensors"
    before = sql(group, "SELECT count(*) AS n FROM tensors")["n"][0]
    compact = _names(group, "trial_b", "tensors")[0]
    rows_b0 = pq.read_metadata(pa.BufferReader(_get(group, f"{folder}/{compact}"))).num_rows
    victim = _put(group, f"{folder}/{compact}", b"PAR1 not a parquet file at all")
    got = sql(group, "SELECT count(*) AS n FROM tensors")
    assert got["n"][0] == before - rows_b0
    assert [(s.path, s.reason.split(" (")[0]) for s in got.attrs["skipped"]] == [
        (victim, "unreadable shard")]
    with pytest.raises(StorageError, match=f"damaged files in {group}: {victim}"):
        sql(group, "SELECT count(*) FROM tensors", damaged="raise")


def test_an_object_damaged_after_the_listing_is_found_while_reading(groups):
    """Its footer is intact (the listing's check passes), its pages are not."""
    remote, _ = groups
    group = _copy(remote)
    folder = "trials/trial_b/tensors"
    db = connect(group)
    before = db.sql("SELECT count(*) AS n FROM tensors")["n"][0]
    compact = _names(group, "trial_b", "tensors")[0]
    data = _get(group, f"{folder}/{compact}")
    lost = pq.read_metadata(pa.BufferReader(data)).num_rows
    footer = int.from_bytes(data[-8:-4], "little") + 8
    victim = _put(group, f"{folder}/{compact}",
                  data[:4] + b"\x07" * (len(data) - 4 - footer) + data[-footer:])
    after = db.sql("SELECT count(*) AS n, sum(norm) AS s FROM tensors")
    assert after["n"][0] == before - lost
    assert [s.path for s in db.skipped] == [victim]


def test_a_compaction_after_the_listing_is_followed_on_s3(s3):
    """The parts a connection listed are replaced by a compaction before the query
    runs: the group is listed again and the query answers the same."""
    from tests.conftest import TinyRun

    run = TinyRun(s3, GROUP, "live", record_steps=range(6), seed=3)
    for step in range(6):
        run.step(step)
        run.recorder.flush()
    db = connect(f"{s3}/{GROUP}")
    assert all(n.startswith("part-") for n in _names(f"{s3}/{GROUP}", "live", "tensors"))
    query = "SELECT count(*) AS n, sum(norm) AS s, max(training_step) AS last FROM tensors"
    before = db.sql(query)
    run.finalize()
    names = _names(f"{s3}/{GROUP}", "live", "tensors")
    assert len(names) == 1 and names[0].startswith("compact-")
    assert rows(db.sql(query)) == rows(before)
    assert db.skipped == []
    # listed again: the trial's new status shows without a refresh()
    assert db.sql("SELECT status FROM trials")["status"].tolist() == ["finished"]


def test_an_empty_s3_prefix_says_what_to_pass(s3):
    with pytest.raises(NotFoundError, match="nothing is stored under s3://"):
        sql(f"{s3}/nothing", "SELECT 1")
