"""The order in which a step computed its tensors, from its dependency graphs.

Forward: iterations ascending, each iteration's graph in topological order (a node after
everything it depends on). Backward: iterations descending, each graph in reverse. Every
entry names where a node's role stores its data (an alias names the original) and its
neighbours: the inputs in the forward order, the users in the backward order. The
non-finite detector and ``first_divergence`` both read a step in this order.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..query import Graph

Key = tuple[str, str, int]  # (node, role, iteration) where the data is stored


def data_key(graph_node, role: str) -> Key:
    """Where a graph node's role stores its data (an alias stores none of its own)."""
    alias = graph_node.alias_of.get(role)
    if alias is not None:
        return (alias[0], alias[1], int(alias[2]))
    return (graph_node.node, role, int(graph_node.iteration))


def topological(graph: Graph) -> list[str]:
    """Node names with every node after the nodes it depends on (Kahn; ties by the
    graph's own order, so the result is stable)."""
    names = [n.name for n in graph.nodes]
    position = {n: i for i, n in enumerate(names)}
    indegree = dict.fromkeys(names, 0)
    after: dict[str, list[str]] = {n: [] for n in names}
    for e in graph.edges:
        if e.source in position and e.target in position and e.source != e.target:
            after[e.source].append(e.target)
            indegree[e.target] += 1
    ready = sorted((n for n in names if indegree[n] == 0), key=position.__getitem__)
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for m in after[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
        ready.sort(key=position.__getitem__)
    order.extend(n for n in names if n not in set(order))  # a cycle: keep the rest as is
    return order


def forward_order(graphs: list[tuple[int, Graph | None]]
                   ) -> Iterator[tuple[Key, list[Key]]]:
    """(data key, keys of its inputs) in the order of the forward pass."""
    for _, graph in sorted(graphs, key=lambda g: g[0]):
        if graph is None:
            continue
        nodes = {n.name: n for n in graph.nodes}
        for name in topological(graph):
            n = nodes[name]
            for role in n.roles:
                inputs = [data_key(nodes[e.source], e.source_role) for e in graph.edges
                          if e.target == name and e.target_role == role and e.source in nodes]
                yield data_key(n, role), inputs


def backward_order(graphs: list[tuple[int, Graph | None]]
                    ) -> Iterator[tuple[Key, list[Key]]]:
    """(data key, keys of the tensors that use it) in the order of the backward pass."""
    for _, graph in sorted(graphs, key=lambda g: -g[0]):
        if graph is None:
            continue
        nodes = {n.name: n for n in graph.nodes}
        for name in reversed(topological(graph)):
            n = nodes[name]
            for role in n.roles:
                users = [data_key(nodes[e.target], e.target_role) for e in graph.edges
                         if e.source == name and e.source_role == role and e.target in nodes]
                yield data_key(n, role), users
