"""The whole-group SQL views and the flight windows when the store cannot be read *now*
(issue 28, the rest of test_store_unreachable.py): a read that fails for a reason that
may pass fails that listing or that query with a StorageError that says so; it never
leaves a trial, a file or a window out without a word, and never marks a file damaged
for good. The next query or refresh reads it again. Truly damaged files and records are
still skipped as before. The store is the flaky seam of ``flaky.py``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import comgra_like.format.flight as flight_module
import comgra_like.query.group_files as group_files_module
from comgra_like.errors import StorageError
from comgra_like.format.flight import STATS_SCHEMA, list_windows, write_window
from comgra_like.query import open_group
from comgra_like.query.sql import connect

from .flaky import ALWAYS, FlakyFiles, io_error
from .test_store_unreachable import (  # noqa: F401 - group: a fixture
    RECORDED,
    TRIALS,
    group,
    hold_back_last_shard,
)

duckdb = pytest.importorskip("duckdb")

NOW = "could not be read now"


@pytest.fixture
def flaky(monkeypatch) -> FlakyFiles:
    """A flaky seam under every group the SQL views and the flight reader look at."""
    files = FlakyFiles()
    monkeypatch.setattr(group_files_module, "files_for", lambda path: files)
    monkeypatch.setattr(flight_module, "files_for", lambda path: files)
    return files


def count(db, table: str, trial_id: str | None = None) -> int:
    where = "" if trial_id is None else f" WHERE trial_id = '{trial_id}'"
    return int(db.sql(f"SELECT count(*) AS n FROM {table}{where}")["n"][0])


def step_list(db, trial_id: str) -> list[int]:
    return db.sql(f"SELECT DISTINCT training_step FROM steps WHERE trial_id = '{trial_id}' "
                  "ORDER BY 1")["training_step"].tolist()


# --- the listing ----------------------------------------------------------------------------


def test_a_trial_json_that_could_not_be_read_now_fails_the_listing(group, flaky):  # noqa: F811
    flaky.fail("read_bytes", "trial_b/trial.json", 1)
    with pytest.raises(StorageError, match=NOW) as raised:
        connect(group)  # never views without trial_b
    assert "trial_b/trial.json" in str(raised.value)
    db = connect(group)  # the store answers again
    assert sorted(db.trial_ids()) == TRIALS
    assert db.skipped == []


def test_a_footer_that_could_not_be_read_now_is_not_marked_damaged(group, flaky):  # noqa: F811
    last, kept = hold_back_last_shard(group)
    db = connect(group)
    assert step_list(db, "trial_a") == RECORDED[:-1]
    last.write_bytes(kept)  # the writer's next shard
    flaky.fail("parquet_metadata", last.name, 1)
    with pytest.raises(StorageError, match=NOW):
        db.refresh()
    assert step_list(db, "trial_a") == RECORDED[:-1]  # the views as they were
    assert db.skipped == []
    db.refresh()  # the same shard, the same signature: read again, not remembered
    assert step_list(db, "trial_a") == RECORDED
    assert db.skipped == []


def test_a_table_folder_that_cannot_be_listed_now_fails_the_listing(group, monkeypatch):  # noqa: F811
    """The local disk's listing with signatures answered {} on any error: the trial's
    steps vanished from the views without a word."""
    steps = group / "trials" / "trial_a" / "steps"
    scandir = os.scandir

    def failing(path="."):
        if Path(path) == steps:
            raise OSError(errno.EIO, "Input/output error (simulated)", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", failing)
    with pytest.raises(StorageError, match="cannot list") as raised:
        connect(group)
    assert "Input/output error" in str(raised.value)
    monkeypatch.setattr(os, "scandir", scandir)
    assert step_list(connect(group), "trial_a") == RECORDED


# --- a query's read -------------------------------------------------------------------------


class FailingOnce:
    """A DuckDB connection whose next queries fail as a read of a file fails."""

    def __init__(self, con, *errors):
        self._con = con
        self.errors = list(errors)

    def sql(self, query):
        if self.errors:
            raise self.errors.pop(0)
        return self._con.sql(query)

    def __getattr__(self, name):
        return getattr(self._con, name)


def io_failure(path: Path) -> Exception:
    return duckdb.IOException(f'IO Error: Could not read from file "{path}": '
                              "Input/output error")


def tensors_shard(path: Path) -> Path:
    return sorted((path / "trials" / "trial_a" / "tensors").glob("*.parquet"))[2]


def test_a_query_whose_read_failed_now_raises_and_marks_nothing(group, flaky):  # noqa: F811
    db = connect(group)
    whole = count(db, "tensors")
    shard = tensors_shard(group)
    db._con = FailingOnce(db._con, io_failure(shard))
    flaky.fail("read_parquet", shard.name, ALWAYS, io_error)  # the store is still away
    with pytest.raises(StorageError, match=NOW) as raised:
        count(db, "tensors")
    assert shard.name in str(raised.value)
    assert db.skipped == []
    flaky.heal()
    assert count(db, "tensors") == whole  # nothing was left out for good
    db.refresh()
    assert count(db, "tensors") == whole and db.skipped == []


def test_a_query_whose_read_failed_once_is_answered_whole(group, flaky):  # noqa: F811
    db = connect(group)
    whole = count(db, "tensors")
    shard = tensors_shard(group)
    db._con = FailingOnce(db._con, io_failure(shard))  # the file reads again at once
    assert count(db, "tensors") == whole
    assert db.skipped == []


def test_a_damaged_file_found_by_a_query_is_still_left_out(group, flaky):  # noqa: F811
    db = connect(group)
    shard = tensors_shard(group)
    rows = count(db, "tensors")
    shard.write_bytes(b"PAR1 not a parquet file at all PAR1")
    os.utime(shard, ns=(0, 0))  # the listing's signature differs; the views name it
    answered = count(db, "tensors")
    assert 0 < answered < rows
    assert [Path(s.path).name for s in db.skipped] == [shard.name]
    assert "unreadable shard" in db.skipped[0].reason


# --- flight windows -------------------------------------------------------------------------


def windows(trial: Path, n: int) -> list[str]:
    stats = {f.name: [] for f in STATS_SCHEMA}
    return [write_window(trial, seq, 0, {"kind": "loss_spike", "step": 10 * seq,
                                         "window": [10 * seq - 3, 10 * seq]}, stats, [])
            for seq in range(1, n + 1)]


def test_a_flight_window_that_could_not_be_read_now_is_not_left_out(group):  # noqa: F811
    trial = group / "trials" / "trial_a"
    names = windows(trial, 3)
    files = FlakyFiles()
    files.fail("read_json", f"{names[1]}.json", 1)
    with pytest.raises(StorageError, match=NOW) as raised:
        list_windows(trial, files)  # never the list without it
    assert names[1] in str(raised.value)
    assert [w["name"] for w in list_windows(trial, files)] == names


def test_flight_triggers_during_a_read_outage_raise_and_come_back(group, flaky):  # noqa: F811
    trial = group / "trials" / "trial_a"
    names = windows(trial, 3)
    damaged = trial / "flight" / "0009-r0-step90.json"
    damaged.write_text("{ not json")  # truly damaged: skipped as before
    g = open_group(group)
    flaky.fail("read_json", f"{names[2]}.json", ALWAYS, io_error)
    with pytest.raises(StorageError, match=NOW):
        g.list_flight_triggers("trial_a")
    flaky.heal()
    assert [t.name for t in g.list_flight_triggers("trial_a")] == names
