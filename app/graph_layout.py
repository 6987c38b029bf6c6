"""Layered left-to-right layout of a dependency graph (pure functions, no plotting).

``compute_layout`` places the nodes of a directed graph in columns ("layers") so that
data flows from left to right, orders each column to reduce edge crossings and assigns
coordinates. It is a small Sugiyama-style pipeline:

1. **Cycle breaking.** Edges into an import node are turned around first (an import node
   holds state from an earlier iteration and must stand in the leftmost column). Then an
   iterative depth-first search (roots: nodes without incoming edges, then the rest, both
   in input order; out-edges in input order) turns around every back edge. The result is
   deterministic, and those edges are reported in ``GraphLayout.reversed_edges`` (they
   are the only edges that run right to left in the drawing).
2. **Layering.** Longest path from the sources (every remaining edge goes strictly from a
   lower to a higher layer). Then, in reverse topological order, a node that is not an
   import node moves right to just before its nearest consumer when that does not make
   the drawing longer (at least as many outgoing as incoming edges): parameters, targets
   and side inputs end up next to where they are used instead of all in column 0.
3. **Column groups** (parameters grouped by module prefix). Members of one group that are
   free to move (no incoming edges, not an import node) are placed in one shared column:
   the leftmost of their preferred columns. Members whose preferred column lies more than
   ``GROUP_SPAN`` layers to the right of that start a new column of the same group, so a
   module used at both ends of the network does not produce edges across the whole
   drawing. Members without consumers join the group's first column. Inside a column,
   the members of a group are kept contiguous (one block, ordered by the block's mean
   barycenter), so a module's parameters read as one visual unit next to their
   consumers.
4. **Ordering** (``graph_ordering.py``). Edges that span several layers get one dummy
   point per crossed layer. Alternating down/up barycenter sweeps reorder each column;
   the ordering with the fewest crossings seen is kept (sweeps stop early at zero
   crossings or when two rounds bring no improvement). Ties are broken by the previous
   position.
5. **Coordinates.** ``x = layer * layer_spacing``. Vertical positions start from the
   column order and are pulled towards the mean position of the neighbours in several
   passes; each pass solves a least-squares placement with minimum gaps (isotonic
   regression), so the order is kept and no two nodes are closer than
   ``node_spacing`` (dummy points keep smaller gaps). The first node of a column has
   the largest ``y`` (plotly's y axis points up).

Edges whose endpoints are unknown, self-loops and duplicates are ignored. Everything is
deterministic for the same input (no iteration over hash-ordered sets of names).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from .graph_ordering import count_inversions, initial_order, mean_positions, reduce_crossings

__all__ = ["GROUP_SPAN", "GraphLayout", "compute_layout", "count_crossings"]

GROUP_SPAN = 2
"""Members of a column group whose preferred columns lie within this many layers of
the group's leftmost preferred column share that column."""

Point = tuple[float, float]
Edge = tuple[str, str]

_DUMMY_GAP = 0.5  # fraction of node_spacing between a node and a dummy point
_DUMMY_DUMMY_GAP = 0.3  # between two dummy points
_MAX_SWEEPS = 12
_COORDINATE_PASSES = 3
_ROUND = 2  # decimals of the returned coordinates (smaller figure and patch payloads)


@dataclass(frozen=True)
class GraphLayout:
    """Result of :func:`compute_layout`.

    Attributes:
        positions: node name → ``(x, y)``.
        layers: node name → layer (column) index, 0 is the leftmost.
        crossings: edge crossings of the drawing (counted between adjacent layers, long
            edges through their dummy points).
        layer_order: per layer, the node names from top to bottom.
        edge_paths: ``(source, target)`` → the points of the drawn polyline, from the
            source's position through the dummy points to the target's position.
        reversed_edges: edges turned around to break cycles (or pointing into an import
            node); they are drawn right to left.
    """

    positions: Mapping[str, Point]
    layers: Mapping[str, int]
    crossings: int
    layer_order: tuple[tuple[str, ...], ...]
    edge_paths: Mapping[Edge, tuple[Point, ...]]
    reversed_edges: frozenset[Edge]

    @property
    def num_layers(self) -> int:
        return len(self.layer_order)

    def __repr__(self) -> str:
        return (
            f"GraphLayout(nodes={len(self.positions)}, layers={self.num_layers}, "
            f"crossings={self.crossings}, reversed_edges={len(self.reversed_edges)})"
        )


def compute_layout(
    nodes: Sequence[str],
    edges: Iterable[Edge],
    *,
    column_group: Mapping[str, str | None] | None = None,
    import_nodes: Collection[str] = (),
    layer_spacing: float = 1.0,
    node_spacing: float = 1.0,
    max_sweeps: int = _MAX_SWEEPS,
) -> GraphLayout:
    """Lay out a directed graph in layers from left to right (see the module docstring).

    Args:
        nodes: node names; duplicates are ignored, the order is the tie-breaker.
        edges: ``(source, target)`` pairs, data flows source → target.
        column_group: optional node → group name (``None`` = no group); members of a
            group that have no inputs share a column and stay contiguous in it.
        import_nodes: nodes that hold state from an earlier iteration; always layer 0.
        layer_spacing: horizontal distance between layers.
        node_spacing: minimum vertical distance between two nodes of one layer.
        max_sweeps: maximum number of down+up barycenter rounds.
    """
    names = list(dict.fromkeys(nodes))
    index = {name: i for i, name in enumerate(names)}
    n = len(names)
    imports = [False] * n
    for name in import_nodes:
        i = index.get(name)
        if i is not None:
            imports[i] = True
    groups: list[str | None] = [None] * n
    if column_group:
        for name, group in column_group.items():
            i = index.get(name)
            if i is not None and group is not None:
                groups[i] = group

    pairs = _unique_pairs(edges, index)
    dag, reversed_flags = _break_cycles(n, pairs, imports)
    layers = _assign_layers(n, dag, imports, groups)

    # Proper layered graph: one dummy entry per crossed layer. Entries 0..n-1 are nodes.
    entry_layer = list(layers)
    is_dummy = [False] * n
    up: list[list[int]] = [[] for _ in range(n)]
    down: list[list[int]] = [[] for _ in range(n)]
    chains: list[list[int]] = []  # per pair, entries in drawing direction source → target
    for (u, v) in dag:
        chain = [u]
        prev = u
        for layer in range(layers[u] + 1, layers[v]):
            d = len(entry_layer)
            entry_layer.append(layer)
            is_dummy.append(True)
            up.append([prev])
            down.append([])
            down[prev].append(d)
            chain.append(d)
            prev = d
        chain.append(v)
        if layers[v] > layers[u]:
            down[prev].append(v)
            up[v].append(prev)
        chains.append(chain)

    num_layers = (max(layers) + 1) if n else 0
    order = initial_order(entry_layer, num_layers, chains, groups)
    order, crossings = reduce_crossings(order, up, down, groups, n, max_sweeps)
    down_pos = _assign_coordinates(order, up, down, is_dummy, node_spacing)

    positions = {
        names[i]: (round(layers[i] * layer_spacing, _ROUND), round(-down_pos[i], _ROUND))
        for i in range(n)
    }
    edge_paths: dict[Edge, tuple[Point, ...]] = {}
    reversed_edges = []
    for (i, j), flipped, chain in zip(pairs, reversed_flags, chains):
        points = [
            (round(entry_layer[e] * layer_spacing, _ROUND), round(-down_pos[e], _ROUND))
            for e in chain
        ]
        if flipped:
            points.reverse()
            reversed_edges.append((names[i], names[j]))
        edge_paths[(names[i], names[j])] = tuple(points)
    layer_order = tuple(
        tuple(names[e] for e in layer_entries if e < n) for layer_entries in order
    )
    return GraphLayout(
        positions=MappingProxyType(positions),
        layers=MappingProxyType({names[i]: layers[i] for i in range(n)}),
        crossings=crossings,
        layer_order=layer_order,
        edge_paths=MappingProxyType(edge_paths),
        reversed_edges=frozenset(reversed_edges),
    )


def count_crossings(layer_order: Sequence[Sequence[str]], edges: Iterable[Edge]) -> int:
    """Crossings of the edges that join adjacent layers of ``layer_order``.

    Edges between non-adjacent layers, or with an endpoint not in ``layer_order``, are
    not counted (give :func:`compute_layout`'s result its dummy points for that).
    """
    where: dict[str, tuple[int, int]] = {}
    for layer, names in enumerate(layer_order):
        for position, name in enumerate(names):
            where[name] = (layer, position)
    per_layer: list[list[tuple[int, int]]] = [[] for _ in layer_order]
    for s, t in edges:
        a, b = where.get(s), where.get(t)
        if a is None or b is None:
            continue
        if b[0] == a[0] + 1:
            per_layer[a[0]].append((a[1], b[1]))
        elif a[0] == b[0] + 1:
            per_layer[b[0]].append((b[1], a[1]))
    return sum(
        count_inversions(segments, len(layer_order[k + 1]))
        for k, segments in enumerate(per_layer)
        if segments
    )


# --- steps -----------------------------------------------------------------------------


def _unique_pairs(edges: Iterable[Edge], index: Mapping[str, int]) -> list[tuple[int, int]]:
    seen: set[tuple[int, int]] = set()
    pairs = []
    for s, t in edges:
        i, j = index.get(s), index.get(t)
        if i is None or j is None or i == j or (i, j) in seen:
            continue
        seen.add((i, j))
        pairs.append((i, j))
    return pairs


def _break_cycles(
    n: int, pairs: list[tuple[int, int]], imports: list[bool]
) -> tuple[list[tuple[int, int]], list[bool]]:
    """Return the pairs as a DAG (some turned around) and which were turned around."""
    flipped = [imports[j] and not imports[i] for (i, j) in pairs]
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    has_in = [False] * n
    for k, (i, j) in enumerate(pairs):
        u, v = (j, i) if flipped[k] else (i, j)
        if imports[u] and imports[v]:
            continue  # both stay in layer 0; drawn as a plain same-layer segment
        out[u].append((k, v))
        has_in[v] = True
    state = [0] * n  # 0 unseen, 1 on the DFS stack, 2 finished
    roots = [v for v in range(n) if not has_in[v]] + [v for v in range(n) if has_in[v]]
    for root in roots:
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, 0)]
        while stack:
            v, k = stack[-1]
            if k < len(out[v]):
                stack[-1] = (v, k + 1)
                edge, w = out[v][k]
                if state[w] == 1:
                    flipped[edge] = not flipped[edge]
                elif state[w] == 0:
                    state[w] = 1
                    stack.append((w, 0))
            else:
                state[v] = 2
                stack.pop()
    dag = [((j, i) if f else (i, j)) for (i, j), f in zip(pairs, flipped)]
    return dag, flipped


def _assign_layers(
    n: int, dag: list[tuple[int, int]], imports: list[bool], groups: list[str | None]
) -> list[int]:
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for (u, v) in dag:
        if imports[u] and imports[v]:
            continue
        preds[v].append(u)
        succs[u].append(v)
    # Kahn's algorithm, FIFO in input order: deterministic topological order.
    indegree = [len(p) for p in preds]
    queue = deque(v for v in range(n) if indegree[v] == 0)
    topo = []
    while queue:
        v = queue.popleft()
        topo.append(v)
        for w in succs[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                queue.append(w)
    layer = [0] * n
    for v in topo:
        for w in succs[v]:
            layer[w] = max(layer[w], layer[v] + 1)
    # Move nodes right towards their consumers when it does not lengthen the drawing.
    for v in reversed(topo):
        if imports[v] or not succs[v] or len(succs[v]) < len(preds[v]):
            continue
        layer[v] = max(layer[v], min(layer[w] for w in succs[v]) - 1)
    _align_column_groups(n, layer, preds, succs, imports, groups)
    shift = min(layer) if n else 0
    if shift:
        layer = [x - shift for x in layer]
    return layer


def _align_column_groups(
    n: int,
    layer: list[int],
    preds: list[list[int]],
    succs: list[list[int]],
    imports: list[bool],
    groups: list[str | None],
) -> None:
    members: dict[str, list[int]] = {}
    for v in range(n):
        if groups[v] is not None and not preds[v] and not imports[v]:
            members.setdefault(groups[v], []).append(v)
    for group_members in members.values():
        placed = sorted((layer[v], v) for v in group_members if succs[v])
        columns: list[int] = []
        for preferred, v in placed:
            if not columns or preferred - columns[-1] > GROUP_SPAN:
                columns.append(preferred)
            layer[v] = columns[-1]  # only ever moves left: edges stay left to right
        for v in group_members:
            if not succs[v]:
                layer[v] = columns[0] if columns else 0


def _assign_coordinates(
    order: list[list[int]],
    up: list[list[int]],
    down: list[list[int]],
    is_dummy: list[bool],
    node_spacing: float,
) -> list[float]:
    """Vertical position of every entry (growing downwards)."""
    pos = [0.0] * len(up)
    gaps_per_layer = []
    for entries in order:
        gaps = [
            node_spacing
            * (
                _DUMMY_DUMMY_GAP
                if is_dummy[a] and is_dummy[b]
                else _DUMMY_GAP
                if is_dummy[a] or is_dummy[b]
                else 1.0
            )
            for a, b in pairwise(entries)
        ]
        gaps_per_layer.append(gaps)
        y = -sum(gaps) / 2
        for i, e in enumerate(entries):
            pos[e] = y
            if i < len(gaps):
                y += gaps[i]
    both = [u + d for u, d in zip(up, down)]
    sweeps = []
    for _ in range(_COORDINATE_PASSES):
        sweeps.append((range(1, len(order)), up))
        sweeps.append((range(len(order) - 2, -1, -1), down))
    sweeps.append((range(len(order)), both))
    for layers, neighbours in sweeps:
        for k in layers:
            entries = order[k]
            desired = mean_positions(entries, neighbours, pos)
            for e, y in zip(entries, _place_with_gaps(desired, gaps_per_layer[k])):
                pos[e] = y
    return pos


def _place_with_gaps(desired: list[float], gaps: list[float]) -> list[float]:
    """Closest positions (least squares) to ``desired`` keeping the order and the gaps.

    With ``o_i`` the cumulative gap before item ``i``, ``y_i - o_i`` must be
    non-decreasing: an isotonic regression of ``desired_i - o_i`` (pool adjacent
    violators), shifted back by ``o_i``.
    """
    offsets = [0.0]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    sums: list[float] = []  # blocks of pooled items: sum of values, number of items
    counts: list[int] = []
    for d, o in zip(desired, offsets):
        value, count = d - o, 1
        while sums and sums[-1] * count >= value * counts[-1]:
            value += sums.pop()
            count += counts.pop()
        sums.append(value)
        counts.append(count)
    result = []
    for value, count in zip(sums, counts):
        result.extend([value / count] * count)
    return [r + o for r, o in zip(result, offsets)]
