"""A store that cannot be read *now* is not a store without the file (issue 28, "an S3
outage survived", the reader's side): a read that fails for a reason that may pass
(connection refused, a timeout, an I/O error) never rejects a trial, forgets one or marks
a file damaged for good. What was known stays, the failure is reported (``skipped``, the
GUI's banner) and the next refresh reads it again. Files that really are damaged are
still reported once and left alone.

The store here is the local disk with a seam that fails the calls a test chooses, the
way an object store that refuses connections fails them (``flaky.py``; the whole-group
SQL views and the flight windows: ``test_store_unreachable_sql.py``).
tests/s3/test_read_outage.py does the same against a real S3 server behind a relay that
is shut."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import comgra_like.query.index as index_module
import comgra_like.query.tensors as tensors_module
from comgra_like.errors import StorageError, UnsafePathError
from comgra_like.format import files as files_module
from comgra_like.format.layout import compact_name
from comgra_like.query import open_group
from comgra_like.query.index import GroupIndex

from .flaky import ALWAYS, FlakyFiles, io_error, refused, timed_out
from .helpers import copy_group, one_shard_per_step

TRIALS = ["trial_a", "trial_b"]
RECORDED = [0, 1, 4, 5, 8, 9, 10]


@pytest.fixture
def group(tiny_group, tmp_path) -> Path:
    """Two finished trials, their steps and tensors one shard per recorded step."""
    path = copy_group(tiny_group, tmp_path / "g")
    for trial_id in TRIALS:
        one_shard_per_step(path / "trials" / trial_id)
    return path


@pytest.fixture
def flaky(monkeypatch) -> FlakyFiles:
    """A flaky seam under every group the query API opens (index and tensor reads)."""
    files = FlakyFiles()
    monkeypatch.setattr(index_module, "files_for", lambda path: files)
    monkeypatch.setattr(tensors_module, "files_for", lambda path: files)
    return files


def ids(index) -> list[str]:
    return [t.trial_id for t in index.trials()]


def steps(index, trial_id: str) -> list[int]:
    return sorted({int(s) for s in index.trial(trial_id).steps["training_step"]})


def tensor_steps(index, trial_id: str) -> list[int]:
    files = index.trial(trial_id).tensor_files.values()
    return sorted({s for f in files for s in RECORDED if f.serves(s)})


def now_unreadable(index) -> list[str]:
    """The skipped paths reported as "could not be read now", inside the group."""
    return sorted(Path(s.path).relative_to(index.path / "trials").as_posix()
                  for s in index.skipped if "could not be read now" in s.reason)


def whole(index) -> None:
    """Every trial, every step and every tensors shard listed; nothing skipped."""
    assert ids(index) == TRIALS
    for trial_id in TRIALS:
        assert steps(index, trial_id) == RECORDED, trial_id
        assert tensor_steps(index, trial_id) == RECORDED, trial_id
    assert index.skipped == []


def hold_back_last_shard(group) -> tuple:
    """trial_a's last steps shard taken away (the writer's next shard, put back by the
    test): its path and its bytes."""
    last = max((group / "trials" / "trial_a" / "steps").glob("*.parquet"))
    kept = last.read_bytes()
    last.unlink()
    return last, kept


# --- what an error says --------------------------------------------------------------------


@pytest.mark.parametrize("error, now", [
    (FileNotFoundError(errno.ENOENT, "No such file or directory"), False),
    (FileNotFoundError("bucket/key"), False),  # pyarrow's, without an errno
    (NotADirectoryError(errno.ENOTDIR, "Not a directory"), False),
    (ConnectionRefusedError("refused"), True),
    (TimeoutError("timed out"), True),
    (OSError(errno.EIO, "Input/output error"), True),
    (OSError(errno.ESTALE, "Stale file handle"), True),
    (OSError("When reading information for key 'p/x.json' in bucket 'b': AWS Error "
             "NETWORK_CONNECTION during HeadObject operation: curlCode: 7"), True),
    (OSError("AWS Error SERVICE_UNAVAILABLE (HTTP status 503) during GetObject"), True),
    (OSError("AWS Error NO_SUCH_KEY during GetObject operation"), False),
    (OSError("Couldn't deserialize thrift: don't know what type"), False),  # damaged
    (OSError("Corrupt snappy compressed data."), False),
    (pa.ArrowInvalid("Parquet magic bytes not found in footer"), False),
    (ValueError("Expecting value: line 1 column 1"), False),
    (UnsafePathError("a symbolic link"), False),
])

def test_an_error_says_whether_the_file_could_not_be_read_now(error, now):
    assert files_module.unreachable(error) is now


# --- trial.json -----------------------------------------------------------------------------


def test_a_fresh_open_during_a_read_outage_lists_every_trial_or_raises(group, flaky):
    flaky.fail("read_json", "trial_b/trial.json", ALWAYS)
    try:
        listed = [t.trial_id for t in open_group(group).list_trials()]
    except StorageError as e:
        assert "trial_b/trial.json" in str(e) and "could not be read" in str(e), str(e)
    else:
        assert listed == TRIALS  # never a listing that silently leaves trial_b out
    flaky.heal()
    assert [t.trial_id for t in open_group(group).list_trials()] == TRIALS


@pytest.mark.parametrize("error", [refused, io_error, timed_out])
def test_a_trial_json_that_could_not_be_read_once_is_listed_at_the_next_update(
        group, error):
    files = FlakyFiles()
    files.fail("read_json", "trial_b/trial.json", 1, error)
    index = GroupIndex(group, files)
    report = index.update().report
    assert ids(index) == ["trial_a"]
    # said once, as a damaged file is, and not as damage
    assert [Path(s.path).name for s in report.skipped] == ["trial.json"]
    assert now_unreadable(index) == ["trial_b/trial.json"]
    report = index.update().report  # the store answers again: no restart needed
    assert report.new_trials == ["trial_b"]
    whole(index)
    assert index.update().report.skipped == []


def test_a_listed_trial_keeps_its_info_while_its_trial_json_cannot_be_read(group):
    files = FlakyFiles()
    index = GroupIndex(group, files)
    index.update()
    info = group / "trials" / "trial_a" / "trial.json"
    data = json.loads(info.read_text())
    data["status"] = "aborted"
    info.write_text(json.dumps(data))
    files.fail("read_json", "trial_a/trial.json", 2)
    for _ in range(2):
        report = index.update().report
        assert ids(index) == TRIALS
        assert index.trial("trial_a").info.status == "finished"  # what was known stays
        assert now_unreadable(index) == ["trial_a/trial.json"]
    assert len(report.skipped) == 0  # reported once
    report = index.update().report
    assert report.changed_trials["trial_a"].status_changed
    assert index.trial("trial_a").info.status == "aborted"
    whole(index)


# --- shards ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method, part", [("read_parquet", "trial_a/steps/"),
                                          ("parquet_metadata", "trial_a/tensors/")])
def test_a_shard_that_could_not_be_read_once_is_read_at_the_next_update(group, method,
                                                                        part):
    files = FlakyFiles()
    files.fail(method, part, 1)
    index = GroupIndex(group, files)
    report = index.update().report
    assert ids(index) == TRIALS
    assert [s for s in report.skipped if "could not be read now" in s.reason]
    assert now_unreadable(index)[0].startswith(part)
    index.update()
    whole(index)
    assert not [(m, p) for (m, p), n in files.calls.items() if n > 2 and m == method]


def test_a_new_shard_that_could_not_be_read_once_is_read_at_the_next_update(group):
    files = FlakyFiles()
    last, kept = hold_back_last_shard(group)
    index = GroupIndex(group, files)
    index.update()
    assert steps(index, "trial_a") == RECORDED[:-1]
    last.write_bytes(kept)  # the writer's next shard
    files.fail("read_parquet", last.name, 1, io_error)
    report = index.update().report
    assert steps(index, "trial_a") == RECORDED[:-1]  # nothing lost, nothing new yet
    assert now_unreadable(index) == [f"trial_a/steps/{last.name}"]
    assert report.skipped
    report = index.update().report
    assert report.changed_trials["trial_a"].new_steps == [RECORDED[-1]]
    whole(index)


def test_a_compaction_whose_file_could_not_be_read_now_keeps_the_rows_read(group):
    """A compact file merging parts read with parts never read makes the table read
    again whole; if that read fails now, the table stays as it was until the next
    update (not emptied, not short of the parts)."""
    files = FlakyFiles()
    folder = group / "trials" / "trial_a" / "steps"
    parts = sorted(folder.glob("*.parquet"))
    table = pq.read_table(parts)
    unread = {p: p.read_bytes() for p in parts[-2:]}
    for p in unread:
        p.unlink()
    index = GroupIndex(group, files)
    index.update()
    assert steps(index, "trial_a") == RECORDED[:-2]
    compact = folder / compact_name(0, len(parts) - 1)
    pq.write_table(table, compact)  # the writer compacts, then deletes the parts
    for p in parts[:-2]:
        p.unlink()
    files.fail("read_parquet", compact.name, 1)
    report = index.update().report
    assert steps(index, "trial_a") == RECORDED[:-2]
    assert now_unreadable(index) == [f"trial_a/steps/{compact.name}"]
    assert report.skipped
    report = index.update().report
    assert report.changed_trials["trial_a"].new_steps == RECORDED[-2:]
    assert steps(index, "trial_a") == RECORDED
    assert index.trial("trial_a").steps.duplicated(["training_step", "iteration"]).sum() == 0
    assert index.skipped == []


def test_a_truly_damaged_shard_is_still_reported_once_and_not_read_again(group):
    files = FlakyFiles()
    shard = sorted((group / "trials" / "trial_a" / "steps").glob("*.parquet"))[2]
    shard.write_bytes(b"PAR1 not a parquet file at all PAR1")
    index = GroupIndex(group, files)
    report = index.update().report
    assert [Path(s.path).name for s in report.skipped] == [shard.name]
    assert "unreadable shard" in report.skipped[0].reason
    assert now_unreadable(index) == []
    for _ in range(2):
        assert index.update().report.skipped == []
    assert files.calls[("read_parquet", str(shard))] == 1
    assert steps(index, "trial_a") == [s for s in RECORDED if s != RECORDED[2]]


# --- listings -------------------------------------------------------------------------------


def test_a_failed_listing_of_the_trials_folder_forgets_no_trial(group, monkeypatch):
    g = open_group(group)
    trials = group / "trials"
    scandir = os.scandir

    def failing(path="."):
        if Path(path) == trials:
            raise OSError(errno.EIO, "Input/output error (simulated)", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", failing)
    with pytest.raises(StorageError, match="cannot list") as raised:
        try:
            g.refresh()
        finally:  # whatever the refresh did, no trial is forgotten
            assert [t.trial_id for t in g.list_trials()] == TRIALS
    assert "Input/output error" in str(raised.value)
    assert len(g.read_series("trial_a", "output", "output", "forward", "batch_mean",
                             "mean")) == len(RECORDED)
    monkeypatch.setattr(os, "scandir", scandir)
    report = g.refresh()
    assert report.new_trials == [] and report.changed_trials == {}
    assert [t.trial_id for t in g.list_trials()] == TRIALS


def test_a_table_folder_that_cannot_be_listed_now_keeps_its_rows(group):
    files = FlakyFiles()
    last, kept = hold_back_last_shard(group)
    index = GroupIndex(group, files)
    index.update()
    last.write_bytes(kept)
    files.fail("list", "trial_a/steps", 1)
    report = index.update().report  # no exception: the folder is reported, its rows kept
    assert steps(index, "trial_a") == RECORDED[:-1]
    assert now_unreadable(index) == ["trial_a/steps"]
    assert report.skipped
    index.update()
    whole(index)


# --- tensor values --------------------------------------------------------------------------


def test_a_tensors_read_that_fails_now_raises_and_marks_nothing_damaged(group, flaky):
    g = open_group(group)
    series = ("trial_a", "output", "output", "forward", "batch_mean", "mean")
    flaky.fail("arrow", "trial_a/tensors/", ALWAYS)
    with pytest.raises(StorageError, match="could not be read now"):
        g.read_series(*series)
    with pytest.raises(StorageError, match="could not be read now"):
        g.read_tensor("trial_a", 4, 1, "output", "output", "forward", "batch_mean")
    # the two shards read, reported (the banner), not marked damaged
    assert len(g.skipped) == 2 and {Path(s.path).parent.name for s in g.skipped} == {"tensors"}
    assert all("could not be read now" in s.reason for s in g.skipped)
    flaky.heal()
    assert sorted(g.read_series(*series)["training_step"]) == RECORDED
    assert g.read_tensor("trial_a", 4, 1, "output", "output", "forward",
                         "batch_mean").training_step == 4
    g.refresh()  # the store answered: the report ends
    assert g.skipped == []
    assert sorted(g.read_series(*series)["training_step"]) == RECORDED
