"""Damaged files under the GUI (issue 20, items 9 and 10): every read failure is caught
where it happens, reported once with the file and the reason, and the rest of the trial
stays usable. On data written by the real recorder, then damaged (damaged_data.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from comgra_like.app import selection as sel
from comgra_like.app import selectors
from comgra_like.app.data import AppData

from comgra_like.errors import StorageError
from comgra_like.query import open_group

from .damaged_data import FIRST_TRIAL, corrupt_data_pages, damaged_copy, split_tensor_shards

RECORDED = [0, 1, 4, 5, 8, 9, 10]


@pytest.fixture
def damaged(tmp_path, tiny_group):
    return damaged_copy(tiny_group, tmp_path)


def walk_steps(data: AppData, selection: dict) -> list[int]:
    """The steps ▶ visits from the first one, checking each shows its values."""
    while True:
        data.read_tensor(selection["current"])  # the values of what is shown can be read
        new = selectors.apply_event(data, selection, ("nudge", ("training_step", 1)))
        if new["current"]["training_step"] == selection["current"]["training_step"]:
            break
        selection = new
    visited = [selection["current"]["training_step"]]
    while True:
        new = selectors.apply_event(data, selection, ("nudge", ("training_step", -1)))
        if new["current"]["training_step"] == selection["current"]["training_step"]:
            return visited[::-1]
        selection = new
        visited.append(selection["current"]["training_step"])


# --- the query API ------------------------------------------------------------------------


def test_a_shard_with_corrupt_data_pages_is_reported_once_and_other_steps_read(damaged):
    group = open_group(damaged["group"])
    assert [s.path for s in group.skipped] == [str(damaged["graph"])]  # the footer is fine
    version = group.version
    for _ in range(3):
        with pytest.raises(StorageError) as error:
            group.list_tensors(FIRST_TRIAL, 0)
        assert str(damaged["shard"]) in str(error.value)
        assert "unreadable shard" in str(error.value)
    shard = [s for s in group.skipped if s.path == str(damaged["shard"])]
    assert len(shard) == 1 and "unreadable shard" in shard[0].reason
    assert group.version == version + 1  # the data version tells the GUI, once
    for step in RECORDED[1:]:
        assert len(group.list_tensors(FIRST_TRIAL, step)) > 0
        group.read_tensor(FIRST_TRIAL, step, 0, "input", "input", "forward", "batch_mean")
    series = group.read_series(FIRST_TRIAL, "input", "input", "forward", "batch_mean", "mean")
    assert sorted(set(series["training_step"])) == RECORDED[1:]
    assert len(group.skipped) == 2 and not group.refresh().changed


def test_the_series_reports_a_shard_damaged_after_it_was_indexed(damaged):
    group = open_group(damaged["group"])
    corrupt_data_pages(damaged["shards"][8])
    series = group.read_series(FIRST_TRIAL, "input", "input", "forward", "batch_mean", "mean")
    assert sorted(set(series["training_step"])) == [1, 4, 5, 9, 10]
    assert {s.path for s in group.skipped} >= {str(damaged["shard"]), str(damaged["shards"][8])}


@pytest.mark.parametrize(
    ("structure", "reason"),
    [
        (["not", "a", "graph"], "the file should be an object, not a list"),
        ({"nodes": "abc"}, "'nodes' should be a list"),
        ({"nodes": [{"id": "x", "kind": "input", "iteration": 0}]}, "nodes[0] has no 'node'"),
        ({"nodes": [{"id": 3, "node": "x", "kind": "input", "iteration": 0}]}, "nodes[0].id"),
        ({"nodes": [{"id": "x", "node": "x", "kind": "input", "iteration": 0, "roles": []}]},
         "nodes[0].roles should be an object"),
        ({"nodes": [], "edges": [["a", "b"]]}, "edges[0] should be"),
    ],
)
def test_a_graph_of_the_wrong_structure_is_reported_and_other_graphs_read(
    damaged, structure, reason
):
    damaged["graph"].write_text(json.dumps(structure))
    group = open_group(damaged["group"])
    graphs = [s for s in group.skipped if s.path.endswith(".json")]
    assert [s.path for s in graphs] == [str(damaged["graph"])]
    assert "wrong structure" in graphs[0].reason and reason in graphs[0].reason
    with pytest.raises(StorageError, match="damaged") as error:
        group.read_graph(FIRST_TRIAL, 4, 0)
    assert str(damaged["graph"]) in str(error.value) and reason in str(error.value)
    assert {n.name for n in group.read_graph(FIRST_TRIAL, 4, 1).nodes} >= {"input", "memory"}
    assert not group.refresh().changed and len(group.skipped) == 1


def test_a_repaired_file_is_read_again(damaged, tiny_group):
    group = open_group(damaged["group"])
    with pytest.raises(StorageError):
        group.list_tensors(FIRST_TRIAL, 0)
    good = damaged["group"].parent / "good"
    shutil.copytree(tiny_group, good)
    good_shards = split_tensor_shards(good / "trials" / FIRST_TRIAL)
    shutil.copy(good_shards[0], damaged["shard"])  # a copy tool finishes its job
    shutil.copy(tiny_group / "trials" / FIRST_TRIAL / "graphs" / damaged["graph"].name,
                damaged["graph"])
    os.utime(damaged["shard"], ns=(1, 1))  # a new signature, whatever the clock's resolution
    os.utime(damaged["graph"], ns=(1, 1))
    report = group.refresh()
    change = report.changed_trials[FIRST_TRIAL]
    assert change.repaired_files == 1 and change.new_graphs == 1
    assert group.skipped == []
    assert len(group.list_tensors(FIRST_TRIAL, 0)) > 0
    assert group.read_graph(FIRST_TRIAL, 0, 0).nodes


def test_damaged_modules_and_notes_are_reported_not_raised_as_python_errors(damaged):
    trial = damaged["trial"]
    (trial / "modules.json").write_text(json.dumps({"modules": [{"parent": None}]}))
    with open(trial / "notes.jsonl", "a", encoding="utf-8") as notes:
        notes.write('["a list, not a note"]\n{"text": "after it", "wall_time": "soon"}\n')
    group = open_group(damaged["group"])
    with pytest.raises(StorageError, match="modules.json") as error:
        group.read_modules(FIRST_TRIAL)
    assert "'name'" in str(error.value)
    assert any(s.path.endswith("modules.json") for s in group.skipped)
    texts = [n.text for n in group.read_notes(FIRST_TRIAL)]
    # the legacy notes.jsonl is read before the recording's notes shards
    assert texts[:2] == ['["a list, not a note"]', '{"text": "after it", "wall_time": "soon"}']


# --- the data layer and the selection callback ------------------------------------


def test_the_gui_opens_a_first_trial_with_damaged_files_and_shows_every_other_step(damaged):
    data = AppData(damaged["group"])
    selection = selectors.apply_event(data, None, None)  # what the first page load does
    current = selection["current"]
    assert current["trial"] == FIRST_TRIAL and all(current[f] is not None for f in sel.CHAIN)
    # step 0 has no readable values, iteration 0 no readable graph
    assert (current["training_step"], current["iteration"]) == (1, 1)
    controls = selectors.control_values(data, selection)
    assert controls["options"]["trial"] == [
        {"label": "trial_a", "value": "trial_a"}, {"label": "trial_b", "value": "trial_b"}
    ]
    assert walk_steps(data, selection) == RECORDED[1:]
    skipped = dict(data.status().skipped)
    trial = f"trials/{FIRST_TRIAL}"
    assert set(skipped) == {
        f"{trial}/tensors/{damaged['shard'].name}", f"{trial}/graphs/{damaged['graph'].name}"
    }
    assert "unreadable shard" in skipped[f"{trial}/tensors/{damaged['shard'].name}"]
    assert "wrong structure" in skipped[f"{trial}/graphs/{damaged['graph'].name}"]
    # the other trial is untouched
    other = selectors.apply_event(data, selection, ("choose", ("trial", "trial_b")))
    assert (other["current"]["training_step"], other["current"]["iteration"]) == (0, 0)


def test_steps_go_on_past_a_shard_damaged_after_the_gui_indexed_it(damaged):
    data = AppData(damaged["group"])
    selection = selectors.apply_event(data, None, None)
    selection = selectors.apply_event(data, selection, ("choose", ("training_step", 5)))
    corrupt_data_pages(damaged["shards"][8])  # rewritten in place while the GUI runs
    selection = selectors.apply_event(data, selection, ("nudge", ("training_step", 1)))
    assert selection["current"]["training_step"] == 9
    selection = selectors.apply_event(data, selection, ("nudge", ("training_step", -1)))
    assert selection["current"]["training_step"] == 5
    assert f"trials/{FIRST_TRIAL}/tensors/{damaged['shards'][8].name}" in dict(
        data.status().skipped
    )


def test_typed_steps_snap_to_a_readable_one(damaged):
    data = AppData(damaged["group"])
    selection = selectors.apply_event(data, None, None)
    selection = selectors.apply_event(data, selection, ("step-typed", 0))
    assert selection["current"]["training_step"] == 1


# --- item 10: a bad trial.json is reported once --------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "{ not json",
        json.dumps({"schema_version": 999, "trial_id": "future"}),
        json.dumps(["a", "list"]),
        json.dumps({"schema_version": 1, "settings": 5}),
        json.dumps({"trial_id": "no version"}),
    ],
    ids=["unreadable", "newer-schema", "a-list", "settings-not-an-object", "no-version"],
)
def test_a_bad_trial_json_is_reported_once_and_changes_nothing_on_refresh(
    tmp_path, tiny_group, content
):
    group_dir = tmp_path / "g"
    shutil.copytree(tiny_group, group_dir)
    bad = group_dir / "trials" / "zz_bad"
    bad.mkdir()
    (bad / "trial.json").write_text(content)
    data = AppData(group_dir, refresh_seconds=0)
    first = data.refresh(force=True).as_dict()
    version = data.group.version
    assert [s for s, _ in first["skipped"]] == ["trials/zz_bad/trial.json"]
    for _ in range(30):
        status = data.refresh(force=True).as_dict()
        assert len(status["skipped"]) == 1
        assert status == first  # the tick sends nothing, so no view recomputes
    assert data.group.version == version
    assert data.trial_ids() == ["trial_a", "trial_b"]
    # fixed: looked at again because it changed, and shown
    info = json.loads((group_dir / "trials" / "trial_b" / "trial.json").read_text())
    (bad / "trial.json").write_text(json.dumps(info | {"trial_id": "zz_bad"}))
    os.utime(bad / "trial.json", ns=(1, 1))
    status = data.refresh(force=True).as_dict()
    assert status["skipped"] == [] and "zz_bad" in status["trials"]


def test_a_trial_json_damaged_after_it_was_read_keeps_the_trial(tmp_path, tiny_group):
    group_dir = tmp_path / "g"
    shutil.copytree(tiny_group, group_dir)
    data = AppData(group_dir, refresh_seconds=0)
    (group_dir / "trials" / "trial_b" / "trial.json").write_text("{ torn")
    first = data.refresh(force=True).as_dict()
    assert len(first["skipped"]) == 1 and "trial_b" in first["trials"]
    for _ in range(10):
        assert data.refresh(force=True).as_dict() == first


def test_split_shards_hold_what_the_recorder_wrote(tmp_path, tiny_group):
    """The helper's split is faithful: every step reads the same rows as before."""
    copy = tmp_path / "g"
    shutil.copytree(tiny_group, copy)
    shards = split_tensor_shards(copy / "trials" / FIRST_TRIAL)
    assert sorted(shards) == RECORDED
    before, after = open_group(tiny_group), open_group(copy)
    for step in RECORDED:
        assert before.list_tensors(FIRST_TRIAL, step).equals(after.list_tensors(FIRST_TRIAL, step))
