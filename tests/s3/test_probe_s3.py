"""The probe loop on a group on S3 (issues 18/19): a real training process (the flow
tests' conv net, tests/flow/row_child.py) serves ``s3://.../g`` on the moto server while
this process, as the Flow page does (``Path`` of the group, the same functions), submits
an edited input and asks for rows of a flow too large to store whole. The answered rows
equal those of the same run on local disk, and every request, answer and heartbeat is an
object on S3 (nothing lands on the local disk)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.format import flow_requests as fr
from comgra_like.format.files import files_for, s3_options
from comgra_like.format.flows import submit_input
from comgra_like.probe import serve
from comgra_like.query import open_group
from tests.flow.conv_net import base_input
from tests.flow.helpers import record_trial
from tests.flow.test_probe_loop import wait_for
from tests.flow.test_row_requests import too_large_record

CHILD = Path(__file__).parents[1] / "flow" / "row_child.py"
TRIAL = "rows"


def _opened(group_path: Path):
    try:
        return open_group(group_path)
    except NotFoundError:  # on S3: nothing under the prefix yet
        return None


def _base_flows(group) -> list:
    try:
        return group.read_flows(TRIAL, probe_id=None)
    except NotFoundError:  # the group is there before the trial's folder
        return []


def _serve_and_ask(root: str, group_path: Path, cwd: Path) -> tuple[list, dict]:
    """Run the child serving ``root``/g; ask for a row of the recorded run's flow, submit
    an edit (sample 1 of a batch of two) and ask for two rows of its flow. Returns the
    answered requests and {(probe or None, units): rows}."""
    proc = subprocess.Popen([sys.executable, str(CHILD), root, "g", TRIAL, "1", "2"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        group = wait_for(lambda: _opened(group_path), "the group", proc)
        wait_for(lambda: _base_flows(group), "the base flows", proc)
        wait_for(lambda: fr.serving(group_path, TRIAL).alive, "the heartbeat", proc)
        base = too_large_record(group, TRIAL)
        first = fr.request_rows(group_path, TRIAL, base.record_id, [4])
        edited = np.concatenate([base_input(), -base_input()])
        edited[1, 0, 2, 2] = 5.0
        probe = submit_input(group_path, TRIAL, edited, training_step=0, sample=1)
        probe_flow = wait_for(lambda: [f for f in group.read_flows(TRIAL, probe_id=probe)
                                       if f.source == "input"], "the probe's flows", proc)[0]
        second = fr.request_rows(group_path, TRIAL, probe_flow.record_id, [13, 2])

        def answered():
            rs = fr.list_requests(group_path, TRIAL)
            return len(rs) == 2 and all(r.status != "pending" for r in rs) and rs

        done = wait_for(answered, "two answers", proc)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert proc.stdout.read().split() == [first, probe, second]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [(r.status, r.units, r.error) for r in done] == [
        ("done", (4,), None), ("done", (2, 13), None)]
    assert not fr.serving(group_path, TRIAL).alive  # the child said it stopped
    rows = {}
    for r in done:
        (record_id,) = r.record_ids
        row = group.read_flow(TRIAL, record_id)
        assert row.info.chain_id == fr.rows_chain_id(r.record_id)
        rows[(r.probe_id is not None, r.units)] = row.flow
    return done, rows


def test_a_training_process_serves_edits_and_row_requests_of_a_group_on_s3(s3, tmp_path):
    _, local_rows = _serve_and_ask(str(tmp_path / "local"), tmp_path / "local" / "g",
                                            tmp_path)
    # the GUI's data.path is a Path: s3://bucket/prefix/g as Path("s3:/bucket/prefix/g")
    s3_group = Path(f"{s3}/g")
    work = tmp_path / "cwd"
    work.mkdir()
    s3_done, s3_rows = _serve_and_ask(s3, s3_group, work)

    assert sorted(s3_rows) == sorted(local_rows) == [(False, (4,)), (True, (2, 13))]
    for key, rows in local_rows.items():
        np.testing.assert_allclose(s3_rows[key], rows, rtol=1e-6, atol=1e-8)
        assert np.abs(rows).sum() > 0
    # the requests, their answers and the heartbeat are objects under the trial on S3
    files = files_for(s3_group)
    folder = fr.requests_dir(s3_group, TRIAL)
    names = sorted(i.base_name for i in pafs.S3FileSystem(**s3_options()).get_file_info(
        pafs.FileSelector(files.key(folder))))
    assert names == sorted([fr.HEARTBEAT_JSON] + [
        f"{r.request_id}{suffix}" for r in s3_done for suffix in (".json", fr.RESULT_SUFFIX)])
    # and nothing went to a local folder named after the URI
    assert list(work.iterdir()) == []


def test_a_second_serving_process_for_the_trial_is_refused_on_s3(s3):
    """Requests are not claimed (no rename on S3): while another process's heartbeat is
    fresh, serve refuses to start rather than answer every request a second time."""
    group = record_trial(Path(s3), "g", "t")
    folder = fr.requests_dir(group, "t")
    files_for(group).write_json(folder / fr.HEARTBEAT_JSON, {
        "pid": 1, "host": "elsewhere", "started": 0.0, "beat": time.time(),
        "stopped": None})
    assert fr.serving(group, "t").alive
    with pytest.raises(ConfigurationError, match="process 1 on elsewhere already serves"):
        serve(lambda x: None, group=group, trial_id="t", max_rows=1, timeout=1)
    # the other process's heartbeat is left as it was
    assert files_for(group).read_json(folder / fr.HEARTBEAT_JSON)["host"] == "elsewhere"
