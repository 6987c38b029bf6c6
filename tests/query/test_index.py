"""The incremental index (comgra_like/query/index.py): new names only, notes from shards
and from the old notes.jsonl, rows two writers repeat, compactions of rows not read yet."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

import comgra_like
from comgra_like.errors import NotFoundError
from comgra_like.query import Note, open_group

from .helpers import copy_group, notes_only_trial, one_shard_per_step, write_notes_shard

RECORDED = [0, 1, 4, 5, 8, 9, 10]


# --- notes --------------------------------------------------------------------------------


def test_notes_are_read_from_shards_after_the_old_jsonl(tmp_path):
    layout = notes_only_trial(tmp_path / "g", "t")
    layout.legacy_notes.write_text(
        json.dumps({"text": "old one", "wall_time": 1.0, "training_step": 3}) + "\n"
        + json.dumps({"text": "old two", "wall_time": 2.0}) + "\n")
    write_notes_shard(layout, 0, [("first shard", 3.0, 7), ("no step", 4.0, None)])
    g = open_group(tmp_path / "g")
    assert g.read_notes("t") == [
        Note(0, "old one", 1.0, 3), Note(1, "old two", 2.0, None),
        Note(2, "first shard", 3.0, 7), Note(3, "no step", 4.0, None),
    ]

    write_notes_shard(layout, 1, [("second shard", 5.0, 9)])
    assert len(g.read_notes("t")) == 4  # reads serve the last refresh
    report = g.refresh()
    assert report.changed_trials["t"].notes_changed
    assert g.read_notes("t")[-1] == Note(4, "second shard", 5.0, 9)
    assert not g.refresh().changed


def test_notes_shards_alone_and_a_compaction_of_them_add_nothing_twice(tmp_path):
    layout = notes_only_trial(tmp_path / "g", "t")
    first = write_notes_shard(layout, 0, [("a", 1.0, 0)])
    second = write_notes_shard(layout, 1, [("b", 2.0, 1)])
    g = open_group(tmp_path / "g")
    assert [n.text for n in g.read_notes("t")] == ["a", "b"]
    # the writer compacts parts 0-2, part 2 never read here: the notes are read again
    write_notes_shard(layout, 0, [("a", 1.0, 0), ("b", 2.0, 1), ("c", 3.0, 2)],
                      name="compact-00000000-00000002.parquet")
    first.unlink()
    second.unlink()
    assert g.refresh().changed_trials["t"].notes_changed
    assert [(n.index, n.text) for n in g.read_notes("t")] == [(0, "a"), (1, "b"), (2, "c")]
    assert g.skipped == []


def test_a_damaged_notes_shard_is_reported_and_the_others_read(tmp_path):
    layout = notes_only_trial(tmp_path / "g", "t")
    write_notes_shard(layout, 0, [("kept", 1.0, None)])
    (layout.notes / "part-00000001.parquet").write_bytes(b"PAR1 torn")
    write_notes_shard(layout, 2, [("after it", 2.0, None)])
    g = open_group(tmp_path / "g")
    assert [n.text for n in g.read_notes("t")] == ["kept", "after it"]
    assert [s.path for s in g.skipped] == [str(layout.notes / "part-00000001.parquet")]
    assert "unreadable shard" in g.skipped[0].reason


def test_the_example_runs_still_read_their_notes_jsonl():
    from pathlib import Path

    group = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
    g = open_group(group)
    for trial in g.list_trials():
        notes = g.read_notes(trial.trial_id)
        assert notes and all(n.text for n in notes)
        assert [n.index for n in notes] == list(range(len(notes)))


# --- reads serve the last refresh ---------------------------------------------------------


def test_reads_never_look_for_new_files(tmp_path, tiny_group):
    group = tmp_path / "g"
    (group / "trials").mkdir(parents=True)
    g = open_group(group)
    shutil.copytree(tiny_group / "trials" / "trial_a", group / "trials" / "trial_a")
    with pytest.raises(NotFoundError, match="refresh"):
        g.list_steps("trial_a")
    assert g.list_trials() == [] and g.version == 0
    report = g.refresh()
    assert report.new_trials == ["trial_a"]
    assert g.list_steps("trial_a")["training_step"].unique().tolist() == RECORDED


def test_steps_written_after_a_refresh_show_after_the_next(tmp_path, tiny_group):
    group = copy_group(tiny_group, tmp_path / "g")
    trial = group / "trials" / "trial_a"
    parts = one_shard_per_step(trial)
    later = tmp_path / "later"
    for step in RECORDED[4:]:
        for kind, path in parts[step].items():
            (later / kind).mkdir(parents=True, exist_ok=True)
            shutil.move(path, later / kind / path.name)
    g = open_group(group)
    assert g.list_steps("trial_a")["training_step"].unique().tolist() == RECORDED[:4]
    for kind in ("tensors", "steps"):  # the writer's order: a step's tensors first
        for path in sorted((later / kind).iterdir()):
            shutil.move(path, trial / kind / path.name)
    with pytest.raises(NotFoundError):
        g.list_tensors("trial_a", 8)
    series = g.read_series("trial_a", "input", "input", "forward", "batch_mean", "mean")
    assert g.list_steps("trial_a")["training_step"].unique().tolist() == RECORDED[:4]
    assert g.refresh().changed_trials["trial_a"].new_steps == RECORDED[4:]
    assert len(g.list_tensors("trial_a", 8)) > 0
    again = g.read_series("trial_a", "input", "input", "forward", "batch_mean", "mean")
    assert sorted(set(again["training_step"])) == RECORDED
    assert sorted(set(series["training_step"])) == RECORDED[:4]


# --- compaction ----------------------------------------------------------------------------


def test_a_compaction_since_the_last_refresh_is_followed_with_the_same_steps(tmp_path, tiny_group):
    """The writer compacts parts this reader has not seen yet: reads go on from the new
    file and serve the indexed steps only; the next refresh reads the steps table again
    without counting a row twice."""
    group = copy_group(tiny_group, tmp_path / "g")
    trial = group / "trials" / "trial_a"
    parts = one_shard_per_step(trial)
    later = tmp_path / "later"
    for step in RECORDED[4:]:
        for kind, path in parts[step].items():
            (later / kind).mkdir(parents=True, exist_ok=True)
            shutil.move(path, later / kind / path.name)
    g = open_group(group)
    before = g.read_tensor("trial_a", 1, 0, "input", "input", "forward", "sample", 2).values
    g.cache.clear()
    for kind in ("tensors", "steps"):
        for path in sorted((later / kind).iterdir()):
            shutil.move(path, trial / kind / path.name)
    comgra_like.compact_trial(trial)
    assert [p.name for p in (trial / "tensors").iterdir()] == ["compact-00000000-00000006.parquet"]

    # the series first: it meets every gone part, the later ones after the first found
    # their replacement
    series = g.read_series("trial_a", "input", "input", "forward", "batch_mean", "mean")
    assert sorted(set(series["training_step"])) == RECORDED[:4]
    after = g.read_tensor("trial_a", 1, 0, "input", "input", "forward", "sample", 2).values
    np.testing.assert_array_equal(before, after)
    assert len(g.list_tensors("trial_a", 5)) > 0
    stats = g.read_statistics("trial_a", nodes="input", aggregations="batch_mean")
    assert sorted(set(stats["training_step"])) == RECORDED[:4]

    report = g.refresh()
    assert report.changed_trials["trial_a"].new_steps == RECORDED[4:]
    assert g.skipped == [] and report.skipped == []
    steps = g.list_steps("trial_a")
    assert not steps.duplicated(["training_step", "iteration"]).any()
    assert steps["training_step"].unique().tolist() == RECORDED
    series = g.read_series("trial_a", "input", "input", "forward", "batch_mean", "mean")
    assert sorted(set(series["training_step"])) == RECORDED
    assert not series.duplicated(["training_step", "iteration"]).any()


# --- two writers of one trial --------------------------------------------------------------


@pytest.fixture
def two_writers(tmp_path, tiny_run_class):
    """Trial ``t`` recorded by one recorder (steps 0-2, seed 0) and, into the same
    folder, the shards of another (steps 1-3, seed 1) under later sequence numbers: what
    two processes recording one trial leave."""
    first = tiny_run_class(tmp_path / "a", "g", "t", record_steps=[0, 1, 2], seed=0)
    first.run(range(3)).finalize()
    second = tiny_run_class(tmp_path / "b", "g", "t", record_steps=[1, 2, 3], seed=1)
    second.run(range(4)).finalize()
    alone = copy_group(tmp_path / "a" / "g", tmp_path / "alone")
    trial = tmp_path / "a" / "g" / "trials" / "t"
    for kind in ("steps", "tensors"):
        [source] = (tmp_path / "b" / "g" / "trials" / "t" / kind).iterdir()
        shutil.copy(source, trial / kind / "part-00000100.parquet")
    return {"group": tmp_path / "a" / "g", "alone": alone, "trial": trial,
            "second": tmp_path / "b" / "g"}


def test_rows_a_second_writer_repeats_are_left_out_and_reported(two_writers):
    g = open_group(two_writers["group"])
    alone = open_group(two_writers["alone"])
    second = open_group(two_writers["second"])
    steps = g.list_steps("t")
    assert not steps.duplicated(["training_step", "iteration"]).any()
    assert steps["training_step"].unique().tolist() == [0, 1, 2, 3]
    first_steps = alone.list_steps("t")
    kept = steps[steps["training_step"] <= 2].reset_index(drop=True)
    assert kept["wall_time"].tolist() == first_steps["wall_time"].tolist()  # the first kept

    [problem] = g.skipped
    assert problem.path == str(two_writers["trial"] / "steps" / "part-00000100.parquet")
    assert "step 1 iteration 0" in problem.reason and "two recorders" in problem.reason
    assert not g.refresh().changed  # reported once

    # the values of a repeated step are the first writer's, in every read
    key = ("forward", "batch_mean")
    for step in (1, 2):
        mine = g.read_tensor("t", step, 0, "input", "input", *key)
        np.testing.assert_array_equal(
            mine.values, alone.read_tensor("t", step, 0, "input", "input", *key).values)
        listed = g.list_tensors("t", step)
        assert not listed.duplicated(["iteration", "node", "role", "recording_type",
                                      "aggregation", "sample_index"]).any()
    series = g.read_series("t", "input", "input", *key, "mean", iteration=0)
    expected = alone.read_series("t", "input", "input", *key, "mean", iteration=0)
    assert series["training_step"].tolist() == [0, 1, 2, 3]
    assert series["value"].tolist()[:3] == expected["value"].tolist()
    assert series["value"].tolist()[3] == second.read_series(
        "t", "input", "input", *key, "mean", iteration=0)["value"].tolist()[-1]
    pd.testing.assert_frame_equal(g.read_statistics("t", steps=(0, 2)),
                                  alone.read_statistics("t", steps=(0, 2)))
