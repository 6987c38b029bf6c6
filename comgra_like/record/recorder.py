"""ComgraRecorder: the object a training loop calls to record its internals.

Same class, method and parameter names as comgra 0.11.5, so that a script written for
comgra runs with only its imports changed. On steps that are not recorded every call
returns after a flag check. On recorded steps the recorder copies the parameters (at
``start_batch``), the gradients (at ``record_current_gradients``) and the registered
tensors (at ``finish_batch``) into shared memory and sends one message to the writer
process (``comgra_like/writer/``), which computes the statistics and writes parquet while
training goes on.
"""

from __future__ import annotations

import logging
import numbers
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from .. import __version__
from ..errors import (
    CallOrderError,
    ConfigurationError,
    RecordingDecisionError,
    RegistrationError,
    TrainingStepError,
)
from ..format.files import files_for, is_object_store
from ..format.layout import TrialLayout
from ..format.schema import (
    SCHEMA_VERSION,
)
from ..format.trial_config import flatten_config
from ..objects import DecisionMakerForRecordings
from ..transport.client import WriterClient
from ..vocabulary import (
    FORWARD,
    RUNNING,
)
from .capture import Capturer
from .flow import protect_retained
from .graph import GraphExtractor
from .kpi import KpiBuffer
from .lifecycle import Lifecycle, LifecycleView, Stage, StepEvent
from .metric_collect import Collector
from .metric_config import resolve_config
from .ranks import detect as rank_detection
from .ranks import recording_ranks
from .recorder_checks import (
    INT64_MAX,
    INT64_MIN_ABS,
    as_step,
    categories_of,
    check_arguments,
    check_type_of_execution,
    round_robin,
)
from .recorder_kpis import KpiCalls
from .recorder_output import WriterCalls
from .recorder_tensors import TensorCalls
from .step import Parameter, SignatureTable, Step
from .trial_folder import prepare_trial

log = logging.getLogger("comgra_like")



class ComgraRecorder(LifecycleView, TensorCalls, KpiCalls, WriterCalls):
    """Records named tensors, gradients, parameter updates and the dependency graph."""

    def __init__(
        self,
        comgra_root_path,
        group: str,
        trial_id: str,
        decision_maker_for_recordings: DecisionMakerForRecordings,
        max_num_batch_size_to_record: int | None = None,
        prefixes_for_grouping_module_parameters_visually: Sequence[str] | None = None,
        prefixes_for_grouping_module_parameters_in_nodes: Sequence[str] | None = None,
        comgra_is_active: bool = True,
        max_num_mappings_to_save_at_once_during_serialization: int = 10000,
        type_of_serialization: str = "msgpack",
        calculate_svd_and_other_expensive_operations_of_parameters: bool = True,
        ranks: str | int | Iterable[int] = "all",
        config: Mapping | None = None,
        flight_recorder=None,
    ):
        self.comgra_is_active = bool(comgra_is_active)
        # Armed on every step, recorded or not (record/flight.py, docs/FLIGHT.md).
        self._flight = None
        if flight_recorder is not None:
            from .flight import FlightRecorder

            if not isinstance(flight_recorder, FlightRecorder):
                raise ConfigurationError(
                    "flight_recorder must be a comgra_like.FlightRecorder(...), got "
                    f"{type(flight_recorder).__name__}")
            flight_recorder.check_free()
        # The trial's hyperparameters, checked before anything is written (trial.json).
        self.config = flatten_config(config)
        # Under torch.distributed (or RANK/WORLD_SIZE) each recording rank writes its own
        # shards into the same trial (docs/FORMAT.md, "Recording ranks").
        self.rank, self.world_size, self.recording_ranks = 0, 1, (0,)
        self.training_step: int | None = None
        self.type_of_execution: str | None = None
        self.iteration: int | None = None
        self._stage = Stage.IDLE
        self._recording = False
        self._finalized = False
        self._batch_size = 0
        self._recorded_steps = 0
        self._step: Step | None = None  # the step being recorded (or not yet decided)
        self._lifecycle = Lifecycle()  # listeners of the step events (record/lifecycle.py)
        self._requested = 0  # steps to record whatever the decision maker says
        self._decision_called = False  # decide_recording_of_batch() in this step
        self._modules: dict[int, str] = {}  # id(module) -> full name
        self._metrics: list = []  # the per-module metrics' collectors (track_module)
        if not self.comgra_is_active:
            return
        trial_id, group = check_arguments(decision_maker_for_recordings,
                                          max_num_batch_size_to_record, trial_id, group)
        where = rank_detection()
        self.rank, self.world_size = where.rank, where.world_size
        self.recording_ranks = recording_ranks(ranks, where.world_size)
        if self.rank not in self.recording_ranks:
            self.comgra_is_active = False  # every call is a no-op, as comgra's inactive mode
            return
        lead = self.rank == self.recording_ranks[0]
        self.decision_maker = decision_maker_for_recordings
        self.max_num_batch_size_to_record = max_num_batch_size_to_record
        self.prefixes_visual = list(prefixes_for_grouping_module_parameters_visually or [])
        self.prefixes_nodes = list(prefixes_for_grouping_module_parameters_in_nodes or [])
        self.calculate_svd = bool(calculate_svd_and_other_expensive_operations_of_parameters)
        self.trial_id = trial_id
        self.group_path = Path(comgra_root_path) / group
        self.trial_path = TrialLayout.of(self.group_path, trial_id).root
        if is_object_store(self.trial_path):  # here, not in the writer after training began
            files_for(self.trial_path).require_bucket(self.trial_path)
        lock = prepare_trial(self.trial_path, self.rank if where.distributed else None,
                             lead, self.recording_ranks)
        self._created = time.time()
        self._settings = {
            "max_num_batch_size_to_record": max_num_batch_size_to_record,
            "prefixes_for_grouping_module_parameters_visually": self.prefixes_visual,
            "prefixes_for_grouping_module_parameters_in_nodes": self.prefixes_nodes,
            "calculate_svd_and_other_expensive_operations_of_parameters": self.calculate_svd,
            "decision_maker_for_recordings": repr(decision_maker_for_recordings),
        }
        if where.distributed:
            self._settings["world_size"] = self.world_size
            self._settings["ranks"] = list(self.recording_ranks)
        # The writer writes every file of the trial, trial.json first.
        try:
            self._writer = WriterClient(self.trial_path, trial_id, self.calculate_svd,
                                        trial=self._trial_json() if lead else None, lock=lock,
                                        rank=self.rank, lead=lead)
        except BaseException:
            lock.release()
            raise
        self._module_tree: list[dict] = []
        self._params: list[Parameter] = []
        self._module_groups: list[str | None] = []  # per parameter, for the graph
        self._known_types: set[str] = set()
        self._valid_types: set[str] = set()  # types of execution that passed the check
        self._param_template: tuple[list, Step] | None = None  # see _new_step
        self._capturer = Capturer(self._writer)
        self._all_types_known = False
        self._record_by_default = True
        self._decided = True
        self._sample_indices: list[int] = []
        self._sample_categories: list[str] = []
        self._kpis = KpiBuffer()
        self._graphs = GraphExtractor(self._module_groups, bool(self.prefixes_nodes),
                                      self._write_graph)
        self._signatures = SignatureTable()
        self._warned_no_gradients = False
        self._warned_unused: set[str] = set()
        protect_retained(self._retained_tensors)  # from FlowChain's extra backward passes
        if flight_recorder is not None:
            flight_recorder.attach(  # trial.json names each trigger (through the writer)
                self.trial_path, self.rank,
                lambda trigger: self.writer is not None and self.writer.flight_trigger(trigger))
            self._flight = flight_recorder

    def _retained_tensors(self) -> list[torch.Tensor]:
        """The registered tensors of the open step that retain their gradient."""
        step = self._step
        return [] if step is None else [r.tensor for r in step.regs if r.tensor.retains_grad]

    # ----- metadata ---------------------------------------------------------------------

    def _trial_json(self) -> dict:
        """The trial's trial.json while it runs (the writer marks it finished)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "trial_id": self.trial_id,
            "group": self.group_path.name,
            "created": self._created,
            "status": RUNNING,
            "settings": self._settings,
            "config": self.config,
            "versions": {
                "comgra_like": __version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }

    def track_module(self, module_name: str, module: torch.nn.Module, *,
                     metrics: Mapping | None = None) -> None:
        """Track a module: its parameters are recorded on every recorded step.

        ``metrics``: per-module metrics of this module in Taiyi's config format
        (``comgra_like.metrics``), computed on their own schedules of this recorder's
        training steps, whether or not a step is recorded (``Group.read_metrics``).
        """
        if not self.comgra_is_active:
            # Names still work, so code that names tensors by module runs unchanged.
            for sub_name, sub in module.named_modules():
                self._modules.setdefault(id(sub), f"{module_name}.{sub_name}" if sub_name
                                         else module_name)
            return
        if self._stage != "idle" or self._recorded_steps:
            raise CallOrderError(
                f"track_module({module_name!r}) must be called before the first start_batch()"
            )
        if not isinstance(module, torch.nn.Module):
            raise ConfigurationError(f"track_module({module_name!r}, ...) needs a torch.nn.Module")
        if not module_name or "." in module_name:
            raise ConfigurationError(
                f"module_name {module_name!r} must be non-empty and contain no '.' "
                "(the dot separates submodules in full names)"
            )
        if module_name in self._modules.values():
            raise RegistrationError(f"a module named {module_name!r} is tracked already")
        specs = None if metrics is None else resolve_config(module, metrics, module_name)
        known = {id(p.tensor) for p in self._params}
        for sub_name, sub in module.named_modules():
            full = module_name if not sub_name else f"{module_name}.{sub_name}"
            self._modules.setdefault(id(sub), full)
            params = []
            for p_name, p in sub.named_parameters(recurse=False):
                p_full = f"{full}.{p_name}"
                params.append({"name": p_name, "full_name": p_full, "shape": list(p.shape),
                               "numel": int(p.numel())})
                if id(p) in known:
                    continue  # shared parameter, tracked under its first name
                known.add(id(p))
                node = next((x for x in self.prefixes_nodes if p_full.startswith(x)), None)
                visual = max((x for x in self.prefixes_visual if p_full.startswith(x)),
                             key=len, default=None)
                self._params.append(Parameter(
                    full_name=p_full, tensor=p, node=node or p_full, role=p_full,
                    module_group=visual,
                ))
                self._module_groups.append(visual)
            parent = full.rsplit(".", 1)[0] if "." in full else None
            total = sum(int(p.numel()) for p in sub.parameters())
            self._module_tree.append({"name": full, "parent": parent, "parameters": params,
                                      "num_parameters_total": total})
        self._writer.submit_modules(self._module_tree)
        if specs is not None:
            self._metrics.append(Collector(
                module, specs, module_name, self._writer,
                lambda: self.training_step if self._stage != Stage.IDLE else None))

    def get_name_of_module(self, module: torch.nn.Module) -> str:
        """The full name (``parent.child``) under which ``module`` is tracked."""
        try:
            return self._modules[id(module)]
        except (KeyError, AttributeError):
            raise RegistrationError(
                f"{type(module).__name__} is not tracked: call track_module() on it or on a "
                "module containing it first"
            ) from None

    def add_note(self, note) -> None:
        """Store a line of text for the Notes page (and log it)."""
        if not self.comgra_is_active:
            log.info("comgra_like note: %s", note)
            return
        if self._finalized:
            raise CallOrderError(
                f"add_note({str(note)[:60]!r}) was called after finalize(): the trial is "
                "finished and its files are final; add notes before finalize()"
            )
        log.info("comgra_like note: %s", note)
        self._writer.submit_note(str(note), time.time(), self.training_step)

    # ----- the batch ----------------------------------------------------------------------

    def recording_is_active(self) -> bool:
        """Whether the current training step is being recorded."""
        return self._recording

    # ----- the lifecycle, read-only (record/lifecycle.py) ---------------------------------

    def start_batch(
        self,
        training_step: int,
        current_batch_size: int,
        type_of_execution: str | None = "main_execution_type",
        record_all_tensors_per_batch_index_by_default: bool = True,
        override__recording_is_active: bool | None = None,
    ) -> None:
        """Start a training step; decides whether it is recorded."""
        if not self.comgra_is_active:
            return
        if self._stage != "idle":
            raise CallOrderError(
                f"start_batch({training_step}) called before finish_batch() of step "
                f"{self.training_step}"
            )
        if self._finalized:
            raise CallOrderError("start_batch() called after finalize()")
        if type(training_step) is not int or not -INT64_MIN_ABS <= training_step <= INT64_MAX:
            training_step = as_step(training_step, "start_batch(training_step=...)")
        if self.training_step is not None and not training_step > self.training_step:
            raise TrainingStepError(
                f"training_step must strictly increase: got {training_step} after "
                f"{self.training_step}"
            )
        if type_of_execution is not None and type_of_execution not in self._valid_types:
            check_type_of_execution(type_of_execution)
            self._valid_types.add(type_of_execution)
        if override__recording_is_active is not None:
            record = bool(override__recording_is_active)
        elif type_of_execution is None:
            record = not (self._all_types_known and not self.decision_maker.could_record_any(
                training_step, self._known_types))
        else:
            record = self.decision_maker.is_record_on_this_step(training_step, type_of_execution)
        if (not record and self._flight is not None and override__recording_is_active is None
                and type_of_execution is not None and self._flight.take_forced_recording()):
            record = True  # the steps after a flight recorder's trigger are recorded in full
        if (not record and override__recording_is_active is None
                and type_of_execution is not None and self._requested > 0):
            record = True  # request_recording()
            self._requested -= 1
        # Everything that can reject the call is checked before the state changes, so that
        # after the error the loop can call start_batch() again.
        if record:
            if not self._params and not self._modules:
                raise CallOrderError(
                    "no module is tracked: call track_module(name, model) before recording"
                )
            given = current_batch_size
            if type(current_batch_size) is not int:
                if not isinstance(current_batch_size, numbers.Integral) or isinstance(
                        current_batch_size, bool):
                    current_batch_size = 0  # the error below
                current_batch_size = int(current_batch_size)
            if current_batch_size < 1:
                raise ConfigurationError(
                    f"start_batch({training_step}, current_batch_size={given!r}): the batch size "
                    "must be a positive integer (the size of the batch dimension of the "
                    "tensors you register)"
                )
        previous_step = self.training_step
        self.training_step = training_step
        self.type_of_execution = type_of_execution
        self.iteration = None
        self._stage = Stage.BATCH
        self._decision_called = False
        self._recording = record
        if self._flight is not None:
            self._flight.begin(training_step, self._params)
        if not record:
            if self._lifecycle:
                self._lifecycle.step_start(self._event())
            return
        self._batch_size = current_batch_size
        # With max_num_batch_size_to_record=0 there are no samples to record: tensors
        # default to batch statistics only (comgra's default True would ask for none).
        self._record_by_default = (bool(record_all_tensors_per_batch_index_by_default)
                                   and self.max_num_batch_size_to_record != 0)
        self._decided = type_of_execution is not None
        k = current_batch_size if self.max_num_batch_size_to_record is None else min(
            current_batch_size, self.max_num_batch_size_to_record)
        self._sample_indices = list(range(k))
        self._sample_categories = [""] * k
        try:
            step = self._step = self._new_step(training_step)
            step.walker = self._graphs.walker(step)
            step.slot = self._writer.acquire()
            # The optimizer updates in place: the values before this step are kept now.
            self._capturer.capture(step, current_batch_size, step.regs,
                                   [p.tensor for p in self._params], FORWARD)
            step.mark_parameter_gradients(self._params)
        except BaseException:
            # No slot kept, no step left open: the loop may call start_batch() again.
            self._drop_step()
            self._stage = Stage.IDLE
            self.training_step = previous_step
            raise
        if self._lifecycle:
            self._lifecycle.step_start(self._event())

    def _new_step(self, training_step: int) -> Step:
        """A step that holds the parameters' registrations (they come first, in order).

        They are the same on every recorded step, so they are built once and copied; a
        parameter whose shape or dtype changed (``.data`` replaced) or more parameters
        (a module tracked after a batch that was not recorded) build them anew.
        """
        key = [(p.tensor.shape, p.tensor.dtype) for p in self._params]
        template = self._param_template
        if template is None or template[0] != key:
            template = self._param_template = (
                key, Step.of_parameters(self._params, self._signatures))
        return template[1].copy(training_step)

    def start_iteration(self) -> None:
        """Start the next iteration (forward pass) of the current batch."""
        if not self.comgra_is_active:
            return
        if self._stage != "batch":
            raise CallOrderError(
                "start_iteration() must follow start_batch() or finish_iteration(); "
                f"it was called in stage {self._stage!r}"
            )
        self._stage = Stage.ITERATION
        self.iteration = 0 if self.iteration is None else self.iteration + 1

    def finish_iteration(self) -> None:
        """End the current iteration; its dependency graph is extracted now."""
        if not self.comgra_is_active:
            return
        if self._stage != "iteration":
            raise CallOrderError(
                f"finish_iteration() without a matching start_iteration() (stage {self._stage!r})"
            )
        self._stage = Stage.BATCH
        if self._recording:
            self._step.graphs[self.iteration] = self._graphs.extract(self._step, self.iteration)

    def decide_recording_of_batch(self, type_of_execution: str | None, category_per_sample=None) -> None:
        """For a batch started with type_of_execution=None: record it, and which samples."""
        if not self.comgra_is_active:
            return
        if self._stage == "idle":
            raise CallOrderError("decide_recording_of_batch() must be called inside a batch")
        if self._decision_called:
            raise RecordingDecisionError(
                f"decide_recording_of_batch() was called twice in step {self.training_step}; "
                "call it once per step started with type_of_execution=None"
            )
        if self.type_of_execution is not None:
            raise RecordingDecisionError(
                "decide_recording_of_batch() is only for batches started with "
                f"type_of_execution=None; this one has {self.type_of_execution!r}"
            )
        if type_of_execution is not None:
            check_type_of_execution(type_of_execution)
        cats = None
        if self._recording and type_of_execution is not None and category_per_sample is not None:
            cats = categories_of(category_per_sample, self._batch_size)
        # Checked: from here on the call cannot fail.
        self._decision_called = True
        if not self._recording:
            return
        if type_of_execution is None:
            self._drop_step()
            return
        self.type_of_execution = type_of_execution
        self._decided = True
        if not self.decision_maker.is_record_on_this_step(self.training_step, type_of_execution):
            self._drop_step()
            return
        if cats is not None:
            k = len(self._sample_indices)
            self._sample_indices, self._sample_categories = round_robin(cats, k)
        for args in self._step.pending_kpis:
            self._offer_kpi(*args)
        self._step.pending_kpis.clear()

    def _drop_step(self) -> None:
        """Forget the current step; its slot goes back unless it was sent to the writer."""
        step = self._step
        if step is not None and step.slot is not None:
            self._writer.release(step.slot)
            step.slot = None
        self._step = None
        self._recording = False

    def abort_batch(self) -> bool:
        """End the open training step without recording it: what it registered is
        dropped and the next ``start_batch()`` works. For a loop that catches an exception
        raised inside a step (the probe loop, when the network refuses an edited input).
        Returns whether a step was open; the step's number stays used (steps still have
        to increase)."""
        if not self.comgra_is_active or self._stage == "idle":
            return False
        self._drop_step()
        self._stage = Stage.IDLE
        self.iteration = None
        if self._lifecycle:
            self._lifecycle.step_dropped(self._event())
        return True

    def declare_that_all_different_types_of_execution_have_been_encountered(self) -> None:
        """Lets dynamic recording skip steps where no known type could record."""
        if self.comgra_is_active:
            self._all_types_known = True

    def finish_batch(self) -> None:
        """End the training step: records parameter updates and writes everything."""
        if not self.comgra_is_active:
            return
        if self._stage == "iteration":
            raise CallOrderError("finish_batch() called before finish_iteration()")
        if self._stage != "batch":
            raise CallOrderError("finish_batch() without start_batch()")
        self._stage = Stage.IDLE
        if self._recording and not self._decided:
            # The step ends unrecorded; its slot goes back, so a loop that catches this
            # error can go on.
            self._drop_step()
            if self._lifecycle:
                self._lifecycle.step_dropped(self._event())
            raise RecordingDecisionError(
                f"step {self.training_step} was started with type_of_execution=None but "
                "decide_recording_of_batch() was never called, so it is not recorded; call "
                "decide_recording_of_batch() before finish_batch()"
            )
        recorded = self._recording
        if self._recording:
            if self._step.made_grad:
                self._warn_unused_leaves(self._step)
            try:
                self._send_step()
            finally:
                self._drop_step()
            self._recorded_steps += 1
            self._known_types.add(self.type_of_execution)
            self.decision_maker.mark_recorded(self.training_step, self.type_of_execution)
        self._recording = False
        if self._kpis.due():
            self._submit_kpis()
        if self._lifecycle:
            self._lifecycle.step_end(StepEvent(self.training_step, self.type_of_execution,
                                               recorded))
        if self._flight is not None:  # may raise FlightTriggerError (on_trigger="raise")
            self._flight.end(self._params)

    def _warn_unused_leaves(self, step: Step) -> None:
        """Warn (once per name) about registered leaves that nothing registered uses.

        A tensor that did not require a gradient when it was used leaves no trace in the
        autograd graph, so registering it afterwards cannot connect it: its edges are lost.
        """
        for name in step.unused_leaves():
            if name not in self._warned_unused:
                self._warned_unused.add(name)
                log.warning(
                    "comgra_like: step %s: nothing registered depends on %r in the dependency "
                    "graph. If it was used before register_tensor(%r, ...) was called, its "
                    "edges are lost: register a tensor right after creating it, before using "
                    "it (this warning is shown once per name)",
                    self.training_step, name, name)

    # ----- the writer -----------------------------------------------------------------

    # ----- KPIs ---------------------------------------------------------------------------

    # ----- graph structures and sending a recorded step -----------------------------------
