"""A bad request does not break the probe loop (issue 28, item 3): the walk-through's
served function fails inside a recorded step when an edited input has the wrong shape
(its linear layer refuses it after ``start_batch``). Before, the recorder stayed
mid-step and every later edit and row request failed with CallOrderError until the
process was restarted; now the bad request is answered with its error, the step is
aborted and the next requests are served and recorded."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from comgra_like.errors import CallOrderError
from comgra_like.format import flow_requests as fr
from comgra_like.probe import request_rows, submit_input
from comgra_like.query import open_group
from comgra_like.record.flow import FlowChain

from .conv_net import base_input, build_model, forward, new_recorder
from .test_probe_loop import wait_for


def test_a_wrong_shaped_edit_is_answered_and_the_next_requests_are_served(tmp_path):
    group_dir = tmp_path / "flow_demo"
    proc = subprocess.Popen(
        [sys.executable, "-m", "comgra_like.scripts.flow_walkthrough", "--path", str(tmp_path),
         "--steps", "3", "--max-entries", "100000", "--max-probes", "2", "--max-rows", "1",
         "--timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        group = wait_for(lambda: (group_dir / "trials" / "bars" / "trial.json").exists()
                         and open_group(group_dir), "the trial", proc)
        flows = wait_for(lambda: len(f := group.read_flows("bars", probe_id=None)) == 3 and f,
                         "the three flows of the last step", proc, bound=300)
        assert flows[1].status == "too_large"
        image = np.array(group.read_flow("bars", flows[0].record_id).value_source)
        # 10x10 instead of 12x12: conv1 and conv2 take it, the linear layer does not
        wrong = submit_input(group_dir, "bars", np.zeros((1, 1, 10, 10), np.float32),
                             training_step=3)
        wait_for(lambda: [p for p in group.read_probes("bars") if p.status != "pending"],
                 "the wrong edit's answer", proc)
        edited = image.copy()
        edited[0, 6, :] = 1.0
        good = submit_input(group_dir, "bars", edited[None], training_step=3)
        asked = request_rows(group_dir, "bars", flows[1].record_id, [7])
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    by_id = {p.probe_id: p for p in group.read_probes("bars")}
    assert by_id[wrong].status == "failed" and "RuntimeError" in by_id[wrong].error
    assert by_id[good].status == "done", by_id[good].error
    assert len(group.read_flows("bars", probe_id=good)) == 3
    request = fr.read_request(group_dir, "bars", asked)
    assert request.status == "done", request.error
    assert group.read_flow("bars", request.record_ids[0]).info.rows == (7,)
    assert "CallOrderError" not in err
    # the good requests were recorded as steps; the aborted one was not
    group.refresh()
    steps = set(group.list_steps("bars")["training_step"].unique())
    assert {3, 5, 6} <= steps and 4 not in steps


def test_abort_batch_drops_the_open_step_and_the_next_step_is_recorded(tmp_path):
    model = build_model()
    recorder = new_recorder(tmp_path, "g", "t", model)
    assert recorder.abort_batch() is False  # no step open: nothing to do
    recorder.start_batch(0, 1, override__recording_is_active=True)
    recorder.start_iteration()
    recorder.register_tensor("input", torch.from_numpy(base_input()), is_input=True)
    with pytest.raises(CallOrderError):
        recorder.start_batch(1, 1)
    assert recorder.abort_batch() is True
    x = torch.from_numpy(base_input())
    recorder.start_batch(1, 1, override__recording_is_active=True)
    recorder.start_iteration()
    recorder.register_tensor("input", x, is_input=True)
    chain = FlowChain()
    loss = forward(model, x, chain)
    recorder.register_tensor("loss", loss, is_loss=True)
    chain.backward(loss)
    recorder.record_current_gradients("main")
    recorder.finish_iteration()
    recorder.finish_batch()
    chain.release()
    recorder.finalize()
    steps = open_group(tmp_path / "g").list_steps("t")["training_step"].unique()
    assert list(steps) == [1]
