"""The findings of many trials scanned in the background (issue 28 item 9): the Findings
page asks ``AppData.gather_findings`` for every trial, gets those scanned so far at once
and the rest at its next ticks, in the order asked; what it finally lists is what a scan
of each trial in the callback found. On copies of a real recorded loop with a NaN
(tests/analysis/loops.py: log(0) at step 7)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from comgra_like.app.data import AppData

pytest.importorskip("torch")

COPIES = 24


def copy_trial(trial: Path, group: Path, count: int) -> list[str]:
    """``count`` copies of a trial folder in ``group``/trials, trial.json naming each."""
    info = json.loads((trial / "trial.json").read_text())
    names = []
    for i in range(count):
        name = f"copy_{i:03d}"
        shutil.copytree(trial, group / "trials" / name, ignore=shutil.ignore_patterns(".*"))
        (group / "trials" / name / "trial.json").write_text(json.dumps({**info, "trial_id": name}))
        names.append(name)
    return names


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    from tests.analysis import loops

    root = tmp_path_factory.mktemp("findings_scan")
    source = loops.log_of_zero(root, group="source")
    group = root / "many"
    copy_trial(source / "trials" / "log_of_zero", group, COPIES)
    return group


def test_findings_come_incrementally_and_match_a_scan_in_the_callback(many):
    data = AppData(many)
    trials = data.trial_ids()
    assert len(trials) == COPIES
    found, waiting = data.gather_findings(trials, 0.0)
    assert waiting and len(found) < COPIES  # nothing was scanned: the call did not wait
    seen = [len(found)]
    end = time.monotonic() + 300
    while waiting:
        assert time.monotonic() < end, f"{len(waiting)} trials never scanned"
        found, waiting = data.gather_findings(trials, 0.2)
        assert set(found).isdisjoint(waiting)
        seen.append(len(found))
    assert seen == sorted(seen) and seen[0] < seen[-1] == COPIES
    reference = AppData(many)
    for trial in trials:
        nan = next(f for f in found[trial] if f["kind"] == "first_non_finite")
        assert (nan["severity"], nan["steps"], nan["node"]) == ("error", [7], "z_log_positive")
        assert found[trial] == reference.findings(trial)
    # scanned once per data version: asking again is a lookup
    started = time.perf_counter()
    again, waiting = data.gather_findings(trials, 0.0)
    assert not waiting and again == found
    assert time.perf_counter() - started < 1.0


def test_the_trials_asked_for_last_are_scanned_first(many):
    data = AppData(many)
    trials = data.trial_ids()
    data.gather_findings(trials, 0.0)  # every trial queued, in order
    last = trials[-1]
    found, waiting = data.gather_findings([last], 60.0)  # the page filtered one trial
    assert last in found and not waiting
