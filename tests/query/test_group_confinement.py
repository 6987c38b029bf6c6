"""Reads and writes stay inside the group folder (issue 28, items 6 and 7).

Item 6: a symbolic link inside a group's ``trials/`` folder (a trial folder, a table
folder, a notes file, a shard) is never followed: readers leave it out and report it
like a damaged file (the GUI's banner, a log warning), writes through it are refused
with UnsafePathError and write nothing. Item 7: the folder name is a trial's identity:
a trial folder renamed or copied next to the original is listed, opened and read under
its folder name, and the mismatch with its trial.json is reported.

Every group here is written by the real recorder (the session's ``tiny_group``: two
finished trials of a small recurrent model, copied per test).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from comgra_like.app.data import AppData

from comgra_like.errors import NotFoundError, UnsafePathError
from comgra_like.format import confine
from comgra_like.format import flow_requests as fr
from comgra_like.format import flows as ff
from comgra_like.format.files import LOCAL
from comgra_like.format.notes import NOTES_SCHEMA
from comgra_like.query import open_group

SECRET = "SECRET outside the group"


@pytest.fixture
def group(tiny_group, tmp_path) -> Path:
    copy = tmp_path / "group"
    shutil.copytree(tiny_group, copy)
    return copy


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _skipped(group_or_data) -> dict[str, str]:
    return {str(s.path): s.reason for s in group_or_data.skipped}


def _secret_notes(folder: Path) -> Path:
    """A notes shard with the secret, where a link will point."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"trial_id": pa.array(["trial_a"]).dictionary_encode(),
                      "text": [SECRET], "wall_time": [1.0], "training_step": [0]},
                     schema=NOTES_SCHEMA)
    pq.write_table(table, folder / "part-00000000.parquet")
    return folder


# ----- item 6: reads --------------------------------------------------------------------


def test_a_linked_notes_file_is_not_shown_and_is_reported(group, outside, caplog):
    trial = group / "trials" / "trial_a"
    # an old-style notes file linked to any readable file, and the notes folder linked
    # to a folder of shards written elsewhere
    (outside / "passwords.txt").write_text(f'{{"text": "{SECRET}"}}\n')
    os.symlink(outside / "passwords.txt", trial / "notes.jsonl")
    shutil.rmtree(trial / "notes")
    os.symlink(_secret_notes(outside / "notes"), trial / "notes")

    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        g = open_group(group)
        notes = g.read_notes("trial_a")
    assert all(SECRET not in n.text for n in notes)
    assert notes == []  # the real notes were in the folder that is now a link
    skipped = _skipped(g)
    for link in (trial / "notes.jsonl", trial / "notes"):
        assert "symbolic link, not followed" in skipped[str(link)]
    assert "not followed" in caplog.text
    # the other trial is untouched
    assert [n.text for n in g.read_notes("trial_b")] == ["trial_b: tiny recurrent test model"]

    data = AppData(group, refresh_seconds=0.1)
    assert all(SECRET not in n.text for n in data.notes("trial_a"))
    banner = dict(data.status().skipped)
    assert any("notes.jsonl" in path and "symbolic link" in why for path, why in banner.items())


def test_a_linked_trial_folder_is_not_a_trial(group, outside):
    # a copy of a real trial outside the group, linked in as a trial folder
    shutil.copytree(group / "trials" / "trial_b", outside / "elsewhere")
    link = group / "trials" / "trial_linked"
    os.symlink(outside / "elsewhere", link)

    g = open_group(group)
    assert [t.trial_id for t in g.list_trials()] == ["trial_a", "trial_b"]
    assert "symbolic link" in _skipped(g)[str(link)]
    with pytest.raises(NotFoundError):
        g.read_kpis("trial_linked")
    data = AppData(group, refresh_seconds=0.1)
    assert data.trial_ids() == ["trial_a", "trial_b"]


def test_linked_table_folders_and_shards_are_left_out(group, outside):
    trial = group / "trials" / "trial_b"
    g0 = open_group(group)
    steps_before = g0.list_steps("trial_b")
    kpis_before = g0.read_kpis("trial_b")
    assert len(kpis_before) > 0
    # the kpis folder moved out of the group and linked back in
    shutil.move(trial / "kpis", outside / "kpis")
    os.symlink(outside / "kpis", trial / "kpis")
    # one steps shard replaced by a link to a copy of itself outside
    shard = min((trial / "steps").glob("*.parquet"))
    shutil.move(shard, outside / shard.name)
    os.symlink(outside / shard.name, shard)

    g = open_group(group)
    assert len(g.read_kpis("trial_b")) == 0
    assert len(g.list_steps("trial_b")) < len(steps_before)
    skipped = _skipped(g)
    assert "symbolic link" in skipped[str(trial / "kpis")]
    assert "symbolic link" in skipped[str(shard)]
    # the other trial reads as before
    pd.testing.assert_frame_equal(g.list_steps("trial_a"), g0.list_steps("trial_a"))


def test_a_group_folder_reached_through_a_link_reads_whole(group, tmp_path):
    link = tmp_path / "linked_group"
    os.symlink(group, link)
    g = open_group(link)
    assert [t.trial_id for t in g.list_trials()] == ["trial_a", "trial_b"]
    assert g.skipped == []
    pd.testing.assert_frame_equal(g.list_steps("trial_a"), open_group(group).list_steps("trial_a"))


# ----- item 6: writes -------------------------------------------------------------------


def test_a_saved_input_is_not_written_through_a_linked_probes_folder(group, outside):
    os.symlink(outside, group / "trials" / "trial_a" / ff.PROBES_DIR)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        ff.submit_input(group, "trial_a", np.zeros((1, 4), np.float32))
    assert list(outside.iterdir()) == []


def test_flow_requests_are_not_written_through_links(group, outside):
    os.symlink(outside, fr.requests_dir(group, "trial_a"))
    with pytest.raises(UnsafePathError):
        fr.write_heartbeat(group, "trial_a", started=0.0)
    assert list(outside.iterdir()) == []
    # a linked trial folder: the trial is not there for a write either
    os.symlink(group / "trials" / "trial_b", group / "trials" / "trial_c")
    with pytest.raises(NotFoundError):
        ff.submit_input(group, "trial_c", np.zeros((1, 4), np.float32))
    assert not (group / "trials" / "trial_b" / ff.PROBES_DIR).exists()


def test_the_filesystem_seam_refuses_links_below_trials(group, outside):
    trial = group / "trials" / "trial_a"
    os.symlink(outside, trial / "linked")
    target = trial / "linked" / "x.json"
    for write in (lambda: LOCAL.write_json(target, {}), lambda: LOCAL.make_folder(target),
                  lambda: LOCAL.remove(target), lambda: LOCAL.read_bytes(target),
                  lambda: LOCAL.arrow(target)):
        with pytest.raises(UnsafePathError, match=str(trial / "linked")):
            write()
    assert not LOCAL.exists(target) and LOCAL.signature(target) is None
    assert LOCAL.list(trial / "linked") == []
    assert LOCAL.links(trial) == ["linked"]
    assert "'..'" in confine.refusal(trial / ".." / ".." / "x")
    # outside trials/ nothing is checked; a link above the group is the user's
    assert confine.refusal(outside / "anything") is None
    assert list(outside.iterdir()) == []


# ----- item 7: a renamed trial ----------------------------------------------------------


def test_a_renamed_copy_of_a_trial_is_listed_and_read_under_its_folder_name(group):
    shutil.copytree(group / "trials" / "trial_a", group / "trials" / "trial_a_renamed")

    g = open_group(group)
    assert [t.trial_id for t in g.list_trials()] == ["trial_a", "trial_a_renamed", "trial_b"]
    reason = _skipped(g)[str(group / "trials" / "trial_a_renamed" / "trial.json")]
    assert "names the trial 'trial_a'" in reason and "'trial_a_renamed'" in reason
    pd.testing.assert_frame_equal(g.list_steps("trial_a_renamed"), g.list_steps("trial_a"))
    pd.testing.assert_frame_equal(g.read_kpis("trial_a_renamed"), g.read_kpis("trial_a"))
    assert g.read_notes("trial_a_renamed") == g.read_notes("trial_a")
    step = int(g.list_steps("trial_a").training_step.iloc[-1])
    tensors = g.list_tensors("trial_a_renamed", step)
    assert len(tensors) > 0
    assert list(g.read_trials().trial_id) == ["trial_a", "trial_a_renamed", "trial_b"]

    # every page reads through AppData: the renamed trial opens like the original
    data = AppData(group, refresh_seconds=0.1)
    assert data.trial_ids() == ["trial_a", "trial_a_renamed", "trial_b"]
    assert data.trial_info("trial_a_renamed").trial_id == "trial_a_renamed"
    assert len(data.steps("trial_a_renamed")) == len(data.steps("trial_a"))
    iteration = int(g.list_steps("trial_a").iteration.iloc[-1])
    graph = data.graph("trial_a_renamed", step, iteration)
    assert graph is not None and graph == data.graph("trial_a", step, iteration)
    pd.testing.assert_frame_equal(data.kpis("trial_a_renamed"), data.kpis("trial_a"))
    assert data.findings("trial_a_renamed") == data.findings("trial_a")
