"""Dependency-graph figure, highlight patch and navigation (comgra_like.app.graph_figure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import plotly.graph_objects as go
import pytest
from comgra_like.app.graph_figure import (
    ARROW_TRACE,
    EDGE_TRACE,
    FIRST_NODE_TRACE,
    KIND_COLORS,
    MAX_ARROWS,
    MAX_LABELED_NODES,
    OTHER_ROLE_EDGE_TRACE,
    SELECTED_EDGE_TRACE,
    build_graph_figure,
    build_graph_model,
    client_highlight_data,
    compute_highlight,
    highlight_patch,
    highlight_updates,
    neighbor_in_direction,
    node_labels,
)
from dash import Patch
from plotly.io.json import to_json_plotly


@dataclass(frozen=True)
class Node:
    name: str
    kind: str
    roles: tuple[str, ...] = ("main",)
    tensor_names: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    iteration: int = 0
    is_import: bool = False
    module_group: str | None = None


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    source_role: str = "main"
    target_role: str = "main"


@dataclass(frozen=True)
class Graph:
    graph_hash: str
    nodes: list
    edges: list


def hand_made_graph() -> Graph:
    """
        x ──main──▶ h1 ──main──▶ h2 ──▶ out ──▶ loss ◀── target
        W ──pre───▶ h1 ──pre───▶ h1_norm         ▲
     prev ──main──▶ h1                            │
        z ─────────────────────────▶ side ────────┘
    """
    nodes = [
        Node("x", "input", shapes={"main": (32, 10)}),
        Node("prev", "calculated", is_import=True, iteration=0),
        Node("net.lin.weight", "parameter", module_group="net.lin", shapes={"main": (10, 10)}),
        Node("h1", "calculated", roles=("main", "pre"), tensor_names={"pre": "h1_pre"},
             shapes={"main": (32, 10), "pre": (32, 10)}, iteration=1),
        Node("h1_norm", "calculated", shapes={"main": ()}),
        Node("h2", "calculated"),
        Node("out", "calculated"),
        Node("target", "target"),
        Node("z", "input"),
        Node("side", "calculated"),
        Node("loss", "loss", shapes={"main": ()}),
    ]
    edges = [
        Edge("x", "h1"),
        Edge("net.lin.weight", "h1", target_role="pre"),
        Edge("prev", "h1"),
        Edge("h1", "h2"),
        Edge("h1", "h1_norm", source_role="pre"),
        Edge("h2", "out"),
        Edge("out", "loss"),
        Edge("target", "loss"),
        Edge("z", "side"),
        Edge("side", "loss"),
    ]
    return Graph("hash-1", nodes, edges)


def layered_graph(num_nodes: int) -> Graph:
    nodes, edges, previous = [Node("in", "input")], [], ["in"]
    while len(nodes) < num_nodes - 1:
        layer = []
        for k in range(10):
            name = f"block{len(nodes)}.t{k}"
            nodes.append(Node(name, "calculated"))
            edges += [Edge(previous[k % len(previous)], name),
                      Edge(previous[(3 * k + 1) % len(previous)], name)]
            layer.append(name)
        previous = layer
    nodes.append(Node("loss", "loss"))
    edges += [Edge(name, "loss") for name in previous]
    return Graph(f"layered-{num_nodes}", nodes, edges)


def segments(xs, ys):
    """The straight pieces of a line trace with None separators."""
    result, last = set(), None
    for x, y in zip(xs, ys):
        point = None if x is None else (float(x), float(y))
        if point is not None and last is not None:
            result.add((last, point))
        last = point
    return result


def path_segments(model, pairs):
    result = set()
    for pair in pairs:
        path = model.layout.edge_paths[pair]
        result |= {(tuple(map(float, a)), tuple(map(float, b))) for a, b in pairwise(path)}
    return result


def lit_nodes(model, updates):
    """Node names whose points are not dimmed after ``updates``."""
    lit = set()
    for trace, path, value in updates:
        if path == ("selectedpoints",) and trace >= FIRST_NODE_TRACE:
            names = model.node_traces[trace - FIRST_NODE_TRACE][1]
            lit |= set(names) if value is None else {names[i] for i in value}
    return lit


@pytest.fixture
def model():
    return build_graph_model(hand_made_graph())


# --- figure --------------------------------------------------------------------------


def test_figure_has_one_edge_trace_and_one_trace_per_kind(model):
    figure = build_graph_figure(model)
    go.Figure(figure.to_dict())  # the unvalidated build is a valid figure
    data = figure.data
    line_traces = [t for t in data if t.mode == "lines" and t.x and len(t.x) > 0]
    assert len(line_traces) == 1 and line_traces[0] is data[EDGE_TRACE]
    assert not data[OTHER_ROLE_EDGE_TRACE].x and not data[SELECTED_EDGE_TRACE].x
    node_traces = [t for t in data if t.customdata is not None]
    assert [t.name for t in node_traces] == ["input", "calculated", "parameter", "target",
                                             "loss"]
    for trace in node_traces:
        assert trace.marker.color == KIND_COLORS[trace.name]
        assert trace.showlegend is not False
    names = [name for t in node_traces for name in t.customdata]
    assert sorted(names) == sorted(n.name for n in hand_made_graph().nodes)
    for trace in node_traces:
        for name, x, y in zip(trace.customdata, trace.x, trace.y):
            assert (x, y) == model.layout.positions[name]
    assert figure.layout.uirevision == "hash-1"
    assert build_graph_figure(model, uirevision="keep").layout.uirevision == "keep"


def test_edge_trace_draws_every_edge(model):
    figure = build_graph_figure(model)
    drawn = segments(figure.data[EDGE_TRACE].x, figure.data[EDGE_TRACE].y)
    pairs = {(e.source, e.target) for e in hand_made_graph().edges}
    assert set(model.drawn_edges) == pairs
    assert path_segments(model, pairs) <= drawn
    # one arrowhead per drawn edge, on its last segment
    arrows = figure.data[ARROW_TRACE]
    assert len(arrows.x) == 2 * len(model.drawn_edges)
    assert list(arrows.marker.size[1::2]) == [arrows.marker.size[1]] * len(model.drawn_edges)
    assert set(arrows.marker.size[0::2]) == {0}


def test_import_nodes_are_hollow_and_hover_has_details(model):
    figure = build_graph_figure(model)
    calculated = next(t for t in figure.data if t.name == "calculated")
    symbols = dict(zip(calculated.customdata, calculated.marker.symbol))
    assert symbols["prev"].endswith("-open")
    assert not symbols["h1"].endswith("-open")
    assert calculated.marker.symbol[0] == "circle"  # the legend shows a filled symbol
    hover = dict(zip(calculated.customdata, calculated.hovertext))["h1"]
    for part in ("h1", "calculated", "main", "pre", "h1_pre", "32×10"):
        assert part in hover
    assert "iteration 0" in dict(zip(calculated.customdata, calculated.hovertext))["prev"]
    assert any(t.name.startswith("import") for t in figure.data)


def test_labels_are_shortened_and_text_shrinks_on_big_graphs():
    small = build_graph_figure(build_graph_model(hand_made_graph()))
    big_model = build_graph_model(layered_graph(300))
    big = build_graph_figure(big_model)
    small_size = next(t for t in small.data if t.name == "input").textfont.size
    big_trace = next(t for t in big.data if t.name == "calculated")
    assert big_trace.textfont.size < small_size
    # 30 layers in 1000 px: a few characters a line, on a few lines
    lines = [line for label in big_trace.text for line in label.split("<br>")]
    assert max(len(line) for line in lines) < max(len(n) for n in big_trace.customdata)
    assert max(label.count("<br>") for label in big_trace.text) < 3
    hover = dict(zip(big_trace.customdata, big_trace.hovertext))
    assert all(name in hover[name] for name in big_trace.customdata)


def test_labels_only_where_they_can_be_read():
    small = build_graph_figure(build_graph_model(hand_made_graph()))
    assert all(t.mode == "markers+text" and t.text for t in small.data if t.customdata)
    # more than MAX_LABELED_NODES nodes: no labels, however much room there is
    big = build_graph_model(layered_graph(500))
    for width in (960, 6000):
        for trace in (t for t in build_graph_figure(big, width_px=width).data if t.customdata):
            assert trace.mode == "markers" and trace.text is None
            assert trace.unselected.textfont.color is None
            # the hover text still names every node
            assert all(n in h for n, h in zip(trace.customdata, trace.hovertext))
    assert len(big.nodes) > MAX_LABELED_NODES
    # a long chain in a narrow plot: no room for a label between two columns
    chain = Graph("chain", [Node(f"n{i}", "calculated") for i in range(120)],
                  [Edge(f"n{i}", f"n{i + 1}") for i in range(119)])
    narrow = build_graph_figure(build_graph_model(chain), width_px=400)
    assert narrow.data[FIRST_NODE_TRACE].mode == "markers"
    assert build_graph_figure(build_graph_model(chain), width_px=6000).data[
        FIRST_NODE_TRACE].mode == "markers+text"


def test_big_graphs_have_arrowheads_only_on_edges_running_right_to_left():
    graph = layered_graph(200)
    # a cycle: its back edge is drawn right to left
    graph = Graph("cycle", graph.nodes, [*graph.edges, Edge("loss", "block1.t0")])
    model = build_graph_model(graph)
    assert len(model.drawn_edges) > MAX_ARROWS
    reversed_edges = [k for k, pair in enumerate(model.drawn_edges)
                      if pair in model.layout.reversed_edges]
    assert model.arrow_edges == tuple(reversed_edges) and reversed_edges
    figure = build_graph_figure(model)
    arrows = figure.data[ARROW_TRACE]
    assert len(arrows.x) == 2 * len(reversed_edges)
    # the lit arrowheads are those of the highlighted edges that have one
    updates = {(t, p): v for t, p, v in highlight_updates(model, "loss", None)}
    highlight = compute_highlight(model, "loss")
    lit = updates[(ARROW_TRACE, ("selectedpoints",))]
    points = range(1, len(arrows.x), 2) if lit is None else lit  # None: all of them
    shown = {model.drawn_edges[model.arrow_edges[(i - 1) // 2]] for i in points}
    with_arrows = {model.drawn_edges[k] for k in model.arrow_edges}
    assert shown and shown == with_arrows & (highlight.thick_edges | highlight.thin_edges)
    # small graphs: every edge
    small = build_graph_model(hand_made_graph())
    assert small.arrow_edges == tuple(range(len(small.drawn_edges)))


def test_client_highlight_data_describes_the_figure(model):
    figure = build_graph_figure(model)
    data = figure.layout.meta["highlight"]
    assert data == json.loads(json.dumps(client_highlight_data(model)))
    traces = data["traces"]
    assert (traces["edges"], traces["other_role_edges"], traces["selected_edges"],
            traces["arrows"], traces["first_node"]) == (EDGE_TRACE, OTHER_ROLE_EDGE_TRACE,
                                                         SELECTED_EDGE_TRACE, ARROW_TRACE,
                                                         FIRST_NODE_TRACE)
    assert traces["selection"] == model.selection_trace
    assert figure.data[traces["selection"]].name == "selected"
    # nodes are numbered in point order of the node traces
    names = [n for t in figure.data[FIRST_NODE_TRACE:model.selection_trace]
             for n in t.customdata]
    edges = {(names[data["edges"][i]], names[data["edges"][i + 1]],
              data["roles"][data["edges"][i + 2]], data["roles"][data["edges"][i + 3]])
             for i in range(0, len(data["edges"]), 4)}
    assert edges == set(model.edges)
    drawn = [(names[data["drawn"][i]], names[data["drawn"][i + 1]])
             for i in range(0, len(data["drawn"]), 2)]
    assert drawn == list(model.drawn_edges)
    for pair, path in zip(drawn, data["paths"]):
        assert list(zip(path[0::2], path[1::2])) == [tuple(p) for p in
                                                     model.layout.edge_paths[pair]]
    h1 = names.index("h1")
    assert [data["roles"][r] for r in data["node_roles"][h1]] == ["main", "pre"]
    assert data["arrows"] == list(model.arrow_edges)


# Node names of comgra's tutorial (scripts/tutorial.py, a graph of example_runs/tutorial)
TUTORIAL_NODES = [
    "input", "memory", "memory@initial", "output",
    "root_module.subnet_mem.layer_in.bias", "root_module.subnet_mem.layer_in.weight",
    "root_module.subnet_mem.layer_out.bias", "root_module.subnet_mem.layer_out.weight",
    "root_module.subnet_mem__hidden_state", "root_module.subnet_mem__out",
    "root_module.subnet_mem__out@3",
    "root_module.subnet_out.layer_in.bias", "root_module.subnet_out.layer_in.weight",
    "root_module.subnet_out.layer_out.bias", "root_module.subnet_out.layer_out.weight",
    "root_module.subnet_out__hidden_state", "root_module.subnet_out__out",
    "root_module.subnet_pre", "root_module.subnet_pre__hidden_state",
    "root_module.subnet_pre__out",
]
EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"


def joined(labels: dict) -> dict:
    return {name: " ".join(lines) for name, lines in labels.items()}


def test_node_labels_tell_the_tutorial_nodes_apart():
    labels = node_labels(TUTORIAL_NODES, max_chars=16, max_lines=2)
    assert len(set(map(tuple, labels.values()))) == len(TUTORIAL_NODES)
    assert all(len(line) <= 16 for lines in labels.values() for line in lines)
    # the three hidden states (all "subnet…n_state" before): the module stays, the
    # shared "root_module." goes, the rest wraps instead of losing its middle
    assert labels["root_module.subnet_mem__hidden_state"] == ["subnet_mem__", "hidden_state"]
    assert labels["root_module.subnet_out__hidden_state"] == ["subnet_out__", "hidden_state"]
    assert labels["root_module.subnet_pre__hidden_state"] == ["subnet_pre__", "hidden_state"]
    # the eight weights and biases (all "…weight"/"…bias" before)
    assert labels["root_module.subnet_mem.layer_in.weight"] == ["subnet_mem.", "layer_in.weight"]
    assert labels["root_module.subnet_out.layer_out.bias"] == ["subnet_out.", "layer_out.bias"]
    assert labels["root_module.subnet_pre"] == ["subnet_pre"]
    # an import keeps its iteration after its node's label
    assert labels["root_module.subnet_mem__out@3"] == ["subnet_mem__", "out@3"]
    assert labels["memory@initial"] == ["memory@initial"]
    assert labels["input"] == ["input"]
    # with room, one line each
    wide = joined(node_labels(TUTORIAL_NODES, max_chars=40, max_lines=1))
    assert wide["root_module.subnet_out.layer_in.bias"] == "subnet_out.layer_in.bias"


def test_node_labels_are_distinct_in_every_graph_of_the_example_run():
    from comgra_like.query import open_group

    group = open_group(EXAMPLE_RUN)
    checked = set()
    for trial in group.list_trials():
        steps = group.list_steps(trial.trial_id)
        for step, iteration, graph_hash in steps[["training_step", "iteration", "graph_hash"]
                                                 ].drop_duplicates("graph_hash").itertuples(
                                                     index=False):
            graph = group.read_graph(trial.trial_id, int(step), int(iteration))
            names = [node.name for node in graph.nodes]
            labels = node_labels(names, max_chars=20, max_lines=2)
            assert len(set(map(tuple, labels.values()))) == len(names), graph_hash
            checked.add(graph_hash)
    assert len(checked) >= 2


def test_node_labels_hard_cases():
    # identical endings at every depth: the shared module path goes, as far as the rest
    # stays unique
    names = ["m.a.x.w", "m.b.x.w", "m.c.y.w", "m.c.z.w", "m.w", "m.x.w"]
    assert joined(node_labels(names, 40, 1)) == {
        "m.a.x.w": "a.x.w", "m.b.x.w": "b.x.w", "m.c.y.w": "y.w", "m.c.z.w": "z.w",
        "m.w": "m.w",  # "w" would read as the "w" all of them end with
        "m.x.w": "m.x.w"}
    # a prefix no other name shares stays: nothing to tell apart
    assert joined(node_labels(["a.x.w", "b.x.w", "c.y.w"], 40, 1)) == {
        "a.x.w": "a.x.w", "b.x.w": "b.x.w", "c.y.w": "c.y.w"}
    # one node only: its whole name, wrapped
    assert node_labels(["encoder.layers.3.attention.weight"], 20, 2) == {
        "encoder.layers.3.attention.weight": ["encoder.layers.3.", "attention.weight"]}
    # a "/" or "." inside a name that is no module path
    markup = ["<b>bold input</b>", "net.weight", "net.bias", "loss/grad ratio"]
    assert joined(node_labels(markup, 40, 1)) == {
        "<b>bold input</b>": "<b>bold input</b>", "net.weight": "weight",
        "net.bias": "bias", "loss/grad ratio": "loss/grad ratio"}
    # a long single token is broken after "_" (or "-"), not in the middle with "…"
    long = "hidden_state_of_the_recurrent_cell_17"
    lines = node_labels([long], 14, 4)[long]
    assert "".join(lines) == long and all(len(line) <= 14 for line in lines)
    assert lines == ["hidden_state_", "of_the_", "recurrent_", "cell_17"]
    # a token without any break: cut where it must, nothing lost
    lines = node_labels(["x" * 30], 12, 3)["x" * 30]
    assert lines == ["x" * 12, "x" * 12, "x" * 6]
    # more lines than allowed: the distinguishing first line and the tensor's own name
    name = "model.encoder_stack.block_7.attention.query.weight"
    assert node_labels([name, "model.decoder_stack.block_7.attention.query.weight"], 12, 2)[
        name] == ["encoder_…", "query.weight"]
    # one line: the middle is cut out
    (line,) = node_labels([name], 9, 1)[name]
    assert line == "weight" or (len(line) == 9 and "…" in line)
    assert node_labels(["a.b.c.d.e_f_g_h_i_j_k_l", "z.b.c.d.e_f_g_h_i_j_k_l"], 8, 1) == {
        "a.b.c.d.e_f_g_h_i_j_k_l": ["a.b…_k_l"], "z.b.c.d.e_f_g_h_i_j_k_l": ["z.b…_k_l"]}
    # separators at the ends, "___", a name that is only an "@": no empty or odd label
    odd = ["a.", ".b", ".c", "x___y", "x___z", "@3", "k@initial"]
    assert joined(node_labels(odd, 40, 1)) == {
        "a.": "a.", ".b": "b", ".c": "c", "x___y": "y", "x___z": "z", "@3": "@3",
        "k@initial": "k@initial"}
    assert node_labels([], 10, 2) == {}


def test_graph_labels_wrap_in_the_figure_and_full_names_stay_on_hover():
    from comgra_like.query import open_group

    group = open_group(EXAMPLE_RUN)
    graph = group.read_graph("trial_bugged_original_version", 4, 0)
    # the size the Tensors page draws it at (app/pages/tensors.py)
    figure = build_graph_figure(build_graph_model(graph), width_px=960, height_px=420)
    traces = [t for t in figure.data[FIRST_NODE_TRACE:] if t.customdata]
    text = {n: label for t in traces for n, label in zip(t.customdata, t.text)}
    assert len(set(text.values())) == len(graph.nodes) == len(text)
    assert all("…" not in label for label in text.values())  # nothing cut out
    assert text["root_module.subnet_mem__hidden_state"] == "subnet_mem__<br>hidden_state"
    assert text["root_module.subnet_out.layer_in.weight"] == "subnet_out.<br>layer_in.weight"
    hover = {n: h for t in traces for n, h in zip(t.customdata, t.hovertext)}
    assert all(f"<b>{node.name}</b>" in hover[node.name] for node in graph.nodes)


def test_empty_graph_builds():
    model = build_graph_model(Graph("empty", [], []))
    figure = build_graph_figure(model)
    assert len(figure.data) == FIRST_NODE_TRACE + 1
    assert neighbor_in_direction(model, "x", "left") is None
    assert highlight_patch(model, None) is not None


# --- highlight -----------------------------------------------------------------------


def test_highlight_is_the_transitive_upstream_and_downstream(model):
    highlight = compute_highlight(model, "h2")
    assert highlight.upstream == {"h1", "x", "net.lin.weight", "prev"}
    assert highlight.downstream == {"out", "loss"}
    assert highlight.nodes == {"h2", "h1", "x", "net.lin.weight", "prev", "out", "loss"}
    assert highlight.thick_edges == {("x", "h1"), ("net.lin.weight", "h1"), ("prev", "h1"),
                                     ("h1", "h2"), ("h2", "out"), ("out", "loss")}
    assert highlight.thin_edges == frozenset()
    # the loss depends on everything except h1_norm
    assert compute_highlight(model, "loss").upstream == set(model.nodes) - {"loss", "h1_norm"}


def test_edges_of_another_role_are_thin(model):
    highlight = compute_highlight(model, "h1", "pre")
    assert highlight.upstream == {"x", "net.lin.weight", "prev"}
    assert highlight.downstream == {"h2", "out", "loss", "h1_norm"}
    assert highlight.thick_edges == {("net.lin.weight", "h1"), ("h1", "h1_norm")}
    assert highlight.thin_edges == {("x", "h1"), ("prev", "h1"), ("h1", "h2"), ("h2", "out"),
                                    ("out", "loss")}
    main = compute_highlight(model, "h1", "main")
    assert main.thick_edges == {("x", "h1"), ("prev", "h1"), ("h1", "h2"), ("h2", "out"),
                                ("out", "loss")}
    assert main.thin_edges == {("net.lin.weight", "h1"), ("h1", "h1_norm")}
    # no role, or a role no edge carries: everything thick
    assert compute_highlight(model, "h1", "nonexistent").thin_edges == frozenset()
    assert len(compute_highlight(model, "h1").thick_edges) == 7


def test_highlight_updates_dim_exactly_the_unrelated_nodes(model):
    updates = highlight_updates(model, "h2", "main")
    assert lit_nodes(model, updates) == {"h2", "h1", "x", "net.lin.weight", "prev", "out",
                                         "loss"}
    values = {(trace, path): value for trace, path, value in updates}
    thick = segments(values[(SELECTED_EDGE_TRACE, ("x",))], values[(SELECTED_EDGE_TRACE, ("y",))])
    assert thick == path_segments(model, compute_highlight(model, "h2").thick_edges)
    assert values[(OTHER_ROLE_EDGE_TRACE, ("x",))] == []
    lit_arrows = {model.drawn_edges[(i - 1) // 2] for i in values[(ARROW_TRACE,
                                                                   ("selectedpoints",))]}
    assert lit_arrows == compute_highlight(model, "h2").thick_edges
    assert values[(model.selection_trace, ("x",))] == [model.layout.positions["h2"][0]]
    assert values[(EDGE_TRACE, ("line", "color"))] != build_graph_figure(model).data[
        EDGE_TRACE].line.color

    role_updates = {(t, p): v for t, p, v in highlight_updates(model, "h1", "pre")}
    thin = segments(role_updates[(OTHER_ROLE_EDGE_TRACE, ("x",))],
                    role_updates[(OTHER_ROLE_EDGE_TRACE, ("y",))])
    assert thin == path_segments(model, compute_highlight(model, "h1", "pre").thin_edges)


def test_highlight_patch_only_touches_cheap_properties(model):
    patch = highlight_patch(model, "h2", "main")
    assert isinstance(patch, Patch)
    operations = patch.to_plotly_json()["operations"]
    allowed = {("selectedpoints",), ("line", "color"), ("x",), ("y",)}
    for operation in operations:
        assert operation["operation"] == "Assign"
        assert operation["location"][0] == "data"
        assert tuple(operation["location"][2:]) in allowed
    by_location = {tuple(op["location"]): op["params"]["value"] for op in operations}
    names = model.node_traces[0][1]  # input trace
    assert {names[i] for i in by_location[("data", FIRST_NODE_TRACE, "selectedpoints")]} == {"x"}


def test_figure_with_selection_equals_figure_plus_patch(model):
    selected = build_graph_figure(model, selected_node="h1", selected_role="pre")
    plain = build_graph_figure(model)
    for trace, path, value in highlight_updates(model, "h1", "pre"):
        target = plain.data[trace]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    selected_dict, plain_dict = selected.to_dict(), plain.to_dict()
    for trace in plain_dict["data"]:
        if trace.get("selectedpoints", ()) is None:  # None and absent: no selection
            del trace["selectedpoints"]
    assert selected_dict == plain_dict
    assert selected.data[FIRST_NODE_TRACE].selectedpoints is not None


def test_clearing_and_stale_selection(model):
    cleared = {(t, p): v for t, p, v in highlight_updates(model, None)}
    figure = build_graph_figure(model)
    for trace in range(FIRST_NODE_TRACE, model.selection_trace):
        assert cleared[(trace, ("selectedpoints",))] is None
    assert cleared[(SELECTED_EDGE_TRACE, ("x",))] == []
    assert cleared[(EDGE_TRACE, ("line", "color"))] == figure.data[EDGE_TRACE].line.color
    # a node that is not in this graph (the graph changed under a selection) clears too
    assert highlight_updates(model, "gone", "main") == highlight_updates(model, None)
    with pytest.raises(KeyError):
        compute_highlight(model, "gone")


def test_patch_payload_stays_small_at_500_nodes():
    model = build_graph_model(layered_graph(500))
    figure_bytes = len(build_graph_figure(model).to_json())
    middle = model.layout.layer_order[model.layout.num_layers // 2][0]
    for node in (middle, "loss"):
        payload = len(to_json_plotly(highlight_patch(model, node, "main").to_plotly_json()))
        assert payload < 40_000, (node, payload)
        assert payload < figure_bytes / 4
        json.loads(to_json_plotly(highlight_patch(model, node, "main").to_plotly_json()))


# --- navigation ----------------------------------------------------------------------


def test_neighbor_left_and_right_follow_edges(model):
    assert neighbor_in_direction(model, "h2", "left") == "h1"
    assert neighbor_in_direction(model, "h2", "right") == "out"
    assert neighbor_in_direction(model, "x", "left") is None
    assert neighbor_in_direction(model, "loss", "right") is None
    left_of_h1 = neighbor_in_direction(model, "h1", "left")
    dependencies = ["x", "net.lin.weight", "prev"]
    assert left_of_h1 in dependencies
    y = model.layout.positions["h1"][1]
    distance = {d: abs(model.layout.positions[d][1] - y) for d in dependencies}
    assert distance[left_of_h1] == min(distance.values())
    assert neighbor_in_direction(model, "h1", "right") in ("h2", "h1_norm")


def test_neighbor_up_and_down_stay_in_the_layer(model):
    for column in model.layout.layer_order:
        for i, name in enumerate(column):
            above = column[i - 1] if i > 0 else None
            below = column[i + 1] if i + 1 < len(column) else None
            assert neighbor_in_direction(model, name, "up") == above
            assert neighbor_in_direction(model, name, "down") == below
    tall = max(model.layout.layer_order, key=len)
    assert len(tall) >= 2
    assert neighbor_in_direction(model, tall[0], "down") == tall[1]


def test_neighbor_bad_input(model):
    assert neighbor_in_direction(model, "not-a-node", "left") is None
    with pytest.raises(ValueError):
        neighbor_in_direction(model, "h1", "diagonal")
