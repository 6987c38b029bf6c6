"""Rows of a flow too large to store whole, on demand (issue 18): the request files the
GUI writes (comgra_like.format.flow_requests, no torch), and a real serving process
(tests/flow/row_child.py) picking requests up and storing the asked unit's row, which
equals torch.autograd.functional.jacobian's row times the upstream gradient."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.format import flow_requests as fr
from comgra_like.probe import request_rows, serve, submit_input
from comgra_like.query import open_group
from comgra_like.record.flow import FlowChain, write_flows

from .conv_net import base_input, build_model
from .helpers import record_trial
from .test_probe_loop import wait_for

CHILD = Path(__file__).with_name("row_child.py")


def expected_row(x: np.ndarray, sample: int, unit: int) -> np.ndarray:
    """Row ``unit`` of d conv1[sample] / d input[sample] (torch.autograd.functional.
    jacobian) times the loss's gradient at that unit of conv1."""
    model = build_model()
    xt = torch.from_numpy(x).float()

    def conv1(inp: torch.Tensor) -> torch.Tensor:
        return torch.tanh(model["conv1"](inp))

    jac = torch.autograd.functional.jacobian(conv1, xt)  # conv1 shape + input shape
    n_out = conv1(xt)[sample].numel()
    row = jac[sample].reshape(n_out, *xt.shape)[unit][sample]
    h = conv1(xt).detach().requires_grad_(True)
    out = model["conv2"](h)
    ((out ** 2).sum() + out.sum()).backward()
    return (row * h.grad[sample].reshape(-1)[unit]).numpy()


def too_large_record(group, trial: str, probe_id=None):
    (info,) = [f for f in group.read_flows(trial, probe_id=probe_id)
               if f.source == "input" and not fr.is_rows_chain(f.chain_id)]
    assert info.status == "too_large" and info.full_entries == 648
    return info


def test_a_serving_process_answers_row_requests_with_the_jacobian_row(tmp_path):
    group_dir = tmp_path / "g"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), "g", "rows", "1", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        group = wait_for(lambda: (group_dir / "trials" / "rows" / "trial.json").exists()
                         and open_group(group_dir), "the trial", proc)
        wait_for(lambda: group.read_flows("rows", probe_id=None), "base flows", proc)
        wait_for(lambda: fr.serving(group_dir, "rows").alive, "the heartbeat", proc)
        base = too_large_record(group, "rows")

        # the recorded run's flow: unit 4 of conv1 (its centre of channel 0)
        first = request_rows(group_dir, "rows", base.record_id, [4])
        # an edit of the input (a batch of two, sample 1) and a row of its flow
        edited = np.concatenate([base_input(), -base_input()])
        edited[1, 0, 2, 2] = 5.0
        probe = submit_input(group_dir, "rows", edited, training_step=0, sample=1)
        probe_flow = wait_for(lambda: [f for f in group.read_flows("rows", probe_id=probe)
                                       if f.source == "input"], "the probe's flows", proc)[0]
        assert probe_flow.status == "too_large" and probe_flow.sample == 1
        second = request_rows(group_dir, "rows", probe_flow.record_id, [13, 2])

        def answered():
            rs = fr.list_requests(group_dir, "rows")
            return len(rs) == 2 and all(r.status != "pending" for r in rs) and rs

        done = wait_for(answered, "two answers", proc)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert proc.stdout.read().split() == [first, probe, second]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert [(r.request_id, r.status, r.units) for r in done] == [
        (first, "done", (4,)), (second, "done", (2, 13))]
    assert done[0].seconds > 0 and done[0].error is None
    # the process said it stopped: nobody answers now
    assert not fr.serving(group_dir, "rows").alive

    # the rows are partial records joined to the record they complete
    row = group.read_flow("rows", done[0].record_ids[0])
    assert row.info.status == "partial" and row.info.rows == (4,)
    assert row.info.chain_id == fr.rows_chain_id(base.record_id)
    assert row.info.probe_id is None and row.info.training_step == 0
    assert row.flow.shape == (1, 1, 6, 6)
    # the recorded run's input is the sample stored with the chain, as a batch of one
    np.testing.assert_allclose(row.flow[0], expected_row(base_input(), 0, 4),
                               rtol=1e-5, atol=1e-7)
    assert np.abs(row.flow).sum() > 0
    probe_rows = group.read_flow("rows", done[1].record_ids[0])
    assert probe_rows.info.probe_id == probe and probe_rows.info.rows == (2, 13)
    for k, unit in enumerate((2, 13)):
        np.testing.assert_allclose(probe_rows.flow[k], expected_row(edited, 1, unit),
                                   rtol=1e-5, atol=1e-7)
    # the probe's own input, not the recorded one: the rows differ
    assert not np.allclose(probe_rows.flow[0], expected_row(base_input(), 0, 2))


def test_request_files_and_refusals(tmp_path):
    group_dir = record_trial(tmp_path, "g", "t")
    lin = torch.nn.Linear(3, 4)

    def fn(x: torch.Tensor) -> FlowChain:
        chain = FlowChain()
        y = chain.node("y", torch.tanh(lin(chain.node("x", x))))
        chain.backward((y ** 2).sum())
        return chain

    chain = fn(torch.ones(2, 3))
    big, = write_flows(chain.flows(1, max_entries=4), group_dir, "t", training_step=3)
    whole, = write_flows(chain.flows(1), group_dir, "t", training_step=3)

    rid = request_rows(group_dir, "t", big, [3, 1, 3])
    path = fr.requests_dir(group_dir, "t") / f"{rid}.json"
    request = json.loads(path.read_text())
    assert request["units"] == [1, 3] and request["record_id"] == big
    assert (request["source"], request["target"], request["sample"]) == ("x", "y", 1)
    assert request["training_step"] == 3 and request["probe_id"] is None
    # a file being written (hidden name) is no request
    (path.parent / f".{rid}.json.123.tmp").write_text("{")
    assert fr.pending_requests(group_dir, "t") == [rid]
    (req,) = fr.list_requests(group_dir, "t")
    assert req.status == "pending" and req.units == (1, 3) and req.record_ids == ()

    with pytest.raises(ConfigurationError, match=r"\[0, 4\)"):
        request_rows(group_dir, "t", big, [4])
    with pytest.raises(ConfigurationError, match="stored whole"):
        request_rows(group_dir, "t", whole, [0])
    with pytest.raises(NotFoundError, match="no flow record"):
        request_rows(group_dir, "t", "f000-nothing", [0])
    with pytest.raises(ConfigurationError, match="at least one unit"):
        request_rows(group_dir, "t", big, [])
    assert fr.pending_requests(group_dir, "t") == [rid]  # refusals wrote nothing

    # no serving process yet: the page can say so
    assert not fr.serving(group_dir, "t").alive
    assert "comgra_like.probe.serve(fn" in fr.how_to_serve(group_dir, "t")
    # served in this process (serve's loop, the per-unit path of record/flow.py)
    assert serve(fn, group=group_dir, trial_id="t", max_rows=1, timeout=60) == [rid]
    (req,) = fr.list_requests(group_dir, "t")
    assert req.status == "done"
    got = open_group(group_dir).read_flow("t", req.record_ids[0])
    ref = fn(torch.ones(2, 3)).flows(1)[0].flow  # the full 4x3 matrix
    np.testing.assert_allclose(got.flow, ref[[1, 3]], rtol=1e-6)
    assert req.note is None  # the same network: the values match the record's

    # a served loss other than the run's (x3, as an edited input without labels would
    # have): the rows are still the stored flow's, weighted by the record's own gradient
    def tripled(x: torch.Tensor) -> FlowChain:
        chain = FlowChain()
        y = chain.node("y", torch.tanh(lin(chain.node("x", x))))
        chain.backward(3 * (y ** 2).sum())
        return chain

    again = request_rows(group_dir, "t", big, [0, 2])
    serve(tripled, group=group_dir, trial_id="t", max_rows=1, timeout=60)
    answer = open_group(group_dir).read_flow(
        "t", fr.read_request(group_dir, "t", again).record_ids[0])
    np.testing.assert_allclose(answer.flow, ref[[0, 2]], rtol=1e-6)
    # the network changed since the record: answered, with a note saying so
    with torch.no_grad():
        lin.bias += 1.0
    changed = request_rows(group_dir, "t", big, [0])
    serve(fn, group=group_dir, trial_id="t", max_rows=1, timeout=60)
    assert "differs from the record's" in fr.read_request(group_dir, "t", changed).note

    beat = fr.serving(group_dir, "t")
    assert not beat.alive and beat.stopped is not None and beat.pid is not None
    # a heartbeat is alive while fresh, stale after STALE_SECONDS (given times, no waiting)
    fr.write_heartbeat(group_dir, "t", started=beat.started)
    fresh = fr.serving(group_dir, "t")
    assert fresh.alive
    assert not fr.serving(group_dir, "t", now=fresh.beat + fr.STALE_SECONDS + 1).alive

    # a request the served function cannot answer fails with the reason, the loop goes on
    bad = request_rows(group_dir, "t", big, [0])
    serve(lambda x: FlowChain(), group=group_dir, trial_id="t", max_rows=1, timeout=60)
    last = fr.read_request(group_dir, "t", bad)
    assert last.status == "failed" and "no node 'x'" in last.error
