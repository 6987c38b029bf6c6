"""Rows served on demand join the flow they complete (app/flow_figures.with_rows), and
the page knows which clicked unit lacks its row (missing_row)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from comgra_like.app import flow_figures as ff

from comgra_like.query.flows import FlowData, FlowInfo


def flow(status: str, matrix, rows=None, *, source="a", target="b", chain="c1",
         record="f1", position=0) -> FlowData:
    info = FlowInfo(record_id=record, trial_id="t", source=source, target=target, sample=0,
                    training_step=0, iteration=0, status=status, weighting="gradient",
                    source_shape=(2, 2), target_shape=(3,), rows=rows, full_entries=12,
                    probe_id=None, chain_id=chain, position=position, origin="comgra_like",
                    created=0.0, path=Path("."))
    side = np.zeros(3, np.float32)
    return FlowData(info, None if matrix is None else np.asarray(matrix, np.float32),
                    np.zeros((2, 2), np.float32), side, np.zeros((2, 2), np.float32), side)


def rows_of(*pairs) -> np.ndarray:
    return np.stack([np.full((2, 2), v, np.float32) for v in pairs])


def test_rows_join_a_flow_stored_without_its_matrix():
    big = flow("too_large", None)
    assert ff.missing_row([big], "b", 1) is big
    assert ff.missing_row([big], "a", 1) is None  # the first node has no flow into it
    first = flow("partial", rows_of(5.0), rows=(1,), chain="rows-f1", record="f2")
    second = flow("partial", rows_of(7.0, 9.0), rows=(2, 1), chain="rows-f1", record="f3")
    joined = ff.with_rows(big, [first, second])
    assert joined.info.status == "partial" and joined.info.rows == (1, 2)
    assert joined.info.record_id == "f1"  # still the record asked about
    np.testing.assert_array_equal(joined.flow, rows_of(5.0, 7.0))  # unit 1's first row kept
    assert ff.missing_row([joined], "b", 1) is None
    assert ff.missing_row([joined], "b", 0) is joined
    # the joined flow outlines like a partial one: unit 1 reaches every unit of a
    found = ff.highlight_sets([joined], "b", 1)
    assert list(found["units"]["a"]) == [0, 1, 2, 3] and found["unknown"] == []
    assert ff.highlight_sets([big], "b", 1)["unknown"] == ["a"]


def test_stored_rows_come_first_and_complete_flows_are_left_alone():
    partial = flow("partial", rows_of(1.0), rows=(0,))
    joined = ff.with_rows(partial, [flow("partial", rows_of(2.0, 3.0), rows=(0, 2))])
    assert joined.info.rows == (0, 2)
    np.testing.assert_array_equal(joined.flow, rows_of(1.0, 3.0))
    whole = flow("complete", np.ones((3, 2, 2)))
    assert ff.with_rows(whole, [flow("partial", rows_of(2.0), rows=(0,))]) is whole
    assert ff.missing_row([whole], "b", 2) is None
    assert ff.with_rows(flow("too_large", None), []).info.status == "too_large"


def test_sankey_nodes_stay_in_their_layers_column():
    """A partial flow's target units without rows have no incoming link; plotly would
    draw them in the first column. Each node is placed in its layer's column."""
    joined = ff.with_rows(flow("too_large", None, record="f1"),
                          [flow("partial", rows_of(1.0), rows=(1,), record="f2")])
    second = flow("complete", np.arange(6, dtype=np.float32).reshape(2, 3) + 1,
                  source="b", target="c", position=1)
    second.info = dataclasses.replace(second.info, source_shape=(3,), target_shape=(2,))
    grouped = [ff.grouped_flow(joined, (1, 1), (1,)), ff.grouped_flow(second, (1,), (1,))]
    model = ff.sankey_model(grouped, {"a": (2, 2), "b": (3,), "c": (2,)}, 0.0)
    layer_b = [k for k, (name, _) in enumerate(model.node_key) if name == "b"]
    assert len(layer_b) == 3  # units 0 and 2 of b have no rows into them
    x = ff.sankey_figure(model).data[0].node.x
    assert {round(x[k], 3) for k in layer_b} == {0.5}
    assert {round(x[k], 3) for k, (n, _) in enumerate(model.node_key) if n == "a"} == {0.001}
