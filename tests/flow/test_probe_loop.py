"""The probe loop end to end (issue 18): a real process records a conv net and serves
probes; this test submits edited inputs as the GUI will (comgra_like.probe.submit_input,
no torch needed for that), and the results appear through the query API."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from comgra_like.errors import ConfigurationError
from comgra_like.probe import serve, submit_input
from comgra_like.query import open_group
from comgra_like.record.flow import FlowChain

from .conv_net import INPUT_SHAPE, base_input, build_model, forward
from .helpers import record_trial

CHILD = Path(__file__).with_name("probe_child.py")


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, bound: float = 120):
    """Poll until ``condition()`` is true; a bound only against hanging, never a timing."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None and not condition():
            raise AssertionError(f"the serving process ended ({proc.returncode}) before "
                                 f"{what}:\n{proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def reference_flows(x: np.ndarray, rows=None) -> list:
    model = build_model()
    chain = FlowChain()
    loss = forward(model, torch.from_numpy(x).float(), chain)
    chain.backward(loss)
    return chain.flows(0, rows=rows)


def test_edited_inputs_are_served_and_their_flows_read_back(tmp_path):
    group_dir = tmp_path / "g"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), "g", "served", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        group = wait_for(lambda: (group_dir / "trials" / "served" / "trial.json").exists()
                         and open_group(group_dir), "the trial", proc)
        # one record per pair, written one after the other: wait for both
        base = wait_for(lambda: len(b := group.read_flows("served", probe_id=None)) == 2 and b,
                        "base flows", proc)
        assert [(f.source, f.target) for f in base] == [("input", "conv1"), ("conv1", "conv2")]
        original = group.read_flow("served", base[0].record_id).value_source
        assert original.shape == INPUT_SHAPE[1:]  # the map the GUI will let the user edit
        np.testing.assert_array_equal(original, base_input()[0])

        edited = original[None].copy()
        edited[0, 0, 2, 3] = 0.0  # a cell toggled off, as in vnittest's editing mode
        first = submit_input(group_dir, "served", edited, training_step=0)
        wrong = submit_input(group_dir, "served", np.zeros((2, 2), np.float32), training_step=0)
        edited2 = edited.copy()
        edited2[0, 0, 5, 5] = 7.0
        third = submit_input(group_dir, "served", edited2, training_step=0,
                             rows={"conv2": [0, 5]}, note="one unit of conv2")

        probes = wait_for(lambda: (p := group.read_probes("served")) and all(
            x.status != "pending" for x in p) and len(p) == 3 and p, "three results", proc)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert proc.stdout.read().split() == [first, wrong, third]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # the history, in the order of the edits
    assert [(p.probe_id, p.status) for p in probes] == [
        (first, "done"), (wrong, "failed"), (third, "done")]
    assert "ValueError" in probes[1].error and "(2, 2)" in probes[1].error
    assert probes[2].note == "one unit of conv2" and probes[0].seconds > 0

    # the flows of each probe are those of its input (not of the original one)
    got = [group.read_flow("served", r) for r in probes[0].record_ids]
    ref = reference_flows(edited)
    for g, r in zip(got, ref):
        assert g.info.probe_id == first and g.info.status == "complete"
        np.testing.assert_allclose(g.flow, r.flow, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(g.value_source, r.value_source)
    base_flow = group.read_flow("served", base[0].record_id).flow
    assert not np.allclose(got[0].flow, base_flow)  # the edit changed the flow
    assert group.read_flows("served", probe_id=wrong) == []
    third_flows = group.read_flows("served", probe_id=third)
    assert [f.status for f in third_flows] == ["complete", "partial"]
    rows = group.read_flow("served", third_flows[1].record_id).flow
    ref3 = reference_flows(edited2, rows={"conv2": [0, 5]})
    np.testing.assert_allclose(rows, ref3[1].flow, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(group.read_probe_input("served", third), edited2)

    # each served input went forward and backward under the recorder: its steps are there
    group.refresh()
    assert group.list_trials()[0].status == "finished"
    assert sorted(group.list_steps("served")["training_step"].unique()) == [0, 1, 2]


def test_serve_runs_a_probe_submitted_before_it_started_and_checks_arguments(tmp_path):
    group_dir = record_trial(tmp_path, "g", "t")
    pid = submit_input(group_dir, "t", np.ones((1, 3), np.float32))
    lin = torch.nn.Linear(3, 2)

    def fn(x):
        chain = FlowChain()
        y = chain.node("y", lin(chain.node("x", x)))
        chain.backward(y.sum())
        return chain

    assert serve(fn, group=group_dir, trial_id="t", max_probes=1, timeout=60) == [pid]
    (probe,) = open_group(group_dir).read_probes("t")
    assert probe.status == "done" and len(probe.record_ids) == 1
    assert serve(fn, group=group_dir, trial_id="t", poll_seconds=0.01, timeout=0.05) == []
    with pytest.raises(ConfigurationError, match="poll_seconds"):
        serve(fn, group=group_dir, trial_id="t", poll_seconds=0)
    submit_input(group_dir, "t", np.ones((1, 3), np.float32))
    serve(lambda x: None, group=group_dir, trial_id="t", max_probes=1)
    last = open_group(group_dir).read_probes("t")[-1]
    assert last.status == "failed" and "must return the FlowChain" in last.error
