"""Step 4 of ``graph_layout.compute_layout``: the order of the entries (nodes and dummy
points) in each layer, by alternating barycenter sweeps that keep the ordering with the
fewest crossings seen (see ``graph_layout.py``'s docstring), and the crossing count.

Pure functions over integer entries: ``up[e]``/``down[e]`` are the entries joined to
``e`` in the layer before/after, ``groups[e]`` its column group (entries of a group stay
one block).
"""

from __future__ import annotations

__all__ = ["count_inversions", "initial_order", "mean_positions", "reduce_crossings"]


def initial_order(
    entry_layer: list[int],
    num_layers: int,
    chains: list[list[int]],
    groups: list[str | None],
) -> list[list[int]]:
    """Nodes in input order, a dummy right after the source of its edge, and the
    members of a column group moved up to the first member of their group."""
    n = len(groups)
    rank: list[float] = [float(v) for v in range(n)] + [0.0] * (len(entry_layer) - n)
    for chain in chains:
        for k, d in enumerate(chain[1:-1], start=1):
            rank[d] = chain[0] + k / (len(chain) + 1)
    order: list[list[int]] = [[] for _ in range(num_layers)]
    for e in sorted(range(len(entry_layer)), key=lambda e: (rank[e], e)):
        order[entry_layer[e]].append(e)
    for k, entries in enumerate(order):
        first: dict[str, int] = {}
        keys = []
        for i, e in enumerate(entries):
            g = groups[e] if e < n else None
            keys.append(i if g is None else first.setdefault(g, i))
        order[k] = [entries[i] for i in sorted(range(len(entries)), key=keys.__getitem__)]
    return order


def reduce_crossings(
    order: list[list[int]],
    up: list[list[int]],
    down: list[list[int]],
    groups: list[str | None],
    n: int,
    max_sweeps: int,
) -> tuple[list[list[int]], int]:
    entry_groups = groups + [None] * (len(up) - n)
    position = [0.0] * len(up)
    _set_positions(order, position)
    best = [list(layer) for layer in order]
    best_crossings = _crossings(order, down, len(up))
    stale = 0
    for _ in range(max_sweeps):
        if best_crossings == 0:
            break
        for k in range(1, len(order)):
            order[k] = _barycenter_sort(order[k], up, position, entry_groups)
            _set_positions([order[k]], position)
        for k in range(len(order) - 2, -1, -1):
            order[k] = _barycenter_sort(order[k], down, position, entry_groups)
            _set_positions([order[k]], position)
        crossings = _crossings(order, down, len(up))
        if crossings < best_crossings:
            best_crossings = crossings
            best = [list(layer) for layer in order]
            stale = 0
        else:
            stale += 1
            if stale >= 2:
                break
    return best, best_crossings


def _set_positions(layers: list[list[int]], position: list[float]) -> None:
    # Normalised to [0, 1] so that layers of different sizes can be compared.
    for entries in layers:
        scale = 1.0 / (len(entries) - 1) if len(entries) > 1 else 0.0
        for i, e in enumerate(entries):
            position[e] = i * scale if scale else 0.5


def _barycenter_sort(
    entries: list[int],
    neighbours: list[list[int]],
    position: list[float],
    groups: list[str | None],
) -> list[int]:
    bary = mean_positions(entries, neighbours, position)
    entry_groups = [groups[e] for e in entries]
    if all(g is None for g in entry_groups):
        # sorted() is stable: ties keep the current order
        return [entries[i] for i in sorted(range(len(entries)), key=bary.__getitem__)]
    group_sum: dict[str, float] = {}
    group_size: dict[str, int] = {}
    for g, b in zip(entry_groups, bary):
        if g is not None:
            group_sum[g] = group_sum.get(g, 0.0) + b
            group_size[g] = group_size.get(g, 0) + 1
    # A group sorts as one block at its mean barycenter (the "\x00" puts ungrouped
    # entries with the same value first), members inside by their own barycenter.
    keys = [
        (b, "", b) if g is None else (group_sum[g] / group_size[g], "\x00" + g, b)
        for g, b in zip(entry_groups, bary)
    ]
    return [entries[i] for i in sorted(range(len(entries)), key=keys.__getitem__)]


def mean_positions(
    entries: list[int], neighbours: list[list[int]], position: list[float]
) -> list[float]:
    """Mean position of each entry's neighbours; its own position if it has none."""
    result = []
    append = result.append
    for e in entries:
        adjacent = neighbours[e]
        if len(adjacent) == 1:
            append(position[adjacent[0]])
        elif adjacent:
            total = 0.0
            for a in adjacent:
                total += position[a]
            append(total / len(adjacent))
        else:
            append(position[e])
    return result


def _crossings(order: list[list[int]], down: list[list[int]], num_entries: int) -> int:
    index = [0] * num_entries
    for entries in order:
        for i, e in enumerate(entries):
            index[e] = i
    total = 0
    for k in range(len(order) - 1):
        segments = [(index[e], index[f]) for e in order[k] for f in down[e]]
        if segments:
            total += count_inversions(segments, len(order[k + 1]))
    return total


def count_inversions(segments: list[tuple[int, int]], size: int) -> int:
    """Pairs of segments (a, b), (c, d) with a < c and b > d (a Fenwick tree count)."""
    segments.sort()
    tree = [0] * (size + 1)
    inversions = 0
    for seen, (_, b) in enumerate(segments):
        # segments seen so far ending strictly below b (positions > b) cross this one
        i = b + 1
        not_greater = 0
        while i > 0:
            not_greater += tree[i]
            i -= i & -i
        inversions += seen - not_greater
        i = b + 1
        while i <= size:
            tree[i] += 1
            i += i & -i
    return inversions
