"""The GUI while the store cannot be read for a moment (issue 28, "an S3 outage
survived"): the trials shown stay shown, the banner says once what could not be read now,
and the next refresh after the outage shows everything again, without a restart."""

from __future__ import annotations

import json
import shutil

import pytest
from comgra_like.app.data import AppData

import comgra_like.query.index as index_module
import comgra_like.query.tensors as tensors_module
from tests.query.test_store_unreachable import ALWAYS, FlakyFiles

TRIALS = ["trial_a", "trial_b"]


@pytest.fixture
def flaky(monkeypatch) -> FlakyFiles:
    """A flaky seam under the group the GUI opens."""
    files = FlakyFiles()
    for module in (index_module, tensors_module):
        monkeypatch.setattr(module, "files_for", lambda path: files)
    return files


@pytest.fixture
def group(tiny_group, tmp_path):
    path = tmp_path / "g"
    shutil.copytree(tiny_group, path)
    return path


def test_a_running_gui_keeps_the_trials_and_says_once_what_it_could_not_read(group, flaky):
    data = AppData(group, refresh_seconds=0)
    assert data.trial_ids() == TRIALS
    info = group / "trials" / "trial_b" / "trial.json"
    info.write_text(json.dumps(json.loads(info.read_text()) | {"status": "aborted"}))
    flaky.fail("read_json", "trial_b/trial.json", ALWAYS)
    first = data.refresh(force=True).as_dict()
    assert [path for path, _ in first["skipped"]] == ["trials/trial_b/trial.json"]
    assert "could not be read now" in first["skipped"][0][1]
    assert first["trials"] == {"trial_a": "finished", "trial_b": "finished"}
    for _ in range(3):  # said once: the tick sends nothing new while it lasts
        assert data.refresh(force=True).as_dict() == first
    flaky.heal()
    status = data.refresh(force=True).as_dict()
    assert status["skipped"] == []
    assert status["trials"] == {"trial_a": "finished", "trial_b": "aborted"}


def test_a_gui_started_during_an_outage_says_so_and_shows_the_group_once_back(group, flaky):
    flaky.fail("read_json", "trial_b/trial.json", ALWAYS)
    data = AppData(group, refresh_seconds=0)
    status = data.status().as_dict()
    assert "trial_b/trial.json" in status["problem"], status
    assert "could not be read" in status["problem"]
    flaky.heal()
    data.refresh(force=True)
    assert data.trial_ids() == TRIALS
    assert data.status().as_dict()["skipped"] == []


def test_a_page_read_the_store_cannot_answer_is_said_until_it_works_again(group):
    # the pages' reads go through AppData.safely (the Flight page's triggers, windows,
    # KPIs): a store that cannot answer now was swallowed like a missing file, so the
    # Flight page showed no triggers without a word while the store was away
    from comgra_like.query import StoreUnreachable

    data = AppData(group, refresh_seconds=0)
    where = "flight triggers of trial_a"

    def away():
        raise StoreUnreachable("trials/trial_a/flight: connection refused")

    assert data.safely(where, away, []) == []
    said = dict(data.status().as_dict()["skipped"])
    assert "could not be read now" in said[where] and "connection refused" in said[where]
    assert data.safely(where, lambda: ["window"], []) == ["window"]
    assert where not in dict(data.status().as_dict()["skipped"])
    # a missing or damaged piece is still the query API's to report, not the banner's
    from comgra_like.errors import NotFoundError

    def missing():
        raise NotFoundError("no such trial")

    assert data.safely("notes of trial_a", missing, None) is None
    assert "notes of trial_a" not in dict(data.status().as_dict()["skipped"])
