"""Benchmark of the dependency-graph layout, figure and highlight patch.

Prints, for synthetic layered graphs of 100, 500 and 1000 nodes: the time to lay out
the graph and build the plotly figure, the time to compute a highlight patch and the
size of the patch's JSON payload (what Dash sends to the browser on a click), for a
node in the middle of the graph and for the loss (whose upstream is everything).
Times are the best of several runs (these machines are noisy); compare rows of one run.

    python benchmarks/benchmark_graph_layout.py
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from comgra_like.app.graph_figure import build_graph_figure, build_graph_model, highlight_patch
from comgra_like.app.graph_layout import compute_layout
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


def synthetic_graph(num_nodes: int, seed: int = 0) -> Graph:
    """Layers of ~12 nodes: each calculated node reads 1–3 nodes of the 3 layers before
    it and, one time in two, the weight and bias of its own module; a few inputs and
    imports on the left, a target and a loss on the right."""
    rng = random.Random(seed)
    nodes = [Node("input_0", "input"), Node("input_1", "input"), Node("state", "calculated",
                                                                      is_import=True)]
    edges: list[Edge] = []
    layers = [[n.name for n in nodes]]
    while len(nodes) < num_nodes - 2:
        layer = []
        for _ in range(rng.randint(6, 12)):
            if len(nodes) >= num_nodes - 2:
                break
            name = f"block{len(layers)}.tensor_{len(nodes)}"
            nodes.append(Node(name, "calculated", shapes={"main": (32, 64)}))
            layer.append(name)
            for _ in range(rng.randint(1, 3)):
                source_layer = layers[max(0, len(layers) - rng.randint(1, 3))]
                edges.append(Edge(rng.choice(source_layer), name))
            if rng.random() < 0.5 and len(nodes) < num_nodes - 4:
                group = f"block{len(layers)}.linear{len(nodes)}"
                for p in ("weight", "bias"):
                    nodes.append(Node(f"{group}.{p}", "parameter", module_group=group))
                    edges.append(Edge(f"{group}.{p}", name))
        layers.append(layer)
    nodes += [Node("target", "target"), Node("loss", "loss")]
    edges += [Edge(name, "loss") for name in layers[-1]] + [Edge("target", "loss")]
    return Graph(f"synthetic-{num_nodes}", nodes, edges)


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def payload_bytes(patch) -> int:
    # serialised the way Dash sends it (compact JSON)
    return len(to_json_plotly(patch.to_plotly_json()))


def main() -> None:
    print(f"{'nodes':>5} {'edges':>5} {'layers':>6} {'cross':>6} | {'layout ms':>9} "
          f"{'layout+fig ms':>13} "
          f"{'fig KB':>7} | {'patch ms':>8} {'patch B':>8} | {'loss ms':>7} {'loss B':>7}")
    for num_nodes in (100, 500, 1000):
        graph = synthetic_graph(num_nodes)

        def build(graph=graph):
            model = build_graph_model(graph)
            return model, build_graph_figure(model)

        build_time, (model, figure) = best_of(5, build)
        layout_time, _ = best_of(5, lambda g=graph: compute_layout(
            [n.name for n in g.nodes], [(e.source, e.target) for e in g.edges],
            column_group={n.name: n.module_group for n in g.nodes},
            import_nodes=[n.name for n in g.nodes if n.is_import]))
        figure_kb = len(figure.to_json()) / 1024
        middle_layer = model.layout.layer_order[model.layout.num_layers // 2]
        middle = middle_layer[len(middle_layer) // 2]
        patch_time, patch = best_of(20, lambda m=model, n=middle: highlight_patch(m, n, "main"))
        loss_time, loss_patch = best_of(20, lambda m=model: highlight_patch(m, "loss", "main"))
        print(f"{len(model.nodes):>5} {len(model.edges):>5} {model.layout.num_layers:>6} "
              f"{model.layout.crossings:>6} | {layout_time * 1000:>9.1f} "
              f"{build_time * 1000:>13.1f} {figure_kb:>7.0f} | "
              f"{patch_time * 1000:>8.2f} {payload_bytes(patch):>8} | "
              f"{loss_time * 1000:>7.2f} {payload_bytes(loss_patch):>7}")


if __name__ == "__main__":
    main()
