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

Parts: ``Watcher`` here is the step lifecycle (the root's hooks, the own trial's steps
and iterations, the validation trial, following a recorder, dropping a step, closing);
its mixins are ``watch_modules.ModuleHooks`` (the per-module hooks and registrations,
``attach``), ``watch_gradients.GradientHooks`` (the end of each backward pass and a
checkpoint's recompute) and ``watch_output.WatchOutput`` (module graphs, configuration,
report); ``watch_settings`` holds ``Settings`` and the names they share.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from .compiled import compiled_detail
from .guard import Guard
from .lifecycle import Stage
from .module_graph import Invocation, shared_parameters
from .module_io import BatchTracker
from .module_io import batch_size_of as _batch_size
from .recompute import Recompute
from .watch_gradients import GradientHooks, queue_after_backward
from .watch_modules import ModuleHooks, module_by_id
from .watch_output import WatchOutput
from .watch_settings import LOG_OPTIONS, TRAINING, VALIDATION, Settings

log = logging.getLogger("comgra_like")

# Imported from here by watching.py, optimizer.py and metric_collect.py
__all__ = ["LOG_OPTIONS", "TRAINING", "VALIDATION", "Settings", "Watcher",
           "queue_after_backward"]


class Watcher(ModuleHooks, GradientHooks, WatchOutput):
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
                            module_by_id(module, key), settings.ignore_io_grad_classes)}
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

    # ----- steps ------------------------------------------------------------------------

    def continues_open_step(self) -> bool:
        """Whether a training forward of the root, now, belongs to the training step that
        is open (recorded or not) instead of opening the next one: with an optimizer, no
        optimizer step since it opened and the gradients not reset after a backward (a
        further micro-batch of gradient accumulation); without one, no backward yet
        (``delay_log_multi_backward``). watch()'s rule for numbering steps; the flight
        recorder's driver asks it before each training forward so that its steps are
        these."""
        if not (self.open == TRAINING or self.open_skipped):
            return False
        if self.optimizer is not None:
            return self.optimizer.continues_step(self._optimizer_steps_at_open,
                                                 self.backward_seen)
        return bool(self.s.delay_log_multi_backward) and not self.backward_seen

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
            if self.continues_open_step():
                if self.open == TRAINING:  # a further micro-batch / forward of the step
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


