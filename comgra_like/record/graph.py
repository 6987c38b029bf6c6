"""Dependency-graph extraction from PyTorch's autograd graph.

Only registered tensors become nodes; the anonymous autograd operations between them
become edges. The walk is iterative (deep models hit no recursion limit) and memoised:
for every autograd node it visits it remembers which registered tensors are the
nearest ones behind it, so shared sub-graphs are walked once per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..errors import GraphError
from ..format.graphs import canonical_hash
from ..vocabulary import PARAMETER

if TYPE_CHECKING:
    from .step import Registration, Step


class DependencyWalker:
    """Finds, for an autograd node, the registered tensors it directly depends on.

    It reads the recorder's lookups of the current batch (they grow while the batch
    runs): ``owner_fn[(grad_fn, output_nr)]`` and ``owner_leaf[id(leaf)]`` give the
    registration id owning an autograd node (the grad_fn of a registered tensor, or the
    AccumulateGrad node of a registered leaf); ``conn_fn[grad_fn]`` and
    ``conn_leaf[id(leaf)]`` give the sources connected into a node by hand
    (``add_tensor_connection``): registration ids, or ``(node, output_nr)`` of a tensor
    that is not registered, which the walk goes on through like an autograd input.
    ``describe_leaf(fn)`` explains an unregistered leaf that requires a gradient (an
    error), or returns None for nodes that are fine; ``describe_loop(nodes)`` explains a
    loop of unregistered nodes that hand-made connections closed.
    This runs on every recorded step on the training thread, so the lookups are plain
    dictionaries rather than callbacks, and a step without connections skips every check
    that only connections make necessary.
    """

    def __init__(self, owner_fn: dict, owner_leaf: dict, conn_fn: dict, conn_leaf: dict,
                 describe_leaf: Callable[[object], str | None],
                 describe_loop: Callable[[list], str] | None = None):
        self._owner_fn = owner_fn
        self._owner_leaf = owner_leaf
        self._conn_fn = conn_fn
        self._conn_leaf = conn_leaf
        self._describe_leaf = describe_leaf
        self._describe_loop = describe_loop or _describe_loop
        self._memo: dict[object, frozenset] = {}

    def dependencies_of_node(self, fn) -> frozenset:
        """Registered ids behind autograd node ``fn`` (not counting ``fn``'s own owner)."""
        if fn is None:
            return frozenset()
        memo = self._memo
        if fn not in memo:
            self._fill(fn)
        return memo[fn]

    def owner(self, node, output_nr: int) -> int | None:
        """The registration id owning ``(node, output_nr)``, if a registered tensor does."""
        own = self._owner_fn.get((node, output_nr))
        if own is None:
            variable = getattr(node, "variable", None)
            if variable is not None:
                own = self._owner_leaf.get(id(variable))
        return own

    def resolve(self, source) -> frozenset:
        """The registered ids a connection source stands for (see the class doc)."""
        if type(source) is int:
            return frozenset((source,))
        node, output_nr = source
        own = self.owner(node, output_nr)
        if own is not None:
            return frozenset((own,))
        return self.dependencies_of_node(node)

    def _connections_into(self, fn) -> list:
        found = list(self._conn_fn.get(fn, ()))
        variable = getattr(fn, "variable", None)
        if variable is not None:
            found.extend(self._conn_leaf.get(id(variable), ()))
        return found

    def _fill(self, start) -> None:
        memo = self._memo
        owner_fn, owner_leaf = self._owner_fn, self._owner_leaf
        connected = bool(self._conn_fn or self._conn_leaf)
        # Children and their owners, looked up once. A node in here and not yet in the
        # memo is being expanded: every node above it on the stack descends from it, so
        # meeting it again as a child closes a loop (only connections can do that).
        kids_of: dict[object, list] = {}
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
                edges = getattr(fn, "next_functions", ())
                if connected:
                    extra = self._connections_into(fn)
                    if extra:
                        edges = list(edges)
                        for source in extra:
                            if type(source) is int:
                                kids.append((None, source))
                            else:
                                edges.append(source)
                for child, nr in edges:
                    if child is None:
                        continue
                    own = owner_fn.get((child, nr))
                    if own is None:
                        variable = getattr(child, "variable", None)
                        if variable is not None:
                            own = owner_leaf.get(id(variable))
                        if own is None and child not in memo:
                            if connected and child in kids_of:
                                raise GraphError(self._describe_loop(
                                    _loop_of(stack, kids_of, memo, child)))
                            stack.append(child)
                            waiting = True
                    kids.append((child, own))
                if waiting:
                    continue
            stack.pop()
            deps = set()
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


def _loop_of(stack: list, expanding: dict, memo: dict, again) -> list:
    """The nodes of the loop that ``again`` closes, from ``again`` back to ``again``."""
    path, seen = [], set()
    for fn in stack:
        if fn in expanding and fn not in memo and fn not in seen:
            seen.add(fn)
            path.append(fn)
    return path[path.index(again):] + [again]


def _describe_node(fn) -> str:
    """An autograd node in a message: a leaf's shape, or the operation's name."""
    variable = getattr(fn, "variable", None)
    if variable is not None:
        return f"an unregistered leaf of shape {tuple(variable.shape)}"
    return type(fn).__name__


def _describe_loop(nodes: list) -> str:
    return (
        "hand-made connections close a loop through tensors that are not registered ("
        + " -> ".join(_describe_node(fn) for fn in nodes)
        + "); add_tensor_connection() must not connect a tensor to one computed from it"
    )


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


def _rel_iteration(reg: Registration, iteration: int):
    if reg.kind == PARAMETER or reg.iteration < 0:
        return "step"
    return reg.iteration - iteration


class GraphExtractor:
    """Turns a step's registrations and autograd graph into graph structures.

    Loops build the same structure step after step, so a structure is recognised by a key
    of small ints (signature ids, registration ids, dependencies) and its hash reused; a
    new structure is handed to ``on_new_structure`` once per trial.
    ``module_groups[i]``: the visual group of parameter ``i``; ``merged_parameter_nodes``:
    whether parameters share nodes (then a node shows all its roles).
    """

    def __init__(self, module_groups: list[str | None], merged_parameter_nodes: bool,
                 on_new_structure: Callable[[str, dict], None]):
        self.module_groups = module_groups
        self.merged_parameter_nodes = merged_parameter_nodes
        self.on_new_structure = on_new_structure
        self._graph_keys: dict[tuple, str] = {}
        self._seen_graphs: set[str] = set()
        self._iteration: int | None = None
        self._resolving: str | None = None  # the tensor whose dependencies are being found

    def walker(self, step: Step) -> DependencyWalker:
        """The dependency walker over ``step``'s lookups (they grow while it runs)."""

        def describe_leaf(fn):
            variable = getattr(fn, "variable", None)
            if variable is None:
                return None
            return (
                f"step {step.training_step}, iteration {self._iteration}: a tensor of shape "
                f"{tuple(variable.shape)} ({variable.dtype}) that requires a gradient is used "
                "by registered tensors but is not registered itself. If it is a parameter, "
                "call track_module() on its module; otherwise call register_tensor() on it "
                "right after creating it (or detach it)."
            )

        def describe_loop(nodes):
            return (
                f"step {step.training_step}, iteration {self._iteration}: while finding what "
                f"{self._resolving!r} depends on: {_describe_loop(nodes)}. Remove the "
                "connection that closes the loop."
            )

        return DependencyWalker(step.owner_fn, step.owner_leaf, step.conn_fn, step.conn_leaf,
                                describe_leaf, describe_loop)

    def _changed_in_place(self, step: Step, r: Registration, fn, deps: set) -> set:
        """``r``'s dependencies when its own grad_fn leads back to it: the tensor was
        changed in place after it was registered (its new grad_fn is computed from the
        old one), so it depends on what both depend on; anything else is a loop that a
        hand-made connection closed."""
        if fn is r.grad_fn:
            raise self._self_loop(step, r)
        before = step.walker.dependencies_of_node(r.grad_fn)
        if r.rid in before:
            raise self._self_loop(step, r)
        deps.discard(r.rid)
        deps |= before
        return deps

    def _self_loop(self, step: Step, r: Registration) -> GraphError:
        return GraphError(
            f"step {step.training_step}, iteration {self._iteration}: {r.tensor_name!r} "
            "depends on itself: an add_tensor_connection() leads from a tensor computed from "
            f"{r.tensor_name!r} back to it. Remove the connection that closes the loop."
        )

    def extract(self, step: Step, iteration: int) -> str:
        """The hash of ``iteration``'s dependency-graph structure; a structure not seen
        before goes to ``on_new_structure(digest, structure)`` first."""
        self._iteration = iteration
        regs = step.regs
        current = step.by_iteration.get(iteration, [])
        nodes: dict[str, dict] = {}
        edges: set[tuple[str, str, str, str]] = set()

        def node_id(r: Registration) -> str:
            if r.iteration == iteration or r.kind == PARAMETER:
                return r.node
            return f"{r.node}@{'initial' if r.iteration < 0 else r.iteration}"

        def add_node(r: Registration) -> str:
            nid = node_id(r)
            entry = nodes.get(nid)
            if entry is None:
                if r.kind == PARAMETER:
                    where = "step"
                elif r.iteration == iteration:
                    where = 0
                elif r.iteration < 0:
                    where = "step"
                else:
                    where = r.iteration - iteration
                entry = nodes[nid] = {
                    "id": nid, "node": r.node, "kind": r.kind, "iteration": where,
                    "is_import": nid != r.node, "roles": {}, "module_group": None,
                }
            shape = list(r.tensor.shape)
            if r.batch_dim is not None:
                shape[r.batch_dim] = -1
            role = {"tensor_name": r.tensor_name, "shape": shape}
            if r.alias_of is not None:
                src = regs[r.alias_of]
                role["alias_of"] = [src.node, src.role, _rel_iteration(src, iteration)]
            entry["roles"][r.role] = role
            if r.kind == PARAMETER:
                entry["module_group"] = self.module_groups[r.param_index]
            return nid

        walker = step.walker
        # Autograd graphs are acyclic: only hand-made connections can close a loop.
        manual = step.conn_reg or step.conn_fn or step.conn_leaf
        deps_of = []
        for r in current:
            if r.alias_of is not None:
                deps = {r.alias_of}
            else:
                fn = r.tensor.grad_fn
                if manual:
                    self._resolving = r.tensor_name
                deps = set(walker.dependencies_of_node(fn)) if fn is not None else set()
                if r.rid in deps:
                    deps = self._changed_in_place(step, r, fn, deps)
            if manual:
                hand = step.conn_reg.get(r.rid, ())
                if r.alias_of is None and r.tensor.grad_fn is None:
                    hand = (*hand, *step.conn_leaf.get(id(r.tensor), ()))
                if hand:
                    self._resolving = r.tensor_name
                    for source in hand:
                        found = walker.resolve(source)
                        if r.rid in found:
                            raise self._self_loop(step, r)
                        deps |= found
            deps_of.append(deps)
        if step.made_grad:
            step.depended_on.update(*deps_of)
        # Loops build the same structure step after step: a key of plain tuples finds its
        # hash without building, checking and hashing the JSON structure again.
        key = (iteration, tuple([r.sig_id for r in regs]), tuple([r.rid for r in current]),
               tuple(tuple(sorted(d)) for d in deps_of))
        digest = self._graph_keys.get(key)
        if digest is not None:
            return digest
        for r, deps in zip(current, deps_of):
            target = add_node(r)
            for d in deps:
                src = regs[d]
                source = add_node(src)
                edges.add((source, target, src.role, r.role))
        if self.merged_parameter_nodes:
            # Merged parameter nodes show all their roles, not only those used here.
            for r in step.by_iteration.get(-1, []):
                if r.kind == PARAMETER and r.node in nodes:
                    add_node(r)
        cycle = find_cycle(nodes, [(a, b) for a, b, _, _ in edges]) if manual else None
        if cycle:
            raise GraphError(
                f"step {step.training_step}, iteration {iteration}: the dependency graph has a "
                f"cycle {' -> '.join(cycle)}; it comes from add_tensor_connection() calls that "
                "point backwards. Remove the connection that closes the loop."
            )
        structure = {
            "nodes": sorted(nodes.values(), key=lambda n: n["id"]),
            "edges": sorted([list(e) for e in edges]),
        }
        digest = canonical_hash(structure)
        if len(self._graph_keys) >= 4096:
            self._graph_keys.clear()
        self._graph_keys[key] = digest
        if digest not in self._seen_graphs:
            self.on_new_structure(digest, structure)
            self._seen_graphs.add(digest)
        return digest
