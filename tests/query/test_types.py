"""The values of the query API print what they are, not all they hold."""

from __future__ import annotations

from comgra_like.query import open_group


def test_reprs_are_short_and_say_what_it_is(tiny_group):
    g = open_group(tiny_group)
    record = g.read_tensor("trial_a", 1, 0, "input", "input", "forward", "sample", 2)
    text = repr(record)
    assert "step 1 iteration 0" in text and "input.input forward sample[2]" in text
    assert "values (4,)" in text and len(text) < 200
    graph = g.read_graph("trial_a", 1, 0)
    assert repr(graph) == (f"Graph({graph.graph_hash[:12]}…, iteration=0, "
                           f"{len(graph.nodes)} nodes, {len(graph.edges)} edges)")
    assert repr(g).startswith("Group(") and "2 trials" in repr(g)
    assert "trial_id='trial_a'" in repr(g.list_trials()[0])
