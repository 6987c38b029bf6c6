"""Flows and probe requests on disk (comgra_like/format/flows.py) read back through the
query API (Group.read_flows, read_flow, read_probes), and the grouping of units."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.format import flows as ff
from comgra_like.probe import submit_input
from comgra_like.query import open_group
from comgra_like.query.flows import blocks_for, flow_links, group_units, pool_sum
from comgra_like.record.flow import FlowChain, write_flows

from .helpers import record_trial


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory):
    return record_trial(tmp_path_factory.mktemp("flows"), "g", "trial_a")


def conv_chain(seed: int = 0) -> FlowChain:
    torch.manual_seed(seed)
    conv1, conv2 = torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.Conv2d(2, 2, 3, stride=2)
    chain = FlowChain()
    x = chain.node("input", torch.randn(2, 1, 7, 7))
    h = chain.node("conv1", torch.relu(conv1(x)))
    out = chain.node("conv2", conv2(h))
    chain.backward((out ** 2).sum())
    return chain


def test_flows_round_trip_through_the_query_api(group_dir):
    chain = conv_chain()
    flows = chain.flows(sample=1)
    ids = write_flows(flows, group_dir, "trial_a", training_step=1)
    partial = chain.flows(sample=1, rows={"conv2": [2, 5]}, max_entries=100)
    pids = write_flows(partial, group_dir, "trial_a", training_step=1, probe_id="p-x")
    group = open_group(group_dir)
    assert group.list_trials()[0].trial_id == "trial_a"  # the recording is untouched
    infos = group.read_flows("trial_a", probe_id=None)
    assert [i.record_id for i in infos] == ids
    assert [(i.source, i.target, i.position, i.status) for i in infos] == [
        ("input", "conv1", 0, "complete"), ("conv1", "conv2", 1, "complete")]
    assert infos[1].source_shape == (2, 7, 7) and infos[1].target_shape == (2, 3, 3)
    assert len({i.chain_id for i in infos}) == 1 and infos[0].training_step == 1
    data = group.read_flow("trial_a", ids[1])
    np.testing.assert_array_equal(data.flow, flows[1].flow)
    np.testing.assert_array_equal(data.grad_source, flows[1].grad_source)
    np.testing.assert_array_equal(data.value_target, flows[1].value_target)
    # filters: origin, node names, step
    probe_infos = group.read_flows("trial_a", probe_id="p-x")
    assert [i.record_id for i in probe_infos] == pids
    assert [i.status for i in probe_infos] == ["too_large", "partial"]
    assert probe_infos[1].rows == (2, 5)
    too_large = group.read_flow("trial_a", pids[0])
    assert too_large.flow is None and too_large.grad_source is not None
    rows = group.read_flow("trial_a", pids[1]).flow
    np.testing.assert_allclose(rows, flows[1].flow.reshape(18, 2, 7, 7)[[2, 5]], rtol=1e-6)
    assert [i.record_id for i in group.read_flows("trial_a", target="conv1", probe_id=None)] == ids[:1]
    assert group.read_flows("trial_a", training_step=0) == []
    assert len(group.read_flows("trial_a")) == 4


def test_a_record_being_written_is_invisible(group_dir):
    group = open_group(group_dir)
    before = len(group.read_flows("trial_a"))
    folder = ff.flows_dir(group_dir, "trial_a") / ff.new_id("f")
    folder.mkdir(parents=True)
    (folder / "flow.npy").write_bytes(ff.npy_bytes(np.zeros(3)))  # no record.json yet
    (ff.flows_dir(group_dir, "trial_a") / ".hidden.tmp").write_bytes(b"partial")
    assert len(group.read_flows("trial_a")) == before
    with pytest.raises(NotFoundError, match="no flow record"):
        group.read_flow("trial_a", folder.name)


def test_missing_trials_and_bad_ids(group_dir, tmp_path):
    group = open_group(group_dir)
    with pytest.raises(NotFoundError, match="no trial 'nope'"):
        group.read_flows("nope")
    with pytest.raises(NotFoundError, match="no trial 'nope'"):
        submit_input(group_dir, "nope", np.zeros(3))
    with pytest.raises(ConfigurationError, match="not usable as a folder name"):
        group.read_flow("trial_a", "../../etc")
    with pytest.raises(ConfigurationError, match="array of numbers"):
        submit_input(group_dir, "trial_a", np.array(["a"]))


def test_submitted_inputs_are_pending_probes(group_dir):
    edited = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    pid = submit_input(group_dir, "trial_a", edited, training_step=1, sample=0,
                       rows={"conv2": [1, 2]}, note="cell (1, 2) set to 5")
    group = open_group(group_dir)
    probe = next(p for p in group.read_probes("trial_a") if p.probe_id == pid)
    assert probe.status == "pending" and probe.training_step == 1
    assert probe.rows == {"conv2": (1, 2)} and probe.shape == (1, 3, 4)
    assert probe.note == "cell (1, 2) set to 5"
    np.testing.assert_array_equal(group.read_probe_input("trial_a", pid), edited)
    assert pid in ff.pending_probes(group_dir, "trial_a")


def test_pool_sum_keeps_sums_with_ragged_blocks():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 7, 3))
    pooled = pool_sum(x, (2, 3, 1))
    assert pooled.shape == (3, 3, 3)
    assert np.isclose(pooled.sum(), x.sum())
    assert np.allclose(pooled[2, 2], x[4, 6])  # the last, shorter blocks
    assert np.allclose(pooled[0, 1], x[0:2, 3:6].sum(axis=(0, 1)))


def test_grouped_flows_conserve_every_block_sum():
    flow = conv_chain().flows(sample=0)[1]  # (2, 3, 3) <- (2, 7, 7)
    g = group_units(flow.flow, flow.target_shape, flow.source_shape, (1, 2, 2), (2, 3, 3))
    assert g.shape == (2, 2, 2, 1, 3, 3)
    assert np.isclose(g.sum(), flow.flow.sum(), rtol=1e-5)
    # the conservation identity survives grouping: sum over targets = the pooled gradient
    np.testing.assert_allclose(g.sum(axis=(0, 1, 2)), pool_sum(flow.grad_source, (2, 3, 3)),
                               rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigurationError, match="target \\+ source shape"):
        group_units(flow.flow, flow.source_shape, flow.target_shape, (1, 1, 1), (1, 1, 1))


def test_blocks_for_fits_the_unit_budget():
    assert blocks_for((16, 32, 32), 16384) == (1, 1, 1)
    blocks = blocks_for((16, 32, 32), 300)
    groups = [-(-s // b) for s, b in zip((16, 32, 32), blocks)]
    assert np.prod(groups) <= 300 and groups[1] == groups[2]  # maps stay square-ish
    assert blocks_for((10,), 1) == (10,)


def test_sankey_links_above_a_threshold():
    flow = np.array([[0.0, 0.5, -2.0], [0.1, 0.0, 1.0]])  # targets x sources
    links = flow_links(flow, (3,), min_abs=0.3)
    assert links["target"].tolist() == [0, 1, 0] and links["source"].tolist() == [2, 2, 1]
    assert links["value"].tolist() == [-2.0, 1.0, 0.5]
    assert flow_links(flow, (3,), max_links=1)["value"].tolist() == [-2.0]
    # a partial flow: the targets are its rows; maps are flattened per sample
    partial = np.zeros((2, 2, 2))
    partial[1, 1, 0] = 3.0
    links = flow_links(partial, (2, 2), rows=(7, 40))
    assert (links["target"].tolist(), links["source"].tolist()) == ([40], [2])
    with pytest.raises(ConfigurationError, match="does not end with the source shape"):
        flow_links(partial, (3,))


def test_ids_made_in_one_millisecond_sort_in_the_order_they_were_made():
    from comgra_like.format.flows import new_id

    ids = [new_id("p") for _ in range(200)]
    assert sorted(ids) == ids and len(set(ids)) == len(ids)
