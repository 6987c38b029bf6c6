"""The Flow page's one write seam and its reads of the probe loop (app/pages/flow/data.py
over comgra_like.query.flow_serving), on a recorded conv net with a partial flow
(tests/app/flow_runs.py): a row request is written, read back pending, and named in the
status line with how to start a serving process; a read-only GUI refuses both writes
before anything reaches the group."""

from __future__ import annotations

import dataclasses

import pytest
from comgra_like.app import create_app
from comgra_like.app.pages import flow as page
from comgra_like.app.pages.flow import views
from dash import no_update

from comgra_like.errors import ReadOnlyError
from comgra_like.query import flow_serving

pytest.importorskip("torch")

TRIAL = "conv"


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory):
    from tests.app import flow_runs

    return flow_runs.record(tmp_path_factory.mktemp("flows"))


def partial_record(reads: page.FlowData):
    flows, _ = reads.listed(TRIAL)
    partial = next(f for f in flows if f.status == "partial")
    unit = next(u for u in range(18) if u not in partial.rows)
    return partial, unit


def test_a_row_request_goes_through_the_seam_and_reads_back_pending(group_dir):
    reads = page.FlowData(create_app(group_dir, prefetch=False).comgra_parts)
    partial, unit = partial_record(reads)
    assert reads.serving(TRIAL) == flow_serving.NOBODY  # no heartbeat: nobody serves
    request_id = reads.request_row(TRIAL, partial.record_id, unit)
    request = reads.row_request(TRIAL, request_id)
    assert request is not None
    assert (request.status, request.units, request.record_id) == (
        flow_serving.PENDING, (unit,), partial.record_id)
    text = views.row_status(reads, {"trial": TRIAL, "node": partial.target, "unit": unit,
                                    "request_id": request_id})
    assert text.startswith(f"Asked for the row of {partial.target} unit {unit}")
    assert "comgra_like.probe.serve" in text  # how to start a serving process
    assert reads.row_request(TRIAL, "q-unknown") is None  # NotFoundError: degraded


def test_a_read_only_gui_refuses_both_writes_before_touching_the_group(group_dir):
    parts = create_app(group_dir, prefetch=False).comgra_parts
    reads = page.FlowData(dataclasses.replace(parts, read_only=True))
    partial, unit = partial_record(reads)
    requests = group_dir / "trials" / TRIAL / "flow_requests"
    before = sorted(p.name for p in requests.iterdir()) if requests.exists() else []
    with pytest.raises(ReadOnlyError):
        reads.request_row(TRIAL, partial.record_id, unit)
    chain = next(iter(page.chains_of(reads.listed(TRIAL)[0])))
    stored = reads.editable(TRIAL, chain)
    with pytest.raises(ReadOnlyError):
        reads.save_edit(TRIAL, stored, {"chain": chain}, "")
    after = sorted(p.name for p in requests.iterdir()) if requests.exists() else []
    assert after == before
    assert not (group_dir / "trials" / TRIAL / "probes").exists()
    saved, status, origin = views.save_view(reads, TRIAL, 1, {"chain": chain}, "")
    assert status.startswith("Not saved: this GUI is read-only")
    assert saved is origin is no_update
