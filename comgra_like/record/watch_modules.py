"""The per-module part of ``watch()``'s driver (``record/hooks.py``): the forward hooks on
the watched modules (the submodules' only while a recorded forward runs), each call's
inputs and outputs booked as tensors of the recorder's step (copied, their gradients
retained), and ``attach()``'s extra nodes. A mixin of ``Watcher``: the state it reads is
set up in ``Watcher.__init__`` and reset per iteration by the step lifecycle."""

from __future__ import annotations

import torch

from ..errors import ComgraError
from ..vocabulary import CALCULATED, INPUT
from .module_graph import Invocation, parse_extra_repr, tensor_key
from .module_io import all_tensors, inputs_of, outputs_of, tensor_version


class ModuleHooks:
    """The watched modules' forward hooks and what they register (see the module
    docstring)."""

    # ----- hooks ------------------------------------------------------------------------

    def _hook(self) -> None:
        m = self.module
        name = self.names[id(m)]
        self.handles.append(m.register_forward_pre_hook(self._root_pre, with_kwargs=True))
        self.handles.append(m.register_forward_pre_hook(self._pre_of(name, m),
                                                        with_kwargs=True))
        self.handles.append(m.register_forward_hook(self._post_of(name), with_kwargs=True))
        self.handles.append(m.register_forward_hook(self._root_post, with_kwargs=True))
        # The submodules' hooks exist only while a recorded forward runs (_set_active):
        # a module without hooks takes torch's fast path, so that on steps that are not
        # recorded watching costs the root's two hooks and nothing per submodule.
        self._subs = [] if self.compiled is not None else [
            (self.names[id(sub)], sub) for sub in m.modules() if sub is not m]
        self._sub_handles: list = []
        self.hooks_installed = 0  # times the submodules' hooks were put in (a counter)

    def _set_active(self, on: bool) -> None:
        self.active = on
        if on and not self._sub_handles and not self.closed:
            handles = self._sub_handles
            for name, sub in self._subs:
                handles.append(sub.register_forward_pre_hook(self._pre_of(name, sub),
                                                             with_kwargs=True))
                handles.append(sub.register_forward_hook(self._post_of(name),
                                                         with_kwargs=True))
            self.hooks_installed += 1
        elif not on and self._sub_handles:
            for h in self._sub_handles:
                h.remove()
            self._sub_handles = []

    def remove_hooks(self) -> None:
        self._set_active(False)
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre_of(self, name: str, sub: torch.nn.Module):
        cls = type(sub).__name__
        watcher = self

        def pre(module, args, kwargs):
            if not watcher.active:
                if watcher.recompute is not None:  # the backward replays a checkpoint
                    try:
                        watcher.recompute.enter(name, args, kwargs)
                    except Exception as e:  # noqa: BLE001 - never into training
                        watcher.guard.failed("a module's forward pre-hook (recomputed)", e)
                return
            try:
                watcher._enter(name, cls, module, args, kwargs)
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                watcher.guard.failed("a module's forward pre-hook", e)
            return
        return pre

    def _post_of(self, name: str):
        watcher = self

        def post(module, args, kwargs, output):
            if not watcher.active:
                if watcher.recompute is not None:
                    try:
                        watcher.recompute.leave(name, output)
                    except Exception as e:  # noqa: BLE001 - never into training
                        watcher.guard.failed("a module's forward hook (recomputed)", e)
                return
            try:
                watcher._leave(name, output)
            except Exception as e:  # noqa: BLE001 - never into training (guard.py)
                watcher.guard.failed("a module's forward hook", e)
            return
        return post

    # ----- module invocations -----------------------------------------------------------

    def _enter(self, name: str, cls: str, module, args, kwargs) -> None:
        count = self.calls.get(name, 0)
        self.calls[name] = count + 1
        inv_id = name if count == 0 else f"{name}#{count}"
        parent = self.stack[-1].id if self.stack else None
        extra = self._extra_repr.get(name)
        if extra is None:
            extra = self._extra_repr[name] = parse_extra_repr(module.extra_repr())
        inv = Invocation(inv_id, name, parent, cls, extra)
        retain = name not in self.ignored
        kind = INPUT if not self.stack else CALCULATED
        batch = self.batch
        enclosing = batch.enclosing(self.stack[-1].id if self.stack else None)
        batch.enter(inv_id, enclosing, all_tensors(args, kwargs))
        nograd = self._grad_root and not torch.is_grad_enabled()
        if nograd:  # (a reentrant checkpoint, or torch.no_grad() inside the forward)
            self.nograd.append(inv)
        for role, t in inputs_of(args, kwargs):
            key = tensor_key(t)
            inv.inputs.append((role, t, key))
            reg = self._register(inv_id, role, t, kind, retain,
                                 batch.from_input(t, enclosing, key))
            if nograd and reg is not None:
                self.nograd_regs[(inv_id, role)] = reg
        self.stack.append(inv)
        self.invocations.append(inv)
        self.called.add(name)

    def _leave(self, name: str, output) -> None:
        stack = self.stack
        while stack and stack[-1].module != name:  # an exception left calls open
            stack.pop()
        if not stack:
            return
        inv = stack.pop()
        found = outputs_of(output)
        if not found:
            self.without_output.add(name)
            return
        self.with_output.add(name)
        retain = name not in self.ignored
        batched = inv.id in self.batch.given
        for role, t in found:
            key = tensor_key(t)
            inv.outputs.append((role, t, key))
            derived = self.batch.output(batched, t, key)
            reg = self._register(inv.id, role, t, CALCULATED, retain, derived)
            if reg is not None and self.nograd and not t.requires_grad:
                self.nograd_regs[(inv.id, role)] = reg
            if retain and t.requires_grad:
                self.step_outputs.append((name, inv.id, t))

    def attach(self, tensor: torch.Tensor, parent: torch.nn.Module, name: str) -> None:
        """Record ``tensor`` as the output of a node ``<parent's name>.<name>``."""
        parent_name = self.names.get(id(parent))
        if parent_name is None or not isinstance(tensor, torch.Tensor) or not (
                tensor.is_floating_point() or tensor.is_complex()):
            return
        node = f"{parent_name}.{name}"
        if node not in self.io_nodes:
            self.io_nodes.add(node)
            self.attached[node] = parent_name
            self._send_config()
        count = self.calls.get(node, 0)
        self.calls[node] = count + 1
        inv_id = node if count == 0 else f"{node}#{count}"
        stack_parent = next((inv.id for inv in reversed(self.stack)
                             if inv.module == parent_name), self.stack[-1].id if self.stack
                            else None)
        inv = Invocation(inv_id, node, stack_parent, "attach", {})
        key = tensor_key(tensor)
        inv.inputs.append(("input 0", tensor, key))
        inv.outputs.append(("output 0", tensor, key))
        self.invocations.append(inv)
        self.called.add(node)
        self.with_output.add(node)
        enclosing = self.batch.enclosing(self.stack[-1].id if self.stack else None)
        self._register(inv_id, "output 0", tensor, CALCULATED, True,
                       self.batch.from_input(tensor, enclosing, key))
        if tensor.requires_grad:
            self.step_outputs.append((node, inv_id, tensor))

    # ----- the batch dimension -----------------------------------------------------------

    def _register(self, node: str, role: str, t: torch.Tensor, kind: str, retain: bool,
                  batched: bool = False):
        """Book ``t`` in the recorder's step; returns its Registration (None: not booked)."""
        if self.s.structure_only:
            return None
        step = self.rec.current_step
        if step is None:
            return None
        key = (id(t), tensor_version(t))
        snap = self.snapshots.get(key)
        if snap is None:
            with torch.no_grad():
                snap = self.snapshots[key] = (t, t.detach().clone())
        batch_dim = 0 if batched else None
        try:
            reg = step.book(f"{node} {role}", t, node, role, kind, self.iteration, batch_dim,
                            False, False, None, -1, t.grad_fn)
        except ComgraError:
            return None  # the user registered this node and role already
        reg.values = snap[1]
        if retain and "io_grad" in self.s.log and t.grad_fn is not None:
            t.retain_grad()
        return reg


def module_by_id(root: torch.nn.Module, key: int) -> torch.nn.Module | None:
    for m in root.modules():
        if id(m) == key:
            return m
    return None

