"""Layered graph layout (comgra_like.app.graph_layout): pure, no Dash, no files."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import FrozenInstanceError
from itertools import combinations, pairwise

import pytest
from comgra_like.app.graph_layout import compute_layout, count_crossings
from hypothesis import given, settings
from hypothesis import strategies as st


def assert_no_overlap(layout, node_spacing=1.0, layer_spacing=1.0):
    # coordinates are rounded to 2 decimals: allow that much
    for (a, (xa, ya)), (b, (xb, yb)) in combinations(layout.positions.items(), 2):
        if abs(xa - xb) < layer_spacing * 0.5:
            assert abs(ya - yb) >= node_spacing - 0.011, (a, b, ya, yb)


@st.composite
def random_dags(draw, max_nodes=30):
    n = draw(st.integers(1, max_nodes))
    topological = [f"n{i}" for i in range(n)]
    possible = [(i, j) for i in range(n) for j in range(i + 1, n)]
    chosen = draw(st.lists(st.sampled_from(possible), max_size=3 * n) if possible else st.just([]))
    edges = [(topological[i], topological[j]) for i, j in chosen]
    # the input order is not the topological order
    names = draw(st.permutations(topological))
    return names, edges


@st.composite
def random_graphs(draw, max_nodes=20):
    """Any directed graph: cycles, self-loops, duplicates, edges into import nodes."""
    n = draw(st.integers(1, max_nodes))
    names = [f"v{i}" for i in range(n)]
    edges = draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)),
                          max_size=4 * n))
    imports = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    return names, edges, imports


@settings(max_examples=150, deadline=None)
@given(random_dags())
def test_every_edge_of_a_dag_goes_strictly_left_to_right(dag):
    names, edges = dag
    layout = compute_layout(names, edges)
    assert set(layout.layers) == set(names)
    assert layout.reversed_edges == frozenset()
    for s, t in edges:
        assert layout.layers[s] < layout.layers[t], (s, t)
        assert layout.positions[s][0] < layout.positions[t][0]
        path = layout.edge_paths[(s, t)]
        assert path[0] == layout.positions[s] and path[-1] == layout.positions[t]
        # one point per layer: long edges go through their dummy points
        xs = [p[0] for p in path]
        assert xs == sorted(xs) and len(path) == layout.layers[t] - layout.layers[s] + 1
    assert min(layout.layers.values()) == 0
    assert sorted(n for column in layout.layer_order for n in column) == sorted(names)
    for layer, column in enumerate(layout.layer_order):
        assert all(layout.layers[n] == layer for n in column)
        # the column order is top to bottom
        ys = [layout.positions[n][1] for n in column]
        assert ys == sorted(ys, reverse=True)


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.sampled_from([0.5, 1.0, 2.5]))
def test_no_two_nodes_overlap(dag, spacing):
    names, edges = dag
    layout = compute_layout(names, edges, node_spacing=spacing, layer_spacing=spacing)
    assert_no_overlap(layout, node_spacing=spacing, layer_spacing=spacing)


@settings(max_examples=150, deadline=None)
@given(random_graphs())
def test_cycles_and_bad_edges_do_not_crash(graph):
    names, edges, imports = graph
    layout = compute_layout(names, edges, import_nodes=imports)
    assert set(layout.positions) == set(names)
    for name in imports:
        assert layout.layers[name] == 0
    for s, t in set(edges):
        if s == t or (s in imports and t in imports):
            continue
        if (s, t) in layout.reversed_edges:
            assert layout.layers[t] < layout.layers[s]
        else:
            assert layout.layers[s] < layout.layers[t]
    assert_no_overlap(layout)


def test_a_cycle_is_broken_by_reversing_one_edge():
    layout = compute_layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")])
    assert len(layout.reversed_edges) == 1
    assert dict(layout.layers) == {"a": 0, "b": 1, "c": 2}
    assert layout.reversed_edges == {("c", "a")}


def test_unknown_endpoints_and_self_loops_are_ignored():
    layout = compute_layout(["a", "b"], [("a", "a"), ("a", "zzz"), ("a", "b"), ("a", "b")])
    assert dict(layout.layers) == {"a": 0, "b": 1}
    assert list(layout.edge_paths) == [("a", "b")]


def test_empty_graph():
    layout = compute_layout([], [])
    assert layout.positions == {} and layout.crossings == 0 and layout.num_layers == 0


def test_import_nodes_stand_in_layer_zero():
    # Without the rule, "state" would move right next to its only consumer "h3".
    names = ["x", "h1", "h2", "h3", "state", "loop_back"]
    edges = [("x", "h1"), ("h1", "h2"), ("h2", "h3"), ("state", "h3"), ("h3", "loop_back"),
             ("loop_back", "state")]
    layout = compute_layout(names, edges, import_nodes=["state"])
    assert layout.layers["state"] == 0
    assert layout.layers["h3"] == 3
    # an edge into an import node is drawn backwards, never pulls it right
    assert ("loop_back", "state") in layout.reversed_edges
    assert layout.layer_order[0][0] in ("x", "state")


def test_sources_stand_next_to_their_consumer():
    names = ["x", "h1", "h2", "h3", "w3", "target", "loss"]
    edges = [("x", "h1"), ("h1", "h2"), ("h2", "h3"), ("w3", "h3"), ("h3", "loss"),
             ("target", "loss")]
    layout = compute_layout(names, edges)
    assert layout.layers["w3"] == layout.layers["h3"] - 1
    assert layout.layers["target"] == layout.layers["loss"] - 1
    assert layout.layers["x"] == 0


def test_parameters_of_one_group_share_a_column_and_stay_together():
    # lin.weight is consumed at layer 2, lin.bias at layer 3: alone they would stand in
    # different columns; other sources in that column must not split the group.
    names = ["x", "a", "b", "c", "other1", "lin.weight", "other2", "lin.bias", "other3"]
    edges = [("x", "a"), ("a", "b"), ("b", "c"), ("lin.weight", "b"), ("lin.bias", "c"),
             ("other1", "b"), ("other2", "b"), ("other3", "b")]
    groups = {"lin.weight": "lin", "lin.bias": "lin"}
    ungrouped = compute_layout(names, edges)
    assert ungrouped.layers["lin.weight"] != ungrouped.layers["lin.bias"]
    layout = compute_layout(names, edges, column_group=groups)
    assert layout.layers["lin.weight"] == layout.layers["lin.bias"] == 1
    column = layout.layer_order[1]
    assert abs(column.index("lin.weight") - column.index("lin.bias")) == 1
    for s, t in edges:
        assert layout.layers[s] < layout.layers[t]


def test_far_apart_members_of_a_group_get_their_own_columns():
    chain = [f"h{i}" for i in range(8)]
    edges = list(pairwise(chain)) + [("m.a", "h1"), ("m.b", "h7")]
    layout = compute_layout(chain + ["m.a", "m.b"], edges,
                            column_group={"m.a": "m", "m.b": "m"})
    assert layout.layers["m.a"] == 0 and layout.layers["m.b"] == 6


def test_barycenter_sweeps_remove_crossings_of_a_known_case():
    names = ["a", "b", "c", "d", "e", "f"]
    edges = [("a", "f"), ("b", "e"), ("c", "d")]
    naive = [["a", "b", "c"], ["d", "e", "f"]]
    assert count_crossings(naive, edges) == 3
    layout = compute_layout(names, edges)
    assert layout.crossings == 0
    assert count_crossings(layout.layer_order, edges) == 0
    assert compute_layout(names, edges, max_sweeps=0).crossings == 3


def test_barycenter_sweeps_reduce_crossings_over_several_layers():
    # two chains whose nodes are listed interleaved: input order crosses them at every
    # layer; a long edge (through dummy points) adds more
    names = ["a1", "b1", "b2", "a2", "c2", "a3", "b3", "c3", "b4", "a4"]
    edges = [("a1", "a2"), ("a2", "a3"), ("a3", "a4"), ("b1", "b2"), ("b2", "b3"),
             ("b3", "b4"), ("a1", "c2"), ("c2", "c3"), ("c3", "a4"), ("b1", "b3")]
    naive = compute_layout(names, edges, max_sweeps=0)
    assert naive.crossings >= 3
    layout = compute_layout(names, edges)
    assert layout.crossings < naive.crossings
    assert layout.crossings == 0


def test_count_crossings():
    order = [["a", "b"], ["c", "d"]]
    assert count_crossings(order, [("a", "d"), ("b", "c")]) == 1
    assert count_crossings(order, [("a", "c"), ("b", "d")]) == 0
    assert count_crossings(order, [("a", "d"), ("a", "c")]) == 0  # shared endpoint
    assert count_crossings(order, [("d", "a"), ("c", "b")]) == 1  # direction is irrelevant


def test_deterministic():
    names = [f"n{i}" for i in range(60)]
    edges = [(names[i], names[(i * 7 + 3) % 60]) for i in range(60)]
    groups = {n: f"g{i % 4}" for i, n in enumerate(names) if i % 5 == 0}
    first = compute_layout(names, edges, column_group=groups, import_nodes=["n3"])
    second = compute_layout(list(names), list(edges), column_group=dict(groups),
                            import_nodes=["n3"])
    assert first == second


def test_deterministic_across_processes_with_different_hash_seeds():
    script = (
        "from comgra_like.app.graph_layout import compute_layout\n"
        "names = [f'node.{i}' for i in range(80)]\n"
        "edges = [(names[i], names[(i * 13 + 5) % 80]) for i in range(80)]\n"
        "edges += [(names[i], names[i + 1]) for i in range(79)]\n"
        "groups = {n: 'grp' + str(i % 3) for i, n in enumerate(names) if i % 4 == 0}\n"
        "l = compute_layout(names, edges, column_group=groups, import_nodes=['node.7'])\n"
        "print(sorted(l.positions.items()), l.layer_order, sorted(l.reversed_edges))\n"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=os.pathsep.join(sys.path))
        result = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                capture_output=True, text=True)
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_layout_is_immutable():
    layout = compute_layout(["a", "b"], [("a", "b")])
    with pytest.raises(TypeError):
        layout.positions["a"] = (9.0, 9.0)  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        layout.crossings = 3  # type: ignore[misc]
