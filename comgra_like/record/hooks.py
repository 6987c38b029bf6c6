"""The driver behind ``comgra_like.watch``: forward hooks on every module of a watched
network that register each invocation's inputs and outputs as tensors of the recorder's
step (``record.step.Step``, as the facade does), and the module graph of each forward.

Cost only where it is paid for: on steps that are not recorded every hook returns after
one attribute check. On recorded steps a hook copies the tensors it registers (a later
in-place operation, ``ReLU(inplace=True)`` or ``out += identity``, would change them
before the step is sent) and makes autograd keep their gradients (``retain_grad``; no
backward module hooks, which fail on views modified in place). The gradients are recorded
when a backward pass ends (an autograd engine callback queued from a hook on the root's
outputs), each backward of a step under its own loss group.

Steps (own trial): every forward of the root module in training mode starts a step (with
``delay_log_multi_backward``: only the first after a backward), numbered from 0 like
torchexplorer's step counter; steps ``k % log_freq == 0`` are recorded. A recorded step
ends at the next forward of the root (after the optimizer's update, which the recorder
records) or when watching stops.

Validation passes (own trial): the first eval-mode forward after a recorded training
step (or before the first) is a step of type ``validation`` in the trial
``<trial>.validation``, numbered with the training step it followed (-1: none), so it
never collides with a training step. Reentrant checkpointing: ``recompute.py``. Every
hook's work runs under a ``guard.Guard``: an internal failure is logged once, the step
is dropped, training goes on (docs/WATCH.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import torch

from ..errors import ComgraError
from ..format.graphs import canonical_hash
from ..protocol import ModuleGraph, Watch, WatchReport, WatchStep
from ..vocabulary import CALCULATED, INPUT
from .compiled import compiled_detail
from .flow import in_flow_pass
from .guard import Guard
from .lifecycle import Stage
from .module_graph import (
    Invocation,
    edges_of,
    parse_extra_repr,
    shared_parameters,
    structure,
    structure_key,
    tensor_key,
)
from .module_io import BatchTracker, inputs_of, outputs_of
from .module_io import all_tensors as _all_tensors
from .module_io import batch_size_of as _batch_size
from .module_io import tensor_version as _version
from .recompute import Recompute
from .watch_report import build_report, summary_line

log = logging.getLogger("comgra_like")

TRAINING, VALIDATION = "training", "validation"
LOG_OPTIONS = ("io", "io_grad", "params", "params_grad")



@dataclasses.dataclass
class Settings:
    log: tuple[str, ...]
    log_freq: int
    ignore_io_grad_classes: tuple[type, ...]
    time_name: str
    time_fn: Callable[[torch.nn.Module, int], Any]
    delay_log_multi_backward: bool
    eval_mode: str  # record | skip
    structure_only: bool  # backend 'none'
    histogram: dict  # bins, sample_n, reject_outlier_proportion, seed
    verbose: bool
    # watch(optimizer=): each backward's gradients as a loss group of their own as well
    micro_batch_gradients: bool = True


class Watcher:
    """Hooks on one watched module tree feeding one recorder (see the module docstring).

    ``own``: the watcher drives the recorder's steps (its own trial); otherwise the
    user's loop does, and the hooks record whenever the recorder is inside an iteration
    of a recorded step.
    """

    def __init__(self, module: torch.nn.Module, recorder, own: bool, root_name: str,
                 settings: Settings, make_validation: Callable[[], Any] | None = None):
        self.module = module
        self.rec = recorder  # the recorder of the open step (the validation trial's in one)
        self.train_rec = recorder
        self.val_rec = None  # the validation trial's recorder, made at the first one
        self._make_validation = make_validation
        self.guard = Guard("comgra_like.watch", self._drop)
        self._dropped_key: tuple | None = None  # recorder= mode: the iteration given up
        self.own = own
        self.root = root_name
        self.s = settings
        self.names: dict[int, str] = {}
        for sub_name, sub in module.named_modules():
            self.names.setdefault(id(sub), f"{root_name}.{sub_name}" if sub_name else root_name)
        self.io_nodes = set(self.names.values())
        self.shared = shared_parameters(module, self.names)  # tied weights: every holder
        self.ignored = {name for key, name in self.names.items()
                        if settings.ignore_io_grad_classes and isinstance(
                            _module_by_id(module, key), settings.ignore_io_grad_classes)}
        self.active = False  # the one check of every hook on steps not recorded
        self.closed = False
        self.handles: list = []
        self.train_count = 0
        self.open: str | None = None  # type of execution of the open recorded step
        self.open_skipped = False  # an unrecorded training step is open
        self.backward_seen = False
        self.eval_due = True  # a validation before the first training step is recorded
        self.step_no = -1
        self.toe = TRAINING
        self.iteration = -1
        self.batch_size = 1
        self._iter_key: tuple | None = None
        self.calls: dict[str, int] = {}
        self.batch = BatchTracker(1)
        self.stack: list[Invocation] = []
        self.invocations: list[Invocation] = []
        # reentrant checkpointing (recompute.py): the calls of a training forward made
        # without gradients, their registrations, the replay being matched in the
        # backward, the module graph waiting for it, the modules never replayed
        self._grad_root = True
        self.nograd: list[Invocation] = []
        self.nograd_regs: dict[tuple[str, str], Any] = {}
        self.recompute: Recompute | None = None
        self._pending_graph: list[Invocation] | None = None
        self.not_replayed: set[str] = set()
        self.checkpointed: set[str] = set()  # modules whose forward was checkpointed
        self.step_outputs: list[tuple[str, str, torch.Tensor]] = []  # module, inv id, tensor
        self.snapshots: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.backward_count = 0
        self._callback_queued = False
        self._sent_graphs: dict[int, set[str]] = {}  # per recorder: graphs it has
        self._graph_keys: dict[tuple, str] = {}  # structure key -> module graph hash
        self.graphs_hashed = 0  # module graph structures built and hashed (a counter)
        # A module's extra_repr rows, parsed once: they describe its configuration, which
        # does not change between steps (parsing them on every call cost every recorded step)
        self._extra_repr: dict[str, dict[str, str]] = {}
        self.steps_recorded = 0
        # report material
        self.called: set[str] = set()
        self.with_output: set[str] = set()
        self.without_output: set[str] = set()
        self.got_gradient: set[str] = set()
        self.no_gradient: set[str] = set()
        self.eval_skipped: str | None = None
        self.outside_iteration = False
        self._last_report: dict | None = None
        self._logged = False
        self.attached: dict[str, str] = {}  # attach node -> parent module name
        # watch(optimizer=): record/optimizer.py's OptimizerWatch; a step is then one
        # optimizer step (its micro-batches are iterations of it)
        self.optimizer = None
        self._optimizer_steps_at_open = 0
        # torch.compile: the submodules run inside the compiled graph, where module hooks
        # would break it (or be traced into it): only the root's calls are hooked
        self.compiled: str | None = compiled_detail(module)
        if self.compiled is not None:
            log.warning("comgra_like.watch: %s", self.compiled)
        self._hook()
        self._send_config()

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

    # ----- steps ------------------------------------------------------------------------

    def _root_pre(self, module, args, kwargs):
        if self.closed:
            return
        try:
            self._root_pre_work(module, args, kwargs)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the root module's forward pre-hook", e)

    def _root_pre_work(self, module, args, kwargs) -> None:
        if not self.own:
            self._follow_recorder(module, args, kwargs)
            return
        self._set_active(False)  # (a forward that raised left it on)
        if module.training:
            if self.optimizer is not None and (self.open == TRAINING or self.open_skipped) \
                    and self.optimizer.continues_step(self._optimizer_steps_at_open,
                                                      self.backward_seen):
                if self.open == TRAINING:  # a further micro-batch of the same step
                    self._begin_iteration()
                return
            if self.optimizer is None and self.s.delay_log_multi_backward and \
                    not self.backward_seen and (self.open == TRAINING or self.open_skipped):
                if self.open == TRAINING:  # the same step goes on: a further forward
                    self._begin_iteration()
                return
            self.end_step()
            k = self.train_count
            self.train_count += 1
            self.backward_seen = False
            if self.optimizer is not None:
                self._optimizer_steps_at_open = self.optimizer.steps_taken
            if k % self.s.log_freq and (self.s.structure_only
                                        or not self.rec.take_requested_recording()):
                self.open_skipped = True
                return
            self._start_step(k, TRAINING, args, kwargs)
        else:
            if self.open == TRAINING or self.open_skipped:
                self.end_step()
            if not self.eval_due:
                return
            self.eval_due = False
            if self.s.eval_mode == "skip":
                self.eval_skipped = "eval_mode='skip'"
                self._write_report()
                return
            rec = self._validation_recorder()
            if rec is None:
                return
            self.rec = rec
            self._start_step(self.train_count - 1, VALIDATION, args, kwargs)

    def _validation_recorder(self):
        """The validation trial's recorder (made now at the first validation pass)."""
        if self.val_rec is None and self._make_validation is not None:
            make, self._make_validation = self._make_validation, None  # tried once only
            self.val_rec = make()
            self._send_config(self.val_rec)
        return self.val_rec

    def _follow_recorder(self, module, args, kwargs) -> None:
        rec = self.rec
        if not rec.is_recording:
            self._set_active(False)
            return
        if rec.stage != Stage.ITERATION:
            self._set_active(False)
            if not self.outside_iteration:
                self.outside_iteration = True
                log.warning(
                    "comgra_like.watch: step %s is recorded, but %s ran outside "
                    "start_iteration()/finish_iteration(), so its modules are not recorded; "
                    "call the model between them", rec.training_step, self.root)
            return
        if not module.training and self.s.eval_mode == "skip":
            self._set_active(False)
            self.eval_skipped = "eval_mode='skip'"
            return
        key = (rec.training_step, rec.iteration)
        if key == self._dropped_key:  # an internal failure gave this iteration up
            self._set_active(False)
            return
        if key != self._iter_key:
            self._iter_key = key
            self.step_no = rec.training_step
            self.toe = rec.type_of_execution or "undecided"
            self.iteration = rec.iteration
            self._grad_root = torch.is_grad_enabled()
            self.batch_size = rec.current_batch_size or _batch_size(args, kwargs)
            self._reset_iteration()
        self._set_active(True)

    def _start_step(self, k: int, toe: str, args, kwargs) -> None:
        self.batch_size = _batch_size(args, kwargs)
        if not self.s.structure_only:
            # A validation under torch.inference_mode(): the recorder's shared-memory views
            # made now must be ordinary tensors, or copying into them outside inference
            # mode (the next step) fails
            with torch.inference_mode(False):
                self.rec.start_batch(k, self.batch_size, toe,
                                     override__recording_is_active=True)
        self.open = toe
        self.open_skipped = False
        self.step_no = k
        self.toe = toe
        self.iteration = -1
        self.backward_count = 0
        self._begin_iteration()

    def _begin_iteration(self) -> None:
        self._finish_recompute()  # a further forward before any backward
        self._grad_root = torch.is_grad_enabled()
        if not self.s.structure_only:
            self.rec.start_iteration()
        self.iteration += 1
        self._reset_iteration()
        self._set_active(True)

    def _reset_iteration(self) -> None:
        self.nograd, self.nograd_regs = [], {}
        self.batch = BatchTracker(self.batch_size)
        self.calls = {}
        self.stack = []
        self.invocations = []
        self.snapshots = {}

    def end_step(self) -> None:
        """Send the open recorded step (after the optimizer's update)."""
        self.open_skipped = False
        if self.open is None:
            return
        self._finish_recompute()  # no backward came
        toe, self.open = self.open, None
        self._set_active(False)
        rec, self.rec = self.rec, self.train_rec
        try:
            if not self.s.structure_only:
                with torch.inference_mode(False):  # (as in _start_step)
                    if rec.stage == Stage.ITERATION:  # a forward that raised never ended it
                        rec.finish_iteration()
                    rec.finish_batch()
        finally:
            self.steps_recorded += 1
            if toe == TRAINING:
                self.eval_due = True
            self.step_outputs = []
            self.snapshots = {}
            self._write_report()

    def _root_post(self, module, args, kwargs, output):
        try:
            self._root_post_work(module, args, kwargs, output)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the root module's forward hook", e)

    def _root_post_work(self, module, args, kwargs, output) -> None:
        if not self.active:
            if self.own and self.open_skipped and (
                    self.s.delay_log_multi_backward or self.optimizer is not None):
                self._watch_backward(output, self._mark_backward)
            return
        if self.own and self.open == TRAINING and self.nograd:
            # reentrant checkpointing: the hooks stay for the replay in the backward, and
            # the module graph waits for its edges (recompute.py)
            self.active = False
            self.recompute = Recompute(self.nograd, self.nograd_regs)
            self.recompute.rekey("io_grad" in self.s.log)
            self.recompute.watch_results(self.invocations)
            self._pending_graph = self.invocations
        else:
            if not self.own:  # recorder=: the user's loop records the gradients
                self.not_replayed |= {inv.module for inv in self.nograd}
            self._set_active(False)
            self._send_module_graph(self.invocations)
        self.invocations = []
        self.stack = []
        if not self.own:
            return
        if not self.s.structure_only:
            self.rec.finish_iteration()
        if self.open == VALIDATION:
            self.end_step()
        elif self.open == TRAINING:
            self._watch_backward(output, self._on_gradient)
        return

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
        batch.enter(inv_id, enclosing, _all_tensors(args, kwargs))
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
        key = (id(t), _version(t))
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

    # ----- gradients --------------------------------------------------------------------

    def _watch_backward(self, output, hook) -> None:
        for _role, t in outputs_of(output):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(hook)

    def _mark_backward(self, grad):
        if not in_flow_pass():
            self.backward_seen = True

    def _on_gradient(self, grad):
        try:
            if not self._callback_queued and not in_flow_pass():  # a FlowChain's pass: skip
                self._callback_queued = True
                queue_after_backward(self._backward_done)
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self._callback_queued = False
            self.guard.failed("a gradient hook", e)

    def _backward_done(self) -> None:
        """The backward pass has ended: every gradient of it is accumulated now."""
        self._callback_queued = False
        try:
            self._backward_done_work()
        except Exception as e:  # noqa: BLE001 - never into training (guard.py)
            self.guard.failed("the end of a backward pass", e)

    def _backward_done_work(self) -> None:
        self.backward_seen = True
        if self.open != TRAINING:
            return
        if self.recompute is not None and "io_grad" in self.s.log:
            self.got_gradient |= self.recompute.apply()  # before the gradients are read
        if self.s.structure_only:
            self._finish_recompute()
            return
        self.backward_count += 1
        group = "backward" if self.backward_count == 1 else f"backward_{self.backward_count}"
        if self.optimizer is None or self.s.micro_batch_gradients:
            try:
                self.rec.record_current_gradients(group)
            except ComgraError as e:
                log.warning("comgra_like.watch: the gradients of step %s were not recorded: "
                            "%s", self.step_no, e)
        if "io_grad" in self.s.log:
            for name, _inv, t in self.step_outputs:
                (self.got_gradient if t.grad is not None else self.no_gradient).add(name)
        self._finish_recompute()

    def _finish_recompute(self) -> None:
        """Send the module graph that waited for a checkpoint's replay, with the edges
        the replay showed; the hooks come off."""
        rc, self.recompute = self.recompute, None
        pending, self._pending_graph = self._pending_graph, None
        if rc is None:
            return
        self._set_active(False)
        self.not_replayed |= set(rc.not_replayed())
        if pending is not None:
            self._send_module_graph(pending, rc.edges(pending))
        self.checkpointed |= set(rc.boundaries)

    # ----- module graph, configuration, report ------------------------------------------

    def _send_module_graph(self, invocations: list[Invocation],
                           more_edges: list[list[str]] = ()) -> None:
        edges = edges_of(invocations)
        if more_edges:
            edges = sorted({tuple(e): e for e in [*edges, *more_edges]}.values())
        # Steps repeat their structure: a key of plain tuples finds its hash without
        # building and hashing the JSON again
        key = structure_key(invocations, edges, self.batch_size)
        digest = self._graph_keys.get(key)
        writer = self.rec.writer
        graph = None
        if digest is None:
            graph = structure(invocations, edges, self.batch_size, self.shared)
            digest = canonical_hash(graph)
            self.graphs_hashed += 1
            if len(self._graph_keys) >= 4096:  # structures that change every step
                self._graph_keys.clear()
            self._graph_keys[key] = digest
        sent = self._sent_graphs.setdefault(id(self.rec), set())
        if digest not in sent:  # each trial (training, validation) has its own graphs
            sent.add(digest)
            if graph is None:  # known by its key, new to this trial
                graph = structure(invocations, edges, self.batch_size, self.shared)
            writer.submit(ModuleGraph(digest, graph))
        try:
            time = float(self.s.time_fn(self.module, self.step_no))
        except Exception:  # noqa: BLE001 - a time_log that fails falls back to the step
            time = float(self.step_no)
        writer.submit(WatchStep(int(self.step_no), str(self.toe), int(self.iteration),
                                         digest, time))
        if not self.own:
            self.steps_recorded += 1
            self._write_report()

    def params_map(self) -> dict[str, list[str]]:
        """{parameter full name (as the recorder tracks it): [module name, parameter]}."""
        out = {}
        for sub in self.module.modules():
            name = self.names[id(sub)]
            for p_name, _p in sub.named_parameters(recurse=False):
                out.setdefault(f"{name}.{p_name}", [name, p_name])
        return out

    def _send_config(self, rec=None) -> None:
        if self.s.structure_only:
            return
        config = {**self.s.histogram, "log": list(self.s.log),
                  "io_nodes": sorted(self.io_nodes), "no_io_grad": sorted(self.ignored),
                  "params": self.params_map(),
                  "time_unit": self.s.time_name}
        for r in [rec] if rec is not None else self.recorders():
            r.writer.submit(Watch(config))

    def recorders(self) -> list:
        """The recorders of this watcher: the training trial's, the validation trial's."""
        return [r for r in (self.train_rec, self.val_rec) if r is not None]

    def _drop(self) -> None:
        """After an internal failure: forget the step being recorded (the recorder's open
        step released, no hook active until the next step); training goes on."""
        self._set_active(False)
        self.stack, self.invocations, self.step_outputs = [], [], []
        self.snapshots = {}
        self.recompute, self._pending_graph = None, None
        if not self.own:
            rec = self.rec
            self._dropped_key = (rec.training_step, rec.iteration)
            return
        rec, self.rec = self.rec, self.train_rec
        self.open = None
        if not self.s.structure_only:
            rec.abort_batch()

    def report(self) -> dict:
        """Which modules were hooked, which were skipped and why (``watch_report.py``)."""
        return build_report(self)

    def _write_report(self) -> None:
        report = self.report()
        if report == self._last_report:
            return
        self._last_report = report
        for rec in self.recorders():
            if rec.writer is not None and not rec.finalized:
                rec.writer.submit(WatchReport(report))
        if not self._logged and self.steps_recorded:
            self._logged = True
            msg = summary_line(report)
            if self.s.verbose:
                log.warning(msg)
            else:
                log.info(msg)

    def close(self) -> None:
        """Stop watching: every hook removed, the open step sent, the report written."""
        if self.closed:
            return
        self.closed = True
        self._set_active(False)
        self.remove_hooks()
        try:
            if self.own:
                self.end_step()
            self._write_report()
        finally:
            self.step_outputs = []
            self.snapshots = {}
            self.invocations = []


def _module_by_id(root: torch.nn.Module, key: int) -> torch.nn.Module | None:
    for m in root.modules():
        if id(m) == key:
            return m
    return None


def queue_after_backward(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the current backward pass ends, after the end-of-backward
    callbacks queued during it: DistributedDataParallel's waits for the gradients'
    all-reduce and writes the averaged gradients into ``.grad``, and a callback queued
    from a gradient hook would otherwise run before it and see each rank's own gradients.
    Queued from inside a first callback, it lands behind every one queued in the pass
    (the engine runs callbacks queued while it runs them, in order)."""
    engine = torch.autograd.Variable._execution_engine
    engine.queue_callback(lambda: engine.queue_callback(callback))
