"""A group of many trials (issue 28 item 9): ``comgra --path GROUP`` answers while it is
still indexing the group, says how far it is, shows the trials indexed so far, and the
Findings page lists what is scanned so far with its progress.

Before: the server indexed every trial before it listened (2,000 trials: 33-51 s without
an answer), and the Findings page scanned every trial inside one callback (124 s). Here a
real server process on 127.0.0.1 gets a group of 1,500 copies of a recorded trial, whose
first index takes several seconds; the status callback is posted as the browser does.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from .conftest import post_callback

pytest.importorskip("torch")

COPIES = 1500
#: The server waits 1 s for the index (app/cli.py START_INDEX_WAIT), then serves.
FIRST_ANSWER_SECONDS = 20


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    from tests.analysis import loops

    root = tmp_path_factory.mktemp("many_trials")
    source = loops.log_of_zero(root, group="source") / "trials" / "log_of_zero"
    info = json.loads((source / "trial.json").read_text())
    group = root / "many"
    for i in range(COPIES):
        name = f"t{i:05d}"
        shutil.copytree(source, group / "trials" / name, ignore=shutil.ignore_patterns(".*"))
        (group / "trials" / name / "trial.json").write_text(json.dumps({**info, "trial_id": name}))
    return group


def status(running, session) -> dict:
    answer = post_callback(running, session, "data-status.data", {"tick.n_intervals": 1})
    return answer["data-status"]["data"]


def test_the_server_answers_while_it_indexes_and_the_findings_come_as_scanned(
        many, start_server):
    started = time.monotonic()
    running = start_server(path=many)
    session = running.session()  # the page itself
    first = status(running, session)
    answered = time.monotonic() - started
    assert answered < FIRST_ANSWER_SECONDS
    # still indexing: it says so, and lists the trials indexed so far (whole ones)
    assert first["problem"] and first["problem"].startswith("Indexing "), first["problem"]
    assert "of 1500 trial folders read" in first["problem"]
    assert len(first["trials"]) < COPIES
    # the Findings page answers meanwhile too, with the scan's progress
    findings = post_callback(running, session, "findings-list.children", {
        "tick.n_intervals": 1, "findings-severity.value": ["error", "warning", "info"],
        "findings-kind.value": [], "findings-trial.value": "__all__"})
    summary = json.dumps(findings["findings-summary"]["children"])
    assert "scanning: " in summary and "trials scanned so far" in summary, summary
    # the index completes: every trial listed, the message gone
    end = time.monotonic() + 600
    while True:
        now = status(running, session)
        if len(now["trials"]) == COPIES and not now["problem"]:
            break
        assert time.monotonic() < end, now["problem"]
        time.sleep(1.0)
    indexed = time.monotonic() - started
    assert indexed > answered  # the first answer came before the index was complete
    # the findings of the trials scanned so far are listed (each copy has log(0)'s NaN)
    findings = post_callback(running, session, "findings-list.children", {
        "tick.n_intervals": 2, "findings-severity.value": ["error", "warning", "info"],
        "findings-kind.value": [], "findings-trial.value": "__all__"})
    listed = json.dumps(findings["findings-list"]["children"])
    assert "first non finite" in listed and "z_log_positive" in listed
