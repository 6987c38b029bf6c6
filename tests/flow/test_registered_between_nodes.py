"""Tensors the recorder registers between two nodes of a FlowChain (issue 18): the flow's
batched backward passes go through them, and autograd adds each pass's gradients to the
``.grad`` they retain for the recorder. A real conv net trained under the
ComgraRecorder, with flows computed between the backward pass and
record_current_gradients: every recorded tensor (values and gradients) must be bitwise
that of the same loop without flows, and the flows those of the same chain without a
recorder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.query import open_group
from comgra_like.record.flow import FlowChain
from comgra_like.recorder import ComgraRecorder

STEPS = 3
BATCH = 4


def _model() -> nn.ModuleDict:
    torch.manual_seed(0)
    return nn.ModuleDict({"conv": nn.Conv2d(1, 2, 3, padding=1),
                          "fc1": nn.Linear(2 * 5 * 5, 6), "fc2": nn.Linear(6, 3)})


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 1, 5, 5, generator=gen),
             torch.randint(0, 3, (BATCH,), generator=gen)) for _ in range(STEPS)]


def _train(root: Path | None, trial: str, mode: str) -> list[list]:
    """Train STEPS steps. ``mode``: ``plain`` (no flows), ``flows`` (a chain whose
    non-node tensors are registered, flows computed before the gradients are recorded)
    or ``bare`` (the same chain, no recorder). Returns each step's flows."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = None
    if root is not None:
        rec = ComgraRecorder(root, "g", trial, DecisionMakerForRecordingsFrequencyPerType(1),
                             max_num_batch_size_to_record=2,
                             calculate_svd_and_other_expensive_operations_of_parameters=False)
        rec.track_module("net", model)

    def register(name: str, t: torch.Tensor, **kw) -> None:
        if rec is not None:
            rec.register_tensor(name, t, **kw)

    out = []
    for step, (x, y) in enumerate(_batches()):
        chain = FlowChain() if mode != "plain" else None
        node = chain.node if chain is not None else (lambda _name, t: t)
        if rec is not None:
            rec.start_batch(step, BATCH)
            rec.start_iteration()
        x = node("input", x)
        register("input", x, is_input=True)
        pre = model["conv"](x)
        register("conv pre", pre)  # between the nodes input and conv, not a node
        h = node("conv", torch.relu(pre))
        register("conv", h)
        z = model["fc1"](h.flatten(1))
        register("fc1", z)  # between conv and logits, not a node
        logits = node("logits", model["fc2"](torch.tanh(z)))
        register("logits", logits)
        loss = nn.functional.cross_entropy(logits, y)
        register("loss", loss, is_loss=True)
        if chain is None:
            loss.backward()
        else:
            chain.backward(loss)
            # whole flows, then one unit's rows: batched passes of both kinds
            flows = chain.flows(sample=1)
            flows += chain.flows(sample=2, rows={"logits": [0, 2]}, max_entries=10)
            out.append(flows)
        if rec is not None:
            rec.record_current_gradients("main")
            rec.finish_iteration()
            rec.finish_batch()
        opt.step()
        opt.zero_grad()
        if chain is not None:
            chain.release()
    if rec is not None:
        rec.finalize()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("between")
    _train(root, "plain", "plain")
    flows = _train(root, "flows", "flows")
    return open_group(root / "g"), flows


def test_registered_tensors_between_nodes_record_the_gradients_of_a_run_without_flows(runs):
    group, _ = runs
    compared = gradients = 0
    for step in range(STEPS):
        plain = group.list_tensors("plain", step)
        flows = group.list_tensors("flows", step)
        keys = ["iteration", "node", "role", "recording_type", "aggregation", "sample_index",
                "shape"]
        assert plain[keys].equals(flows[keys])
        for row in plain.itertuples():
            a = group.read_tensor("plain", step, row.iteration, row.node, row.role,
                                  row.recording_type, row.aggregation, row.sample_index)
            b = group.read_tensor("flows", step, row.iteration, row.node, row.role,
                                  row.recording_type, row.aggregation, row.sample_index)
            np.testing.assert_equal(a.stats, b.stats, err_msg=str(row))  # NaN == NaN
            if a.values is not None:
                np.testing.assert_array_equal(a.values, b.values, err_msg=str(row))
            compared += 1
            gradients += row.recording_type.startswith("gradient")
    # the registered non-node tensors' gradients are among them
    grads = group.list_tensors("flows", 0)
    grads = grads[grads.recording_type == "gradient:main"]
    assert {"conv pre", "fc1"} <= set(grads.node)
    assert compared > 50 and gradients > 10


def test_flows_are_those_of_the_same_chain_without_a_recorder(runs):
    _, recorded = runs
    bare = _train(None, "bare", "bare")
    assert len(recorded) == len(bare) == STEPS
    for with_rec, without in zip(recorded, bare):
        assert [(f.source, f.target, f.status) for f in with_rec] == [
            (f.source, f.target, f.status) for f in without]
        assert {f.status for f in with_rec} == {"complete", "partial", "too_large"}
        for f, g in zip(with_rec, without):
            for name, array in f.arrays().items():
                np.testing.assert_array_equal(array, g.arrays()[name], err_msg=name)


def test_flows_after_the_recorded_step_ended_leave_the_registered_gradients_alone(tmp_path):
    """The probe loop's order: the served function ends the recorder's batch, then the
    flows are computed (the recorder no longer holds the step's tensors)."""
    model = _model()
    rec = ComgraRecorder(tmp_path, "g", "late", DecisionMakerForRecordingsFrequencyPerType(1),
                         calculate_svd_and_other_expensive_operations_of_parameters=False)
    rec.track_module("net", model)
    x, y = _batches()[0]
    chain = FlowChain()
    rec.start_batch(0, BATCH)
    rec.start_iteration()
    x = chain.node("input", x)
    rec.register_tensor("input", x, is_input=True)
    pre = model["conv"](x)
    rec.register_tensor("conv pre", pre)
    h = chain.node("conv", torch.relu(pre))
    z = model["fc1"](h.flatten(1))
    rec.register_tensor("fc1", z)
    logits = chain.node("logits", model["fc2"](torch.tanh(z)))
    loss = nn.functional.cross_entropy(logits, y)
    rec.register_tensor("loss", loss, is_loss=True)
    chain.backward(loss)
    rec.record_current_gradients("main")
    rec.finish_iteration()
    rec.finish_batch()
    before = {"conv pre": pre.grad, "fc1": z.grad}
    copies = {k: v.clone() for k, v in before.items()}
    flows = chain.flows(sample=1)  # what _train asks
    flows += chain.flows(sample=2, rows={"logits": [0, 2]}, max_entries=10)
    for name, grad in before.items():
        after = (pre if name == "conv pre" else z).grad
        assert after is grad, name  # the same tensor, not a batched one leaked out
        torch.testing.assert_close(after, copies[name], rtol=0, atol=0)
    rec.finalize()
    bare = _train(None, "bare", "bare")[0]
    assert len(flows) == len(bare)
    for f, g in zip(flows, bare):
        assert f.arrays().keys() == g.arrays().keys()
        for name, array in f.arrays().items():
            np.testing.assert_array_equal(array, g.arrays()[name], err_msg=name)
