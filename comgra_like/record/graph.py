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

        return DependencyWalker(step.owner_fn, step.owner_leaf, step.conn_fn, step.conn_leaf,
                                describe_leaf)

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
        deps_of = []
        for r in current:
            if r.alias_of is not None:
                deps = {r.alias_of}
            else:
                fn = r.tensor.grad_fn
                deps = set(walker.dependencies_of_node(fn)) if fn is not None else set()
                if fn is None:
                    deps |= step.conn_leaf.get(id(r.tensor), set())
            deps |= step.conn_reg.get(r.rid, set())
            deps.discard(r.rid)
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
        # Autograd graphs are acyclic: only hand-made connections can close a loop.
        manual = step.conn_reg or step.conn_fn or step.conn_leaf
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
