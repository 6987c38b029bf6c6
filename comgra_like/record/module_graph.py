"""The module graph of one forward of a watched module (``comgra_like.watch``), from
autograd: each module invocation a node, an edge where an autograd path leads from an
output of one invocation (or an input of the parent) to an input of a sibling (or an
output of the parent). One level at a time, as torchexplorer's explorer draws it.

The structure is plain JSON (docs/FORMAT.md, "watch()"), named by its content hash like
the dependency graphs, so that steps with the same structure share one file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

MAX_WALK = 200_000  # autograd nodes visited per invocation input at most


@dataclass(eq=False)
class Invocation:
    """One call of a watched module in one forward of the root."""

    id: str  # the node name: module name, "#k" for the k-th further call
    module: str
    parent: str | None  # the id of the invocation it was called from
    cls: str
    extra_repr: dict[str, str]
    inputs: list[tuple[str, torch.Tensor, object]] = field(default_factory=list)
    outputs: list[tuple[str, torch.Tensor, object]] = field(default_factory=list)


def tensor_key(t: torch.Tensor) -> object:
    """Where a tensor sits in the autograd graph (a leaf: the tensor itself)."""
    fn = t.grad_fn
    return (fn, t.output_nr) if fn is not None else ("leaf", id(t))


_KV = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+?)\s*$")


def parse_extra_repr(text: str) -> dict[str, str]:
    """A module's ``extra_repr`` as key/value rows (``Linear``: in_features=4, ...);
    positional parts get their index as the key."""
    rows: dict[str, str] = {}
    if not text:
        return rows
    depth, part, parts = 0, "", []
    for ch in text:  # split on commas outside brackets
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    for i, p in enumerate(parts):
        m = _KV.match(p)
        if m:
            rows[m.group(1)] = m.group(2)
        elif p.strip():
            rows[str(i)] = p.strip()
    return rows


def _shape(t: torch.Tensor, batch_size: int) -> list[int]:
    shape = list(t.shape)
    for i, s in enumerate(shape):
        if s == batch_size:  # the batch dimension: -1, so that batch sizes share a structure
            shape[i] = -1
            break
    return shape


def _sources(start: object, known: dict[object, tuple[str, str]]) -> list[tuple[str, str]]:
    """The known tensors an autograd path leads back to from ``start`` (a tensor key),
    stopping at the first known tensor on each path."""
    hit = known.get(start)
    if hit is not None:
        return [hit]
    fn = start[0] if isinstance(start, tuple) and start[0] != "leaf" else None
    if fn is None:
        return []
    found: dict[tuple[str, str], None] = {}
    seen = {id(fn)}
    stack = [fn]
    visited = 0
    while stack and visited < MAX_WALK:
        node = stack.pop()
        visited += 1
        for nxt, nr in getattr(node, "next_functions", ()):
            if nxt is None:
                continue
            hit = known.get((nxt, nr))
            if hit is not None:
                found[hit] = None
                continue
            var = getattr(nxt, "variable", None)  # AccumulateGrad: a leaf
            if var is not None:
                hit = known.get(("leaf", id(var)))
                if hit is not None:
                    found[hit] = None
                continue
            if id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return list(found)


def edges_of(invocations: list[Invocation]) -> list[list[str]]:
    """The edges of one forward's module graph, sorted (the walks through autograd)."""
    children: dict[str | None, list[Invocation]] = {}
    for inv in invocations:
        children.setdefault(inv.parent, []).append(inv)
    edges: list[list[str]] = []
    by_id = {inv.id: inv for inv in invocations}
    for parent_id, kids in children.items():
        parent = by_id.get(parent_id) if parent_id is not None else None
        known: dict[object, tuple[str, str]] = {}
        if parent is not None:
            for role, _t, key in parent.inputs:
                known.setdefault(key, (f"{parent.id}:input", role))
        for kid in kids:  # later calls override: an attached tensor stands for its source
            for role, _t, key in kid.outputs:
                known[key] = (kid.id, role)
        for kid in kids:
            own = {key for _r, _t, key in kid.outputs}
            for role, _t, key in kid.inputs:
                view = {k: v for k, v in known.items() if v[0] != kid.id} if key in own \
                    else known
                for src, src_role in _sources(key, view):
                    if src != kid.id:
                        edges.append([src, src_role, kid.id, role])
        if parent is not None:
            for role, _t, key in parent.outputs:
                for src, src_role in _sources(key, known):
                    edges.append([src, src_role, f"{parent.id}:output", role])
    return sorted(edges)


def structure_key(invocations: list[Invocation], edges: list[list[str]],
                  batch_size: int) -> tuple:
    """Plain tuples that determine ``structure(invocations, edges, batch_size)``: a
    forward with the same key has the same structure, and so the same hash (a module's
    class and ``extra_repr`` are fixed by its name)."""
    return (batch_size, tuple([
        (inv.id, inv.module, inv.parent,
         tuple([(r, tuple(t.shape)) for r, t, _k in inv.inputs]),
         tuple([(r, tuple(t.shape)) for r, t, _k in inv.outputs]))
        for inv in invocations]), tuple(map(tuple, edges)))


def shared_parameters(root: torch.nn.Module, names: dict[int, str]) -> list[dict]:
    """The parameters held by more than one module (tied weights: GPT-2's ``lm_head`` and
    ``wte``, T5's ``shared``, ``embed_tokens`` and ``lm_head``), each as ``{"recorded":
    [module, name], "holders": [[module, name], ...]}``: every holder in module order, the
    first of them the one the recorder tracks the tensor under (``track_module`` records a
    shared parameter once, under its first name). ``names``: module id -> qualified name."""
    holders: dict[int, list[list[str]]] = {}
    for sub in root.modules():  # the order of named_modules(), duplicates left out
        name = names.get(id(sub))
        if name is None:
            continue
        for p_name, p in sub.named_parameters(recurse=False):
            holders.setdefault(id(p), []).append([name, p_name])
    return [{"recorded": list(h[0]), "holders": h} for h in holders.values() if len(h) > 1]


def structure(invocations: list[Invocation], edges: list[list[str]], batch_size: int,
              shared: list[dict] | None = None) -> dict:
    """The module graph structure of one forward (JSON-ready); ``shared`` (from
    ``shared_parameters``) is stored as ``shared_parameters`` when there are any, so that
    a model without tied weights keeps the structure (and hash) it had before."""
    graph = {
        "invocations": [{
            "id": inv.id, "module": inv.module, "parent": inv.parent, "class": inv.cls,
            "extra_repr": inv.extra_repr,
            "inputs": [{"role": r, "shape": _shape(t, batch_size)} for r, t, _k in inv.inputs],
            "outputs": [{"role": r, "shape": _shape(t, batch_size)} for r, t, _k in inv.outputs],
        } for inv in invocations],
        "edges": edges,
    }
    if shared:
        graph["shared_parameters"] = shared
    return graph


def build(invocations: list[Invocation], batch_size: int) -> dict:
    """The module graph structure of one forward (JSON-ready)."""
    return structure(invocations, edges_of(invocations), batch_size)
