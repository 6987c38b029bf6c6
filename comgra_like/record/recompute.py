"""Reentrant activation checkpointing under ``watch()``.

``torch.utils.checkpoint(fn, ..., use_reentrant=True)`` (and transformers'
``gradient_checkpointing_enable()`` with ``use_reentrant=True``) runs ``fn`` under
``no_grad`` in the forward: the modules inside produce tensors without autograd history,
so their outputs get no gradient and the module graph has no path through them. In the
backward the checkpoint's autograd node runs ``fn`` again with gradients enabled and
back-propagates through that recomputation.

:class:`Recompute` matches the calls of that recomputation with the forward's: the
watcher keeps its module hooks in place until the backward ends, and a call made while
the autograd engine runs a ``CheckpointFunctionBackward`` node is the replay of a call
of the forward (the same order within one checkpointed function; the function's first
call found by its input, which the checkpoint saved and passes again, detached, on the
same storage). The recomputed tensors keep their gradients (``retain_grad``), and when
the backward ends they stand in for the forward's tensors in the registrations (their
values stay the forward's copies), and their autograd graph gives the module graph the
edges inside the checkpointed function. Calls that are never replayed (a
``torch.no_grad()`` block inside a forward, or a checkpoint without a backward) keep
no gradient, and the watch report names them.
"""

from __future__ import annotations

import torch

from .module_graph import Invocation, edges_of, tensor_key
from .module_io import inputs_of, outputs_of

CHECKPOINT_NODE = "CheckpointFunctionBackward"


def in_recomputation() -> object | None:
    """The reentrant checkpoint's autograd node running now (None: not in one)."""
    node = torch._C._current_autograd_node()
    if node is None or type(node).__name__ != CHECKPOINT_NODE or not torch.is_grad_enabled():
        return None
    return node


def _storage(t: torch.Tensor) -> tuple:
    try:
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
    except RuntimeError:
        return ()


class Recompute:
    """The forward's calls made without gradients (``forward``, in call order) and
    their registrations (``regs``: (invocation id, role) -> Registration)."""

    def __init__(self, forward: list[Invocation], regs: dict):
        self.forward = forward
        self.regs = regs
        ids = {inv.id for inv in forward}
        self.tops = [i for i, inv in enumerate(forward) if inv.parent not in ids]
        self.matched: dict[int, Invocation] = {}  # forward index -> the replayed call
        self.cursor: dict[int, int] = {}  # id(checkpoint node) -> next forward index
        self.nodes: list[object] = []  # keeps the nodes alive while their ids are keys
        self.stack: list[Invocation | None] = []
        self.pairs: list[tuple[object, torch.Tensor]] = []  # (registration, replayed)
        self.boundaries: list[str] = []  # checkpointed forwards whose result was not seen
        self.results: dict[str, list] = {}  # invocation id -> the replay's outputs

    # ----- the replay (module hooks during the backward) ---------------------------------

    def enter(self, name: str, args: tuple, kwargs: dict) -> None:
        node = in_recomputation()
        if node is None:
            return
        i = self.cursor.get(id(node))
        if i is None:
            i = self._first_call(name, args, kwargs)
            self.nodes.append(node)
        if i is None or i >= len(self.forward) or self.forward[i].module != name \
                or i in self.matched:
            self.cursor[id(node)] = len(self.forward)  # lost track: the rest unmatched
            self.stack.append(None)
            return
        self.cursor[id(node)] = i + 1
        f = self.forward[i]
        r = Invocation(f.id, f.module, f.parent, f.cls, f.extra_repr)
        for role, t in inputs_of(args, kwargs):
            r.inputs.append((role, t, tensor_key(t)))
            self._keep(f.id, role, t)
        self.matched[i] = r
        self.stack.append(r)

    def leave(self, name: str, output) -> None:
        if in_recomputation() is None or not self.stack:
            return
        r = self.stack.pop()
        if r is None or r.module != name:
            return
        for role, t in outputs_of(output):
            r.outputs.append((role, t, tensor_key(t)))
            self._keep(r.id, role, t)

    def _first_call(self, name: str, args: tuple, kwargs: dict) -> int | None:
        """The forward call a checkpointed function's replay starts with: a first call
        of it (not nested in another call without gradients) of the same module, not
        replayed yet, whose first input lies on the same storage (the backward replays
        the last checkpoint first, so the last such call; by module alone if none)."""
        found = inputs_of(args, kwargs)
        where = _storage(found[0][1]) if found else ()
        fallback = None
        for i in reversed(self.tops):
            f = self.forward[i]
            if f.module != name or i in self.matched:
                continue
            if fallback is None:
                fallback = i
            if where and f.inputs and _storage(f.inputs[0][1]) == where:
                return i
        return fallback

    def _keep(self, inv_id: str, role: str, t: torch.Tensor) -> None:
        reg = self.regs.get((inv_id, role))
        # (a forward tensor with autograd history keeps its own, whole gradient: the
        # replay's detached copy of a checkpoint's input gets only the part through it)
        if reg is None or not t.requires_grad or reg.tensor.requires_grad:
            return
        if t.grad_fn is not None:
            t.retain_grad()
        self.pairs.append((reg, t))

    # ----- after the backward --------------------------------------------------------------

    def apply(self) -> set[str]:
        """The replayed tensors' gradients stand in for the forward's (registrations point
        at them; the recorded values stay the forward's copies). Returns the modules
        whose outputs received a gradient."""
        reached = set()
        for reg, t in self.pairs:
            if t.grad is not None:
                reg.tensor = t
                if reg.role.startswith("output"):
                    reached.add(reg.node.split("#")[0])
        return reached

    def edges(self, invocations: list[Invocation]) -> list[list[str]]:
        """The module graph's edges inside the checkpointed functions, from the replay's
        autograd graph: between replayed calls, from/to the inputs and outputs of a
        replayed call that encloses them, and from the inputs of the call whose
        ``forward`` was the checkpointed function (its inputs, detached, are the
        replay's leaves on the same storage). ``invocations``: the forward's calls."""
        replayed = [self.matched[i] for i in sorted(self.matched)]
        if not replayed:
            return []
        ids = {r.id for r in replayed}
        leaves: dict[tuple, object] = {}
        for r in replayed:
            for _role, t, key in r.inputs:
                if t.grad_fn is None and t.requires_grad:
                    leaves.setdefault(_storage(t), key)
        enclosing = []
        for inv in invocations:
            if inv.id in ids or not any(r.parent == inv.id for r in replayed):
                continue
            stand_in = Invocation(inv.id, inv.module, None, inv.cls, inv.extra_repr)
            for role, t, _key in inv.inputs:
                key = leaves.get(_storage(t))
                if key is not None:
                    stand_in.inputs.append((role, t, key))
            results = self.results.get(inv.id)
            if results is not None:
                stand_in.outputs.extend(results)
            elif any(type(t.grad_fn).__name__ == CHECKPOINT_NODE for _r, t, _k in inv.outputs):
                self.boundaries.append(inv.module)  # its forward's result was not seen
            enclosing.append(stand_in)
        return edges_of(enclosing + replayed)

    def watch_results(self, invocations: list[Invocation]) -> None:
        """For each call whose ``forward`` is the checkpointed function (its outputs are
        the checkpoint's, calls inside it ran without gradients): keep what the replay
        returns, for the edges into its output. The checkpoint's node holds the function
        it replays (``run_function``); it is wrapped to see the result, which it returns
        unchanged."""
        inside = {inv.parent for inv in self.forward}
        for inv in invocations:
            if inv.id not in inside:
                continue
            nodes = {id(t.grad_fn): t.grad_fn for _r, t, _k in inv.outputs
                     if type(t.grad_fn).__name__ == CHECKPOINT_NODE}
            if len(nodes) != 1:
                continue
            node = next(iter(nodes.values()))
            replay = getattr(node, "run_function", None)
            if not callable(replay):
                continue
            node.run_function = self._seeing(replay, inv.id)

    def _seeing(self, replay, inv_id: str):
        results = self.results

        def run_function(*args, **kwargs):
            out = replay(*args, **kwargs)
            try:
                results[inv_id] = [(role, t, tensor_key(t)) for role, t in outputs_of(out)]
            except Exception:  # noqa: BLE001, S110 - only the edges into its output lost
                pass
            return out
        return run_function

    def rekey(self, retain: bool) -> None:
        """The outputs a checkpoint returned: registered inside it without history, they
        have the checkpoint's node now, where the calls after it find them, and they
        receive their gradient in the backward like any output (kept if ``retain``)."""
        for inv in self.forward:
            for j, (role, t, key) in enumerate(inv.outputs):
                if isinstance(key, tuple) and key[0] == "leaf" and \
                        type(t.grad_fn).__name__ == CHECKPOINT_NODE:
                    inv.outputs[j] = (role, t, tensor_key(t))
                    if retain and (inv.id, role) in self.regs:
                        t.retain_grad()

    def not_replayed(self) -> list[str]:
        """Modules called without gradients in the forward and never replayed."""
        return sorted({inv.module for i, inv in enumerate(self.forward)
                       if i not in self.matched})
