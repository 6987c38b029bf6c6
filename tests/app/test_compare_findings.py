"""The Compare page's "count findings" (issue 28 item 9, issue 31): the trials table
answers at once and the findings counts fill in as the background scan (the Findings
page's, app/findings_scan.py) gets through the trials; the final counts are those of a
scan of each trial. On copies of a real recorded loop with a NaN (tests/analysis/loops.py:
log(0) at step 7)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from comgra_like.app import compare_data as cd
from comgra_like.app.data import AppData
from comgra_like.app.pages import compare
from comgra_like.app.timings import Timings

from tests.app.test_findings_scan import copy_trial

pytest.importorskip("torch")

COPIES = 12
FINDINGS = ("findings.error", "findings.warning", "findings.info")


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    from tests.analysis import loops

    root = tmp_path_factory.mktemp("compare_findings")
    source = loops.log_of_zero(root, group="source")
    group = root / "many"
    copy_trial(source / "trials" / "log_of_zero", group, COPIES)
    return group


def summary_text(summary) -> str:
    if isinstance(summary, str):
        return summary
    return "".join(part if isinstance(part, str) else part.children for part in summary)


def test_the_table_answers_at_once_and_the_counts_fill_in_as_scanned(many):
    data = AppData(many)
    trials = data.trial_ids()
    # without counting: no findings columns, nothing waits
    rows, columns, summary, _, waiting, key = compare.table_view(data, Timings(), None, False,
                                                                0.0)
    assert len(rows) == COPIES and waiting == 0
    # asked again with nothing new: the same key (a refresh sends nothing)
    assert compare.table_view(data, Timings(), None, False, 0.0)[5] == key
    assert not {c["id"] for c in columns} & set(FINDINGS)
    # counting, not waiting: every row at once, the counts of no trial yet
    rows, columns, summary, _, waiting, counting = compare.table_view(data, Timings(), None,
                                                                     True, 0.0)
    assert counting != key
    assert len(rows) == COPIES and 0 < waiting <= COPIES
    assert {c["id"]: c["type"] for c in columns}["findings.error"] == "numeric"
    assert f"counting findings: {COPIES - waiting} of {COPIES} trials scanned" in \
        summary_text(summary)
    empty = [r for r in rows if r["findings.error"] is None]
    assert len(empty) == waiting
    seen = [COPIES - waiting]
    end = time.monotonic() + 300
    while waiting:  # the page's ticks: each asks again
        assert time.monotonic() < end, f"{waiting} trials never counted"
        rows, _, summary, _, waiting, _ = compare.table_view(data, Timings(), None, True, 0.2)
        assert sum(r["findings.error"] is None for r in rows) == waiting
        seen.append(COPIES - waiting)
    assert seen == sorted(seen) and seen[0] < seen[-1] == COPIES
    assert "counting findings" not in summary_text(summary)
    # the counts are those of each trial's findings (a scan in the caller's thread)
    reference = AppData(many)
    for row in rows:
        found = reference.findings(row["trial_id"])
        for severity in ("error", "warning", "info"):
            assert row[f"findings.{severity}"] == sum(
                f["severity"] == severity for f in found)
        assert row["findings.error"] >= 1  # the NaN at step 7
    # the search filters the counted rows too
    rows, *_ = compare.table_view(data, Timings(), trials[0], True, 0.0)
    assert [r["id"] for r in rows] == [trials[0]] and rows[0]["findings.error"] >= 1


def test_with_findings_leaves_the_cells_of_trials_not_counted_empty(many):
    data = AppData(many)
    frame = cd.trials_frame(data)
    first, second = frame["trial_id"].iloc[:2]
    counted = cd.with_findings(frame, {first: {"error": 2, "warning": 0, "info": 1}})
    by_trial = counted.set_index("trial_id")
    assert by_trial.loc[first, "findings.error"] == 2
    assert by_trial.loc[first, "findings.info"] == 1
    assert by_trial.loc[second, FINDINGS].isna().all()
    assert "findings.error" not in frame  # the cached table is not changed
