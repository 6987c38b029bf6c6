"""Dependency-graph extraction from PyTorch's autograd graph.

Only registered tensors become nodes; the anonymous autograd operations between them
become edges. The walk is iterative (deep models hit no recursion limit) and memoised:
for every autograd node it visits it remembers which registered tensors are the
nearest ones behind it, so shared sub-graphs are walked once per batch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable

from .errors import GraphError


class DependencyWalker:
    """Finds, for an autograd node, the registered tensors it directly depends on.

    It reads the recorder's lookups of the current batch (they grow while the batch
    runs): ``owner_fn[(grad_fn, output_nr)]`` and ``owner_leaf[id(leaf)]`` give the
    registration id owning an autograd node (the grad_fn of a registered tensor, or the
    AccumulateGrad node of a registered leaf); ``conn_fn[grad_fn]`` and
    ``conn_leaf[id(leaf)]`` give ids connected into a node by hand
    (``add_tensor_connection``). ``describe_leaf(fn)`` explains an unregistered leaf
    that requires a gradient (an error), or returns None for nodes that are fine.
    This runs on every recorded step on the training thread, so the lookups are plain
    dictionaries rather than callbacks.
    """

    def __init__(self, owner_fn: dict, owner_leaf: dict, conn_fn: dict, conn_leaf: dict,
                 describe_leaf: Callable[[object], str | None]):
        self._owner_fn = owner_fn
        self._owner_leaf = owner_leaf
        self._conn_fn = conn_fn
        self._conn_leaf = conn_leaf
        self._describe_leaf = describe_leaf
        self._memo: dict[object, frozenset] = {}

    def dependencies_of_node(self, fn) -> frozenset:
        """Registered ids behind autograd node ``fn`` (not counting ``fn``'s own owner)."""
        if fn is None:
            return frozenset()
        memo = self._memo
        if fn not in memo:
            self._fill(fn)
        return memo[fn]

    def _connections_into(self, fn) -> set:
        found = set(self._conn_fn.get(fn, ()))
        variable = getattr(fn, "variable", None)
        if variable is not None:
            found |= self._conn_leaf.get(id(variable), set())
        return found

    def _fill(self, start) -> None:
        memo = self._memo
        owner_fn, owner_leaf = self._owner_fn, self._owner_leaf
        kids_of: dict[object, list] = {}  # children and their owners, looked up once
        stack = [start]
        while stack:
            fn = stack[-1]
            if fn in memo:
                stack.pop()
                continue
            kids = kids_of.get(fn)
            if kids is None:
                kids = kids_of[fn] = []
                waiting = False
                for child, nr in getattr(fn, "next_functions", ()):
                    if child is None:
                        continue
                    own = owner_fn.get((child, nr))
                    if own is None:
                        variable = getattr(child, "variable", None)
                        if variable is not None:
                            own = owner_leaf.get(id(variable))
                        if own is None and child not in memo:
                            stack.append(child)
                            waiting = True
                    kids.append((child, own))
                if waiting:
                    continue
            stack.pop()
            deps = self._connections_into(fn) if (self._conn_fn or self._conn_leaf) else set()
            for child, own in kids:
                if own is not None:
                    deps.add(own)
                else:
                    deps |= memo[child]
            if not kids and not deps:
                problem = self._describe_leaf(fn)
                if problem is not None:
                    raise GraphError(problem)
            memo[fn] = frozenset(deps)


def find_cycle(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """A list of nodes forming a cycle, or None when the graph is acyclic."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    color = dict.fromkeys(succ, 0)  # 0 new, 1 on stack, 2 done
    for root in list(succ):
        if color[root]:
            continue
        path = [root]
        iters = [iter(succ[root])]
        color[root] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                iters.pop()
                continue
            if color[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            if color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                iters.append(iter(succ[nxt]))
    return None


def canonical_hash(structure: dict) -> str:
    """sha256 of the canonical JSON of a graph structure; equal across processes."""
    data = json.dumps(structure, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(data).hexdigest()
