"""The index and the trials table on groups of many trials (issue 28 item 9): graph files
that trials share are parsed once per content, yet a damaged copy is still reported; the
per-trial summaries the trials table uses (``step_summary``, ``last_kpis``) equal what the
frames say; the frames a reader gets cannot change the index; a reader in another thread
sees whole trials while the first refresh runs. On trials recorded by the real recorder
and copied (a sweep of one model writes the same graph files)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from comgra_like.query import open_group

pytest.importorskip("torch")


def copies(tiny_group: Path, target: Path, count: int) -> Path:
    source = next(p for p in sorted((tiny_group / "trials").iterdir()) if p.is_dir()
                  and not p.name.startswith("."))
    info = json.loads((source / "trial.json").read_text())
    for i in range(count):
        name = f"copy_{i:03d}"
        shutil.copytree(source, target / "trials" / name, ignore=shutil.ignore_patterns(".*"))
        (target / "trials" / name / "trial.json").write_text(json.dumps({**info, "trial_id": name}))
    return target


def test_a_damaged_copy_of_a_shared_graph_is_reported_and_the_others_read(tiny_group, tmp_path):
    group_dir = copies(tiny_group, tmp_path / "g", 3)
    graphs = sorted((group_dir / "trials" / "copy_001" / "graphs").glob("*.json"))
    assert graphs
    graphs[0].write_text('{"nodes": 7}')  # valid JSON, another structure, same name
    group = open_group(group_dir)
    damaged = [s for s in group.skipped if "copy_001" in s.path]
    assert len(damaged) == 1 and "wrong structure" in damaged[0].reason
    assert not [s for s in group.skipped if "copy_001" not in s.path]
    digest = graphs[0].stem
    for trial in ("copy_000", "copy_002"):
        steps = group.list_steps(trial)
        row = steps[steps["graph_hash"] == digest].iloc[0]
        assert group.read_graph(trial, int(row["training_step"]), int(row["iteration"])).nodes


def test_summaries_equal_the_frames_and_frames_do_not_change_the_index(tiny_group):
    group = open_group(tiny_group)
    for info in group.list_trials():
        trial = info.trial_id
        steps = group.list_steps(trial)
        unique = np.unique(steps["training_step"].to_numpy())
        expected = (len(unique), int(unique[0]), int(unique[-1])) if len(unique) else (0, None, None)
        assert group.step_summary(trial) == expected
        kpis = group.read_kpis(trial)
        last = {}
        for g, n, v in zip(kpis["kpi_group"], kpis["kpi_name"], kpis["value"]):
            last[(g, n)] = float(v)  # sorted by timepoint: the last one wins
        assert group.last_kpis(trial) == last
        # a caller that changes its frame changes nothing the next reader gets
        steps.loc[:, "training_step"] = -1
        steps["extra"] = 1
        again = group.list_steps(trial)
        assert "extra" not in again and (again["training_step"] >= 0).all()


def test_a_reader_sees_whole_trials_while_the_first_refresh_runs(tiny_group, tmp_path):
    group_dir = copies(tiny_group, tmp_path / "g", 60)
    whole = open_group(group_dir)
    expected = {t.trial_id: len(whole.list_steps(t.trial_id)) for t in whole.list_trials()}
    group = open_group(group_dir, refresh=False)
    assert group.list_trials() == [] and group.indexing is None
    indexer = threading.Thread(target=group.refresh)
    indexer.start()
    seen_progress, partial = set(), set()
    deadline = time.monotonic() + 300
    while indexer.is_alive() and time.monotonic() < deadline:
        progress = group.indexing
        if progress is not None:
            seen_progress.add(progress[1])
        listed = group.list_trials()
        if 0 < len(listed) < len(expected):
            partial.add(len(listed))
        for info in listed:  # every trial listed is indexed whole
            assert len(group.list_steps(info.trial_id)) == expected[info.trial_id]
        group.skipped  # never waits for the refresh  # noqa: B018
        # A reader that never lets go of the interpreter starves the indexing thread (the
        # GIL); a reader in a real program waits between reads.
        time.sleep(0.005)
    indexer.join(timeout=60)
    assert not indexer.is_alive(), "the first refresh did not end"
    assert seen_progress == {60} and group.indexing is None
    assert partial  # the trials indexed so far were listed meanwhile
    assert len(group.list_trials()) == 60
