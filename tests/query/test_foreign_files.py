"""Files a training script puts into the group folder besides the recordings (issue 14,
item 6): a summary next to ``trials/``, checkpoints, notes, the litter of file managers
(``.DS_Store``, ``Thumbs.db``) anywhere. The reader and the GUI ignore them: no trial more
or less, no damage reported, every value as without them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
from comgra_like.app import selection as sel
from comgra_like.app.cli import describe_path
from comgra_like.app.data import AppData

from comgra_like.query import open_group

TRIALS = ["trial_a", "trial_b"]
TABLE_FOLDERS = ("steps", "tensors", "kpis", "notes", "graphs")


def add_foreign_files(group: Path) -> list[Path]:
    """What scripts and file managers leave in a group folder; the paths made."""
    made = []

    def put(path: Path, content: bytes = b"\x00\x01 not ours") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        made.append(path)

    # next to trials/: what a script comparing models writes
    put(group / "models_summary.json", b'{"model_0": {"accuracy": 0.9}}')
    put(group / "notes.txt", b"lr sweep, second attempt\n")
    put(group / "checkpoints" / "model_0.pt")
    put(group / "checkpoints" / "trials" / "x.pt")  # a folder named trials, one level down
    put(group / ".DS_Store")
    # inside trials/: litter, and folders that are no trials (no trial.json)
    trials = group / "trials"
    put(trials / ".DS_Store")
    put(trials / "Thumbs.db")
    put(trials / "README.txt", b"one folder per model\n")
    put(trials / "summary.json", b"[1, 2, 3]")
    put(trials / "checkpoints" / "model_0.pt")
    put(trials / "old-runs" / "trial.csv", b"a,b\n")
    # inside a trial and its table folders
    for trial_id in TRIALS:
        put(trials / trial_id / ".DS_Store")
        put(trials / trial_id / "checkpoint.pt")
        put(trials / trial_id / "notes.txt", b"hand-written\n")
        for folder in TABLE_FOLDERS:
            if (trials / trial_id / folder).is_dir():
                put(trials / trial_id / folder / ".DS_Store")
                put(trials / trial_id / folder / "Thumbs.db")
                put(trials / trial_id / folder / "desktop.ini", b"[.ShellClassInfo]\n")
    return made


def everything(group_path: Path) -> dict:
    """What the query API reads of a group, as comparable values."""
    group = open_group(group_path)
    read: dict = {"skipped": group.skipped, "trials": [t.trial_id for t in group.list_trials()]}
    for trial_id in read["trials"]:
        steps = group.list_steps(trial_id)
        read[trial_id] = {
            "steps": steps,
            "kpis": group.read_kpis(trial_id),
            "notes": [n.text for n in group.read_notes(trial_id)],
            "modules": group.read_modules(trial_id),
            "graphs": [group.read_graph(trial_id, s, i)
                       for s, i in zip(steps["training_step"], steps["iteration"])],
            "tensors": [group.list_tensors(trial_id, s)
                        for s in sorted(set(steps["training_step"]))],
            "statistics": group.read_statistics(trial_id),
        }
    return read


def assert_same(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    for key, value in left.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(value.reset_index(drop=True),
                                          right[key].reset_index(drop=True))
        elif isinstance(value, dict):
            assert_same(value, right[key])
        elif isinstance(value, list) and value and isinstance(value[0], pd.DataFrame):
            assert len(value) == len(right[key])
            for a, b in zip(value, right[key]):
                pd.testing.assert_frame_equal(a, b)
        else:
            assert value == right[key], key


def test_the_query_api_ignores_files_next_to_the_recordings(tmp_path, tiny_group):
    clean = everything(tiny_group)
    assert clean["skipped"] == [] and clean["trials"] == TRIALS
    group = shutil.copytree(tiny_group, tmp_path / "tiny")
    add_foreign_files(group)
    assert_same(everything(group), clean)


def test_foreign_files_that_appear_later_change_nothing(tmp_path, tiny_group):
    """A script writes its summary after the models were recorded, while the GUI runs."""
    group_path = shutil.copytree(tiny_group, tmp_path / "tiny")
    group = open_group(group_path)
    version = group.version
    add_foreign_files(group_path)
    report = group.refresh()
    assert not report.changed and report.skipped == []
    assert group.version == version and group.skipped == []


def test_the_gui_shows_no_damage_for_foreign_files(tmp_path, tiny_group):
    group = shutil.copytree(tiny_group, tmp_path / "tiny")
    add_foreign_files(group)
    assert describe_path(group) == ("ok", None)
    data = AppData(group)
    status = data.refresh(force=True)
    assert status.problem is None and status.skipped == ()
    assert dict(status.trial_statuses) == dict.fromkeys(TRIALS, "finished")
    source = data.option_source()
    assert source.options("trial", {}) == TRIALS
    selection = sel.refresh(None, source)
    record = data.read_tensor(selection["current"])
    assert record.values is not None or record.stats
    assert data.status().skipped == ()


def test_a_group_recorded_while_the_script_writes_beside_it(tmp_path, tiny_run_class):
    """A live run: the script writes files into the group between recorded steps."""
    run = tiny_run_class(tmp_path, "live", "model_0", record_steps=[0, 2, 4], seed=0,
                         bugged=False)
    group_path = tmp_path / "live"
    group = open_group(group_path)
    for step in range(6):
        run.step(step)
        (group_path / "models_summary.json").write_text(f'{{"step": {step}}}')
        (group_path / "checkpoints").mkdir(exist_ok=True)
        (group_path / "checkpoints" / f"step_{step}.pt").write_bytes(b"\x00" * 64)
        (group_path / "trials" / ".DS_Store").write_bytes(b"\x00\x01")
        run.recorder.flush()
        group.refresh()
        assert group.skipped == []
    run.finalize()
    group.refresh()
    assert group.skipped == [] and [t.trial_id for t in group.list_trials()] == ["model_0"]
    assert group.list_trials()[0].status == "finished"
    assert sorted(set(group.list_steps("model_0")["training_step"])) == [0, 2, 4]
