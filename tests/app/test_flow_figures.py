"""The Flow page's builders (issue 18) on flows computed by FlowChain for a recorded conv
net (tests/app/flow_runs.py): the Sankey's links are query.flows.flow_links' above the
threshold, the grouping is said, heatmaps show the stored gradients, and the units a
click outlines are the nonzero rows and columns of the flow matrices."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from comgra_like.app import flow_figures as ff
from comgra_like.app.pages.flow import chains_of

from comgra_like.query import open_group
from comgra_like.query.flows import blocks_for, flow_links, group_units

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory) -> Path:
    from tests.app import flow_runs

    return flow_runs.record(tmp_path_factory.mktemp("flow_figures"))


def chain_at(group_dir: Path, step: int) -> list:
    group = open_group(group_dir)
    infos = [f for f in group.read_flows("conv") if f.training_step == step]
    (chain,) = chains_of(infos).values()
    return [group.read_flow("conv", f.record_id) for f in chain]


def drawn(model: ff.SankeyModel) -> set[tuple]:
    """(source node, source block, target node, target block, value) of every link."""
    return {(*model.node_key[s], *model.node_key[t], round(v, 6))
            for s, t, v in zip(model.link_source, model.link_target, model.link_value)}


@pytest.mark.parametrize("max_units", [4, 1024])
def test_sankey_links_are_the_flow_links_above_the_threshold(group_dir, max_units):
    flows = chain_at(group_dir, 0)
    grouped = ff.group_chain(flows, max_units)
    shapes = {n.name: n.shape for n in ff.chain_nodes(flows)}
    largest = ff.largest_link(grouped)
    for slider in (-4.0, -1.0, -0.3):
        threshold = ff.threshold_for(slider, largest)
        model = ff.sankey_model(grouped, shapes, threshold, max_links=100_000)
        expected = set()
        for f in flows:
            info = f.info
            tb, sb = blocks_for(info.target_shape, max_units), blocks_for(info.source_shape,
                                                                        max_units)
            g = group_units(f.flow, info.target_shape, info.source_shape, tb, sb)
            links = flow_links(g, g.shape[len(tb):], min_abs=threshold)
            expected |= {(info.source, int(s), info.target, int(t), round(float(v), 6))
                         for t, s, v in zip(links["target"], links["source"], links["value"])}
        assert drawn(model) == expected
        assert all(abs(v) >= threshold for v in model.link_value)
        figure = ff.sankey_figure(model)
        assert figure.layout.meta["links"] == len(expected)
        if expected:
            assert list(figure.data[0].link.value) == [abs(v) for v in model.link_value]
    # at most max_links are drawn, the largest; the summary counts those above the threshold
    capped = ff.sankey_model(grouped, shapes, 0.0, max_links=5)
    every = ff.sankey_model(grouped, shapes, 0.0, max_links=100_000)
    assert sorted(map(abs, capped.link_value)) == sorted(map(abs, every.link_value))[-5:]
    assert [e["above"] for e in capped.per_flow] == [e["above"] for e in every.per_flow]
    # a higher threshold draws fewer links
    low = ff.sankey_model(grouped, shapes, ff.threshold_for(-4, largest))
    high = ff.sankey_model(grouped, shapes, ff.threshold_for(-0.3, largest))
    assert len(high.link_value) < len(low.link_value)


def test_grouping_is_visible_and_keeps_the_sums(group_dir):
    flows = chain_at(group_dir, 0)
    blocks = ff.chain_blocks(flows, 4)
    assert blocks["input"] == (1, 4, 4)
    shapes = {n.name: n.shape for n in ff.chain_nodes(flows)}
    grouped = ff.group_chain(flows, 4)
    for g, f in zip(grouped, flows):
        np.testing.assert_allclose(g.matrix.sum(), np.asarray(f.flow, np.float64).sum(),
                                   rtol=1e-6)
        assert g.matrix.shape[1] <= 4
    model = ff.sankey_model(grouped, shapes, 0.0)
    text = "\n".join(ff.summary_lines(model, shapes, blocks))
    assert "input (1, 6, 6): 36 units in 4 groups of 1×4×4" in text
    assert "threshold |F| ≥ 0" in text
    assert ff.unit_label("input", (1, 6, 6), (1, 4, 4), 3) == "input[c0, y4:6, x4:6]"
    assert all(label.startswith(("input[", "conv1[", "conv2[")) for label in model.labels)
    ungrouped = ff.sankey_model(ff.group_chain(flows, 1024), shapes, 0.0)
    assert "input (1, 6, 6): 36 units, each drawn" in "\n".join(
        ff.summary_lines(ungrouped, shapes, ff.chain_blocks(flows, 1024)))
    assert len(ungrouped.labels) > len(model.labels)


def test_a_partial_flow_is_said_and_drawn_with_its_rows_only(group_dir):
    from tests.app.flow_runs import PARTIAL_ROWS

    flows = chain_at(group_dir, 1)
    assert [f.info.status for f in flows] == ["complete", "partial"]
    shapes = {n.name: n.shape for n in ff.chain_nodes(flows)}
    grouped = ff.group_chain(flows, 1024)
    assert list(grouped[1].targets) == list(PARTIAL_ROWS)
    model = ff.sankey_model(grouped, shapes, 0.0)
    conv2_units = {b for name, b in model.node_key if name == "conv2"}
    assert conv2_units <= set(PARTIAL_ROWS)
    links = flow_links(flows[1].flow, shapes["conv1"], rows=flows[1].info.rows)
    assert {k for k in drawn(model) if k[2] == "conv2"} == {
        ("conv1", int(s), "conv2", int(t), round(float(v), 6))
        for t, s, v in zip(links["target"], links["source"], links["value"])}
    text = "\n".join(ff.summary_lines(model, shapes, ff.chain_blocks(flows, 1024)))
    assert "partial flow, only the rows of 2 units of conv2 were computed" in text


def test_heatmaps_show_the_stored_gradient_as_maps(group_dir):
    flows = chain_at(group_dir, 0)
    nodes = ff.chain_nodes(flows)
    figure = ff.heatmaps_figure(nodes)
    assert [t.name for t in figure.data] == ["input", "conv1", "conv2"]
    expected = [flows[0].grad_source, flows[0].grad_target, flows[1].grad_target]
    for trace, node, grad in zip(figure.data, nodes, expected):
        layout = ff.map_layout(node.shape)
        z = np.asarray(trace.z, dtype=np.float64)
        index = np.asarray(trace.customdata)
        inside = index >= 0
        # every unit once, at the cell named by customdata, with its stored gradient
        assert sorted(index[inside]) == list(range(math.prod(node.shape)))
        np.testing.assert_allclose(z[inside], np.asarray(grad).reshape(-1)[index[inside]],
                                   rtol=1e-6)
        assert np.isnan(z[~inside]).all()
        assert layout.unit_at(*map(int, np.argwhere(index == 5)[0])) == 5
    # conv1 (2, 3, 3): its two channels are 3x3 maps side by side
    assert np.asarray(figure.data[1].z).shape == (3, 7)
    assert np.asarray(figure.data[0].z).shape == (6, 6)


def test_highlight_sets_are_the_nonzero_rows_and_columns(group_dir):
    flows = chain_at(group_dir, 0)
    first = np.asarray(flows[0].flow).reshape(18, 36)  # conv1 units x input units
    second = np.asarray(flows[1].flow).reshape(18, 18)  # conv2 x conv1
    for unit in (0, 4, 13):
        found = ff.highlight_sets(flows, "conv1", unit)
        assert found["unknown"] == []
        np.testing.assert_array_equal(found["units"]["input"], np.flatnonzero(first[unit]))
        np.testing.assert_array_equal(found["units"]["conv2"],
                                      np.flatnonzero(second[:, unit]))
    # from the last node back two layers: the inputs of the conv1 units it gets gradient from
    found = ff.highlight_sets(flows, "conv2", 7)
    via = np.flatnonzero(second[7])
    np.testing.assert_array_equal(found["units"]["conv1"], via)
    np.testing.assert_array_equal(found["units"]["input"],
                                  np.flatnonzero((first[via] != 0).any(axis=0)))
    # stride 2, 3x3 kernel, padding 1: conv1's centre unit sees a 3x3 patch of the input
    assert len(ff.highlight_sets(flows, "conv1", 4)["units"]["input"]) == 9
    # outlined on the heatmaps
    figure = ff.heatmaps_figure(ff.chain_nodes(flows), selected=("conv1", 4),
                                highlight=ff.highlight_sets(flows, "conv1", 4)["units"])
    outline = next(t for t in figure.data if t.name == "highlight input")
    assert len(outline.x) == 9


def test_highlight_through_a_partial_flow(group_dir):
    flows = chain_at(group_dir, 1)
    rows = np.asarray(flows[1].flow).reshape(2, 18)
    found = ff.highlight_sets(flows, "conv1", 4)
    np.testing.assert_array_equal(found["units"]["conv2"],
                                  np.asarray(flows[1].info.rows)[np.flatnonzero(rows[:, 4])])
    assert ff.highlight_sets(flows, "conv2", 5)["unknown"] == []
    assert ff.highlight_sets(flows, "conv2", 3)["unknown"] == ["conv1"]  # row not computed


def test_editing_toggles_and_paints(group_dir):
    values = np.asarray(chain_at(group_dir, 0)[0].value_source)
    toggled = ff.toggle(values, 7, 2.5)
    assert toggled.reshape(-1)[7] == 0 and values.reshape(-1)[7] != 0
    assert ff.toggle(toggled, 7, 2.5).reshape(-1)[7] == 2.5
    painted = ff.paint(values, [1, 2], -1.0)
    assert list(painted.reshape(-1)[[1, 2]]) == [-1.0, -1.0]
    np.testing.assert_array_equal(values, np.asarray(chain_at(group_dir, 0)[0].value_source))
    figure = ff.editor_figure(painted, original=values)
    np.testing.assert_allclose(np.asarray(figure.data[0].z), painted[0])
    assert len(figure.data[1].x) == 2  # the edited cells are outlined
