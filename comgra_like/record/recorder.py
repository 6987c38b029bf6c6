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
import shutil
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
    StorageError,
    TrainingStepError,
)
from ..format.files import files_for, is_object_store
from ..format.layout import NOTES_DIR, TABLES, TrialLayout, shard_rank, trial_lock
from ..format.schema import (
    MAX_TRIAL_ID_LENGTH,
    SCHEMA_VERSION,
    TRIAL_ID_PATTERN,
    TYPE_OF_EXECUTION_PATTERN,
)
from ..format.trial import replace_object_trial
from ..format.trial_config import flatten_config
from ..objects import DecisionMakerForRecordings
from ..transport.client import WriterClient
from ..transport.lock import TrialLock
from ..vocabulary import (
    ANY_TYPE,
    DEFAULT_TYPE_OF_EXECUTION,
    FORWARD,
    PARAMETER,
    RUNNING,
    UPDATE,
    gradient_type,
)
from .capture import Capturer
from .flow import protect_retained
from .graph import GraphExtractor
from .kpi import KpiBuffer
from .lifecycle import Lifecycle, Stage, StepEvent, StepListener
from .metric_collect import Collector
from .metric_config import resolve_config
from .ranks import detect as rank_detection
from .ranks import recording_ranks
from .step import Parameter, SignatureTable, Step, check_registration

log = logging.getLogger("comgra_like")



class ComgraRecorder:
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
        if not isinstance(decision_maker_for_recordings, DecisionMakerForRecordings):
            raise ConfigurationError(
                "decision_maker_for_recordings must be a decision maker from comgra_like.objects "
                "(e.g. DecisionMakerForRecordingsFrequencyPerType(10)), got "
                f"{decision_maker_for_recordings!r}"
            )
        if max_num_batch_size_to_record is not None and (
            not isinstance(max_num_batch_size_to_record, int)
            or isinstance(max_num_batch_size_to_record, bool) or max_num_batch_size_to_record < 0
        ):
            raise ConfigurationError(
                "max_num_batch_size_to_record must be None (all samples), 0 (batch statistics "
                "only, no per-sample rows) or a positive integer, got "
                f"{max_num_batch_size_to_record!r}"
            )
        trial_id = str(trial_id)
        if not TRIAL_ID_PATTERN.match(trial_id):
            raise ConfigurationError(
                f"trial_id {trial_id!r} is not a valid trial id: use 1 to "
                f"{MAX_TRIAL_ID_LENGTH} letters, digits, '.', '_' and '-', not starting with "
                "'.' (e.g. 'run-3' or 'lr_0.01')"
            )
        group = str(group)
        if (not group or group in (".", "..") or "/" in group or "\\" in group
                or any(c in group for c in "\n\r\0")):
            raise ConfigurationError(
                f"group {group!r} must be one folder name (no path separators, no line "
                "breaks); put the parent folders into comgra_root_path"
            )
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
        if where.distributed:
            lock = _prepare_rank_files(self.trial_path, self.rank, lead, self.recording_ranks)
        else:
            lock = _prepare_trial_folder(self.trial_path)
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
            flight_recorder.attach(self.trial_path, self.rank)
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

    @property
    def stage(self) -> Stage:
        """``Stage.IDLE`` between steps, ``BATCH`` inside a step, ``ITERATION`` inside an
        iteration."""
        return self._stage

    @property
    def is_recording(self) -> bool:
        """Whether the open training step is being recorded (False between steps)."""
        return self._recording

    @property
    def finalized(self) -> bool:
        return self._finalized

    @property
    def current_batch_size(self) -> int:
        """The batch size given to ``start_batch()`` of the recorded step (0 otherwise)."""
        return self._batch_size if self._recording else 0

    @property
    def recorded_steps(self) -> int:
        """How many training steps were recorded and sent so far."""
        return self._recorded_steps

    @property
    def current_step(self) -> Step | None:
        """The open recorded step (``record.step.Step``), None when none is recorded."""
        return self._step

    def tracked_name(self, module: torch.nn.Module) -> str | None:
        """The full name ``module`` is tracked under, None when it is not tracked."""
        return self._modules.get(id(module))

    def subscribe(self, listener: StepListener):
        """Call ``listener``'s ``on_step_start``, ``on_step_end``, ``on_step_dropped`` and
        ``on_finalize`` (record/lifecycle.py); returns a function that unsubscribes it."""
        return self._lifecycle.subscribe(listener)

    def request_recording(self, steps: int) -> None:
        """Record the next ``steps`` training steps (of a known type of execution)
        whatever the decision maker says: the flight recorder after a trigger, a callback
        that wants the next steps in full. Requests add up."""
        if type(steps) is not int or steps < 0:
            raise ConfigurationError(
                f"request_recording(steps) needs a non-negative int, got {steps!r}")
        self._requested += steps

    def take_requested_recording(self) -> bool:
        """For a driver that decides steps itself (``watch()``): True, and one request
        fewer, when a step was requested by ``request_recording``."""
        if self._requested > 0:
            self._requested -= 1
            return True
        return False

    def _event(self) -> StepEvent:
        return StepEvent(self.training_step, self.type_of_execution, self._recording)

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
        if type(training_step) is not int or not -_INT64_MIN_ABS <= training_step <= _INT64_MAX:
            training_step = _as_step(training_step, "start_batch(training_step=...)")
        if self.training_step is not None and not training_step > self.training_step:
            raise TrainingStepError(
                f"training_step must strictly increase: got {training_step} after "
                f"{self.training_step}"
            )
        if type_of_execution is not None and type_of_execution not in self._valid_types:
            self._check_type_of_execution(type_of_execution)
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

    @staticmethod
    def _check_type_of_execution(type_of_execution) -> None:
        if not isinstance(type_of_execution, str) or not TYPE_OF_EXECUTION_PATTERN.match(
            type_of_execution
        ):
            raise ConfigurationError(
                f"type_of_execution {type_of_execution!r} may only contain letters, digits, "
                "'_' and '-'"
            )
        if type_of_execution == ANY_TYPE or type_of_execution.startswith("__"):
            raise ConfigurationError(
                f"type_of_execution {type_of_execution!r} is reserved for the GUI; choose another"
            )

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

    def register_tensor(
        self,
        tensor_name: str,
        tensor: torch.Tensor,
        index_of_batch_dimension: int | None = 0,
        is_input: bool = False,
        is_parameter: bool = False,
        is_target: bool = False,
        is_loss: bool = False,
        recording_type: str | None = None,
        record_per_batch_index: bool | None = None,
        node_name: str | None = None,
        role_within_node: str | None = None,
        is_initial_value: bool = False,
    ) -> None:
        """Register a tensor to record; call it right after the tensor is created."""
        if not self._recording:
            if self.comgra_is_active and self._stage == "idle":
                raise CallOrderError(
                    f"register_tensor({tensor_name!r}) called outside a batch: call "
                    "start_batch() first"
                )
            if self._flight is not None and self._stage != "idle":
                self._flight.observe_tensor(tensor_name, tensor, node_name,
                                            _flight_kind(is_input, is_target, is_loss,
                                                         is_parameter))
            return
        if record_per_batch_index and self.max_num_batch_size_to_record == 0:
            raise RegistrationError(
                f"register_tensor({tensor_name!r}, record_per_batch_index=True): this recorder "
                "was made with max_num_batch_size_to_record=0, so it records no samples, only "
                "batch statistics. Drop record_per_batch_index=True, or pass "
                "max_num_batch_size_to_record=N (N > 0 samples) or None (all) to ComgraRecorder"
            )
        args = check_registration(
            tensor_name, tensor, index_of_batch_dimension=index_of_batch_dimension,
            is_input=is_input, is_parameter=is_parameter, is_target=is_target, is_loss=is_loss,
            storage=recording_type, record_per_batch_index=record_per_batch_index,
            node_name=node_name, role_within_node=role_within_node,
            is_initial_value=is_initial_value, stage=self._stage, iteration=self.iteration,
            batch_size=self._batch_size, record_by_default=self._record_by_default)
        self._step.register(tensor_name, tensor, args)
        if self._flight is not None:
            self._flight.observe_tensor(tensor_name, tensor, node_name, _flight_kind(
                is_input, is_target, is_loss, is_parameter))

    def register_sample_ids(self, ids) -> None:
        """The ids of this step's samples (a list or a 1-D tensor), kept by the flight
        recorder on every step and written with a triggered window (docs/FLIGHT.md)."""
        if self._flight is not None and self._stage != "idle":
            self._flight.register_sample_ids(ids)

    # ----- connections --------------------------------------------------------------------

    def add_tensor_connection(self, src, sink) -> None:
        """Add a graph edge from ``src`` to ``sink`` where autograd has none."""
        if not self._recording:
            return
        self._step.connect(src, sink)

    def detach_while_keeping_connection(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor.detach()``, but still connected to ``tensor`` in the dependency graph."""
        if not isinstance(tensor, torch.Tensor):
            raise RegistrationError(
                "detach_while_keeping_connection() needs a torch.Tensor, got "
                f"{type(tensor).__name__}; pass the tensor whose detached copy you need"
            )
        res = tensor.detach()
        if self._recording:
            self._step.connect(tensor, res, "detach_while_keeping_connection")
        return res

    # ----- gradients and the end of an iteration / batch ---------------------------------

    def record_current_gradients(
        self, name_of_loss_group: str, set_gradients_to_zero_if_not_a_parameter: bool = False
    ) -> None:
        """Store the current ``.grad`` of every registered tensor under this loss group."""
        if self._flight is not None and self._stage != "idle":
            self._flight.observe_parameter_gradients(self._params)
        if not self._recording:
            return
        if not self._decided:
            raise RecordingDecisionError(
                "record_current_gradients() was called in a batch started with "
                "type_of_execution=None before decide_recording_of_batch(); decide first"
            )
        name = str(name_of_loss_group)
        if not name or ":" in name:
            raise ConfigurationError(
                f"name_of_loss_group {name!r} must be non-empty and contain no ':'"
            )
        step = self._step
        if name in step.gradient_groups:
            raise RegistrationError(
                f"gradients of loss group {name!r} were recorded already in step "
                f"{self.training_step}; use a different name for each call in one batch"
            )
        regs, grads = step.gradients(name)
        if not regs and not self._warned_no_gradients:
            self._warned_no_gradients = True
            log.warning(
                "comgra_like: record_current_gradients(%r) in step %s found no gradient on any "
                "registered tensor; call it after loss.backward() (this warning is shown once)",
                name, self.training_step)
        step.gradient_groups.add(name)
        self._capturer.capture(step, self._batch_size, regs, grads, gradient_type(name))
        if set_gradients_to_zero_if_not_a_parameter:
            for reg in regs:
                if reg.kind != PARAMETER:
                    reg.tensor.grad = None

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
            self._check_type_of_execution(type_of_execution)
        cats = None
        if self._recording and type_of_execution is not None and category_per_sample is not None:
            if isinstance(category_per_sample, (str, bytes)):
                raise RecordingDecisionError(
                    "category_per_sample must hold one category per sample (a list or a "
                    f"tensor), got the string {category_per_sample!r}"
                )
            try:
                cats = [str(c) for c in (category_per_sample.tolist() if hasattr(
                    category_per_sample, "tolist") else category_per_sample)]
            except TypeError:
                raise RecordingDecisionError(
                    "category_per_sample must hold one category per sample (a list or a "
                    f"tensor), got {type(category_per_sample).__name__}"
                ) from None
            if len(cats) != self._batch_size:
                raise RecordingDecisionError(
                    f"category_per_sample has {len(cats)} entries but the batch has "
                    f"{self._batch_size} samples"
                )
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
            self._sample_indices, self._sample_categories = _round_robin(cats, k)
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

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything sent to the writer so far (recorded steps, KPIs, notes,
        ...) is on disk, in shards a reader sees. ``timeout``: seconds to wait at most
        (a StorageError then). A failure of the writer is raised here as StorageError."""
        if not self.comgra_is_active or self._finalized:
            return
        self._submit_kpis()
        for collector in self._metrics:
            collector.flush()
        self._writer.flush(timeout)
        if self._flight is not None:  # a GPU's last step is judged now (may raise on purpose)
            self._flight.settle()

    def drain(self) -> None:
        """Block until the writer has taken in every recorded step sent so far (their
        shared memory is free again); the rows may still wait in the writer for their
        shard (``flush`` writes them). Benchmarks use it to measure the writer's work."""
        if not self.comgra_is_active or self._finalized:
            return
        self._writer.drain()

    @property
    def writer(self):
        """The connection to this recorder's writer (``comgra_like.transport.client``),
        None when the recorder is inactive. Its public part: ``mode`` ("process" or
        "thread"), ``pid`` (the writer process, None in a thread), ``flush_seconds``
        (settable: how old buffered rows may get before they are written, default 1),
        ``flush(timeout=None)``, ``drain()`` and ``close()`` (write everything and end the
        writer without finalizing: the trial stays uncompacted and "running")."""
        return getattr(self, "_writer", None)

    def finalize(self) -> None:
        """Write everything still buffered, compact the trial and mark it finished."""
        if not self.comgra_is_active or self._finalized:
            return
        if self._stage != "idle":
            log.warning(
                "comgra_like: finalize() was called inside step %s (finish_batch() was not "
                "called), so that step is not recorded; call finish_batch() before finalize()",
                self.training_step)
            self._drop_step()
            self._stage = Stage.IDLE
            if self._lifecycle:
                self._lifecycle.step_dropped(self._event())
        self._finalized = True
        if self._lifecycle:
            try:
                self._lifecycle.finalize()
            except BaseException:
                self._finalize_writer()
                raise
        flight, self._flight = self._flight, None
        try:
            if flight is not None:  # a GPU's last step is judged now (may raise on purpose)
                flight.settle()
        finally:
            self._finalize_writer()

    def _finalize_writer(self) -> None:
        for collector in self._metrics:  # the last step's metrics, then no more hooks
            collector.close()
        self._metrics = []
        # A script that keeps its finished recorders (to report on them, or in a global
        # until the next model replaces it) must not keep the models' tensors alive.
        self._params = []
        self._param_template = None
        self._submit_kpis()
        self._writer.close(finish=True)  # compacts the trial and marks it finished

    # ----- KPIs ---------------------------------------------------------------------------

    def record_kpi_in_graph(self, kpi_group, kpi_name, val, timepoint=None,
                            record_even_if_recording_is_inactive=False) -> None:
        """A point of a KPI curve (Graphs page), stored densely early and sparser later."""
        if not self.comgra_is_active:
            return
        if (self._flight is not None and self._stage != "idle"
                and isinstance(val, (numbers.Real, torch.Tensor)) and not isinstance(val, bool)):
            self._flight.observe_kpi(kpi_group, kpi_name, val)
        if not self._recording and not record_even_if_recording_is_inactive:
            return
        if self._finalized:
            raise CallOrderError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}) was called after finalize(): "
                "the trial is finished; record KPIs before finalize()"
            )
        if isinstance(val, torch.Tensor):
            if val.numel() != 1:
                raise ConfigurationError(
                    f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): the value must be a "
                    f"number or a one-element tensor, got shape {tuple(val.shape)}"
                )
            val = val.item()
        elif isinstance(val, (str, bytes)):
            # float() would parse it; comgra refuses it, and a number was meant
            raise ConfigurationError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): value {val!r} is not a "
                "number but a string; pass the number itself (a float, an int, a numpy scalar "
                "or a one-element tensor)"
            )
        elif getattr(val, "ndim", 0) and getattr(val, "size", 0) == 1:
            val = val.item()  # a one-element numpy array, like a one-element tensor
        try:
            val = float(val)
        except (TypeError, ValueError, OverflowError):
            raise ConfigurationError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): value {val!r} is not a number"
            ) from None
        if timepoint is None:
            if self.training_step is None:
                raise CallOrderError(
                    "record_kpi_in_graph() without a timepoint needs a training step: call "
                    "start_batch() first or pass timepoint="
                )
            timepoint = self.training_step
        elif type(timepoint) is not int or not -_INT64_MIN_ABS <= timepoint <= _INT64_MAX:
            timepoint = _as_step(timepoint, f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}, "
                                            "timepoint=...)")
        args = (str(kpi_group), str(kpi_name), timepoint, val)
        if self._recording and not self._decided:
            self._step.pending_kpis.append(args)
        else:
            self._offer_kpi(*args)

    def _offer_kpi(self, group, name, timepoint, val) -> None:
        self._kpis.offer(group, name, self.type_of_execution or DEFAULT_TYPE_OF_EXECUTION,
                         timepoint, val)

    def _submit_kpis(self) -> None:
        if self._kpis.rows:
            self._writer.submit_kpis(self._kpis.take())

    # ----- graph structures and sending a recorded step -----------------------------------

    def _write_graph(self, digest: str, structure: dict) -> None:
        """A graph structure seen for the first time in this trial: the writer stores it."""
        self._writer.submit_graph(digest, structure)

    def _send_step(self) -> None:
        """Copy the forward values and the updated parameters, and send the step.

        Forward values are copied now (training code may reuse its buffers), gradients were
        copied when recorded, parameters at start_batch; the parameters after the
        optimizer step are copied too, and the writer subtracts. Statistics, singular
        values and Arrow tables are the writer process's work.
        """
        step = self._step
        regs = [reg for reg in step.regs if reg.alias_of is None]
        self._capturer.capture(step, self._batch_size, regs,
                               [reg.tensor if reg.values is None else reg.values for reg in regs],
                               [UPDATE if reg.param_index >= 0 else FORWARD for reg in regs])
        body = self._capturer.message(step, self.type_of_execution, self._sample_indices,
                                      self._sample_categories, self._batch_size)
        slot, step.slot = step.slot, None
        self._writer.submit_batch(slot, body)
        if self._kpis.rows:
            self._submit_kpis()


def _flight_kind(is_input: bool, is_target: bool, is_loss: bool, is_parameter: bool) -> str:
    """A registered tensor's kind, as the flight recorder names it."""
    return ("loss" if is_loss else "input" if is_input else "target" if is_target
            else "parameter" if is_parameter else "calculated")


def _round_robin(categories: list[str], k: int) -> tuple[list[int], list[str]]:
    """Pick up to ``k`` sample indices, cycling over the categories in order of appearance."""
    queues: dict[str, list[int]] = {}
    for i, c in enumerate(categories):
        queues.setdefault(c, []).append(i)
    picked: list[int] = []
    pos = dict.fromkeys(queues, 0)
    while len(picked) < k and any(pos[c] < len(q) for c, q in queues.items()):
        for c, q in queues.items():
            if pos[c] < len(q) and len(picked) < k:
                picked.append(q[pos[c]])
                pos[c] += 1
    order = sorted(picked)
    return order, [categories[i] for i in order]


def _prepare_trial_folder(trial_path: Path) -> TrialLock:
    """Lock the trial and make room for its folder (the writer creates it): delete an
    earlier recording of the same trial. Returns the lock (docs/FORMAT.md).

    A trial another recorder holds is refused before anything is deleted. Replacing
    deletes nothing but that trial's own folder: the resolved path must sit directly in
    the group's ``trials`` folder, and a symbolic link is refused rather than followed.
    Folders that cannot be made give a StorageError that names them.
    """
    if is_object_store(trial_path):  # s3://: no folders, no lock file (format/trial.py)
        replace_object_trial(trial_path)
        return TrialLock(None, trial_lock(trial_path.parent.parent, trial_path.name))
    trials = trial_path.parent
    try:
        trials.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot create the folder {trials} for the recording ({type(e).__name__}: "
            f"{e.strerror or e}); check that comgra_root_path is a folder (not a file) you can "
            "write to"
        ) from None
    lock = TrialLock.take(trial_path.parent.parent, trial_path.name)
    try:
        if trial_path.is_symlink():
            raise StorageError(
                f"{trial_path} is a symbolic link; a recording replaces its trial folder and "
                "will not delete what a link points to. Remove the link or choose another "
                "trial_id"
            )
        if trial_path.exists():
            if trial_path.resolve().parent != trials.resolve() or not trial_path.is_dir():
                raise StorageError(
                    f"{trial_path} exists and is not a trial folder inside {trials}; remove it "
                    "or choose another trial_id"
                )
            log.warning("comgra_like: replacing the existing recording %s", trial_path)
            try:
                shutil.rmtree(trial_path)
            except OSError as e:
                raise StorageError(
                    f"cannot delete the earlier recording {trial_path} to replace it ({e}); "
                    "delete it by hand or choose another trial_id"
                ) from None
    except BaseException:
        lock.release()
        raise
    return lock


def _prepare_rank_files(trial_path: Path, rank: int, lead: bool,
                        recording: tuple[int, ...]) -> TrialLock:
    """The ``_prepare_trial_folder`` of one rank of a distributed job: lock the trial's
    rank and delete what an earlier recording of the same trial left of this rank.

    No rank deletes what another recording rank writes, so the ranks need not wait for
    each other: each deletes its own shards; the lead (the lowest recording rank) also
    deletes the files it writes alone (trial.json, modules.json, watch.json) and the
    shards of ranks that do not record this time. Graph files are content-addressed
    (every rank would write the same bytes under the same name) and stay. On an object
    store there is no lock: one job per trial is the user's part there.
    """
    trials = trial_path.parent
    if is_object_store(trial_path):
        lock = TrialLock(None, trial_lock(trials.parent, trial_path.name, rank))
    else:
        try:
            trials.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(
                f"cannot create the folder {trials} for the recording ({type(e).__name__}: "
                f"{e.strerror or e}); check that comgra_root_path is a folder you can write to"
            ) from None
        lock = TrialLock.take(trials.parent, trial_path.name, rank)
    try:
        if not is_object_store(trial_path) and (
                trial_path.is_symlink() or (trial_path.exists() and not trial_path.is_dir())):
            raise StorageError(
                f"{trial_path} is a symbolic link or no folder; a recording replaces the "
                "files of its trial there. Remove it or choose another trial_id")
        files = files_for(trial_path)
        layout = TrialLayout(trial_path)
        stale = []
        for table in (*TABLES, NOTES_DIR):
            folder = layout.table(table)
            for name in files.list(folder):
                owner = shard_rank(name)
                if owner == rank or (lead and owner is not None and owner not in recording):
                    stale.append(folder / name)
        if lead:
            stale += [p for p in (layout.trial_json, layout.modules_json, layout.watch_json,
                                  layout.legacy_notes) if files.exists(p)]
        if stale:
            log.warning("comgra_like: rank %d replaces its files of the existing recording %s",
                        rank, trial_path)
        for path in stale:
            try:
                files.remove(path)
            except OSError as e:
                raise StorageError(
                    f"cannot delete {path} of an earlier recording to replace it ({e}); "
                    "delete the trial folder by hand or choose another trial_id") from None
    except BaseException:
        lock.release()
        raise
    return lock


_INT64_MAX = 2**63 - 1
_INT64_MIN_ABS = 2**63


def _as_step(value, what: str) -> int:
    """An int64 training step or timepoint; a ConfigurationError that names ``value`` else."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
        if -_INT64_MIN_ABS <= value <= _INT64_MAX:
            return value
        raise ConfigurationError(
            f"{what}: {value} does not fit into a 64-bit integer; count steps from 0"
        )
    raise ConfigurationError(
        f"{what}: expected an integer, got {value!r} ({type(value).__name__}); pass the "
        "number of the training step as an int"
    )
