"""The README's gradient-flow walk-through runs as written: scripts/flow_walkthrough.py
trains its conv net under the recorder, stores the flows of its last step (conv1 ->
conv2 without its matrix under --max-entries), then serves an edit and a row asked for
the way the Flow page asks (submit_input, request_rows), and ends."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from comgra_like.format import flow_requests as fr
from comgra_like.probe import request_rows, submit_input
from comgra_like.query import open_group

from .test_probe_loop import wait_for


def test_the_walkthrough_script_runs_and_serves(tmp_path):
    group_dir = tmp_path / "flow_demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "comgra_like.scripts.flow_walkthrough", "--path", str(tmp_path),
         "--steps", "20", "--max-entries", "100000", "--max-probes", "1", "--max-rows", "1",
         "--timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        group = wait_for(lambda: (group_dir / "trials" / "bars" / "trial.json").exists()
                         and open_group(group_dir), "the trial", proc)
        flows = wait_for(lambda: len(f := group.read_flows("bars", probe_id=None)) == 3 and f,
                         "the three flows of the last step", proc, bound=300)
        assert [(f.source, f.target, f.status) for f in flows] == [
            ("input", "conv1", "complete"), ("conv1", "conv2", "too_large"),
            ("conv2", "logits", "complete")]
        assert flows[0].training_step == 20
        image = np.array(group.read_flow("bars", flows[0].record_id).value_source)
        edited = image.copy()
        edited[0, 6, :] = 1.0  # a horizontal bar drawn over it
        probe = submit_input(group_dir, "bars", edited[None], training_step=20)
        asked = request_rows(group_dir, "bars", flows[1].record_id, [0, 100])
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "trained 20 steps" in out and f"comgra --path {group_dir}" in out
    (p,) = group.read_probes("bars")
    assert p.probe_id == probe and p.status == "done", p.error
    assert len(group.read_flows("bars", probe_id=probe)) == 3
    request = fr.read_request(group_dir, "bars", asked)
    assert request.status == "done", request.error
    rows = group.read_flow("bars", request.record_ids[0])
    assert rows.info.rows == (0, 100) and rows.flow.shape == (2, 4, 12, 12)
    # the recorder recorded the run and each served input as steps of the trial
    group.refresh()
    steps = group.list_steps("bars")["training_step"].unique()
    assert {20, 21, 22} <= set(steps)
