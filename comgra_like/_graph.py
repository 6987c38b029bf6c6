"""Dependency-graph extraction from PyTorch's autograd graph.

Only registered tensors become nodes; the anonymous autograd operations between them
become edges. The walk is iterative (deep models hit no recursion limit) and memoised:
for every autograd node it visits it remembers which registered tensors are the
nearest ones behind it, so shared sub-graphs are walked once per batch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Hashable, Iterable

from .errors import GraphError


class DependencyWalker:
    """Finds, for an autograd node, the registered tensors it directly depends on.

    ``owner_of(fn, output_nr)`` returns the registration id owning an autograd node (the grad_fn
    of a registered tensor, or the AccumulateGrad node of a registered leaf), or None.
    ``connections_into(fn)`` returns ids connected into that node by hand
    (``add_tensor_connection``), and ``pass_through(fn)`` says whether an unowned leaf
    is allowed (a detached copy that is connected by hand).
    """

    def __init__(
        self,
        owner_of: Callable[[object, int], Hashable | None],
        connections_into: Callable[[object], Iterable[Hashable]],
        describe_leaf: Callable[[object], str | None],
    ):
        self._owner_of = owner_of
        self._connections_into = connections_into
        self._describe_leaf = describe_leaf
        self._memo: dict[object, frozenset] = {}

    def dependencies_of_node(self, fn) -> frozenset:
        """Registered ids behind autograd node ``fn`` (not counting ``fn``'s own owner)."""
        if fn is None:
            return frozenset()
        self._fill(fn)
        return self._memo[fn]

    def _fill(self, start) -> None:
        memo = self._memo
        owner_of = self._owner_of
        kids_of: dict[object, list] = {}  # children and their owners, looked up once
        stack = [start]
        while stack:
            fn = stack[-1]
            if fn in memo:
                stack.pop()
                continue
            kids = kids_of.get(fn)
            if kids is None:
                kids = kids_of[fn] = [(c, owner_of(c, nr))
                                      for c, nr in getattr(fn, "next_functions", ())
                                      if c is not None]
                waiting = [c for c, own in kids if own is None and c not in memo]
                if waiting:
                    stack += waiting
                    continue
            stack.pop()
            deps = set(self._connections_into(fn))
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
