"""ComgraRecorder: the object a training loop calls to record its internals.

Same class, method and parameter names as comgra 0.11.5, so that a script written for
comgra runs with only its imports changed. On steps that are not recorded every call
returns after a flag check. On recorded steps the recorder copies the parameters (at
``start_batch``), the gradients (at ``record_current_gradients``) and the registered
tensors (at ``finish_batch``) into shared memory and sends one message to the writer
process (``store/worker.py``), which computes the statistics and writes parquet while
training goes on.
"""

from __future__ import annotations

import itertools
import json
import logging
import numbers
import platform
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import __version__
from ._graph import DependencyWalker, canonical_hash, find_cycle
from ._kpi import KpiThinner
from .errors import (
    CallOrderError,
    ConfigurationError,
    GraphError,
    RecordingDecisionError,
    RegistrationError,
    StorageError,
    TrainingStepError,
)
from .objects import DecisionMakerForRecordings
from .store.client import Slot, WriterClient
from .store.compaction import compact_trial
from .store.schema import (
    MAX_TRIAL_ID_LENGTH,
    SCHEMA_VERSION,
    TRIAL_ID_PATTERN,
    TYPE_OF_EXECUTION_PATTERN,
)
from .store.writer import append_jsonl, write_json

log = logging.getLogger("comgra_like")

_FORWARD = "forward"
_UPDATE = "update"
_MAX_SIG_IDS = 4096  # registration signatures kept as ids before the table starts over


@dataclass(eq=False)
class _Registration:
    rid: int
    tensor_name: str
    node: str
    role: str
    kind: str
    iteration: int  # -1: belongs to the whole step (parameters, initial values)
    batch_dim: int | None
    per_sample: bool
    with_values: bool
    tensor: torch.Tensor
    alias_of: int | None = None
    param_index: int = -1
    # A small int for everything about it that the graph structure and the capture
    # layout show (name, node, role, kind, shape, flags, dtype): see ComgraRecorder._sig_ids
    sig_id: int = -1


@dataclass(eq=False)
class _Parameter:
    full_name: str
    tensor: torch.nn.Parameter
    node: str
    role: str
    module_group: str | None


@dataclass(eq=False)
class _CapturePlan:
    """Where the tensors of one capture call go in a slot (see ``_capture``)."""

    order: list[int]  # tensor index per view (sorted by size)
    views: list[torch.Tensor]
    refs: list[int]  # segment, offset per view
    layout: list[tuple]  # the writer's description per view
    fill: list[int]  # the slot's fill after this call
    needed: int
    complex: bool
    pid: int  # unique per plan, never reused (a key that keeps no memory alive)


@dataclass(eq=False)
class _Batch:
    """Everything one recorded (or undecided) batch accumulates; dropped at finish."""

    regs: list[_Registration] = field(default_factory=list)
    by_iteration: dict[int, list[_Registration]] = field(default_factory=dict)
    by_name: dict[tuple[str, int], _Registration] = field(default_factory=dict)
    by_node_role: dict[tuple[str, str, int], _Registration] = field(default_factory=dict)
    owner_fn: dict[tuple[object, int], int] = field(default_factory=dict)
    owner_leaf: dict[int, int] = field(default_factory=dict)
    by_tensor: dict[int, _Registration] = field(default_factory=dict)
    conn_fn: dict[object, set[int]] = field(default_factory=dict)
    conn_leaf: dict[int, set[int]] = field(default_factory=dict)
    conn_reg: dict[int, set[int]] = field(default_factory=dict)
    keep_alive: list[torch.Tensor] = field(default_factory=list)
    slot: Slot | None = None  # shared memory the captures are copied into
    plans: list[_CapturePlan] = field(default_factory=list)  # the captures, in order
    gradient_groups: set[str] = field(default_factory=set)
    # rid -> (the .grad tensor, its _version) when last seen: a gradient that is still the
    # same is not new (record_current_gradients before backward() would store old ones)
    grad_marks: dict[int, tuple] = field(default_factory=dict)
    # Leaves that register_tensor() made require a gradient (rid -> name), and the rids
    # the iterations' graphs found a dependency on: see _warn_unused_leaves
    made_grad: dict[int, str] = field(default_factory=dict)
    depended_on: set[int] = field(default_factory=set)
    graphs: dict[int, str] = field(default_factory=dict)  # iteration -> graph hash
    pending_kpis: list[tuple] = field(default_factory=list)
    walker: DependencyWalker | None = None


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
    ):
        self.comgra_is_active = bool(comgra_is_active)
        self.training_step: int | None = None
        self.type_of_execution: str | None = None
        self.iteration: int | None = None
        self._stage = "idle"
        self._recording = False
        self._finalized = False
        self._decision_called = False  # decide_recording_of_batch() in this step
        self._modules: dict[int, str] = {}  # id(module) -> full name
        if not self.comgra_is_active:
            return
        if not isinstance(decision_maker_for_recordings, DecisionMakerForRecordings):
            raise ConfigurationError(
                "decision_maker_for_recordings must be a decision maker from comgra_like.objects "
                "(e.g. DecisionMakerForRecordingsFrequencyPerType(10)), got "
                f"{decision_maker_for_recordings!r}"
            )
        if max_num_batch_size_to_record is not None and (
            not isinstance(max_num_batch_size_to_record, int) or max_num_batch_size_to_record < 1
        ):
            raise ConfigurationError(
                "max_num_batch_size_to_record must be None (all samples) or a positive integer, "
                f"got {max_num_batch_size_to_record!r}"
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
        self.decision_maker = decision_maker_for_recordings
        self.max_num_batch_size_to_record = max_num_batch_size_to_record
        self.prefixes_visual = list(prefixes_for_grouping_module_parameters_visually or [])
        self.prefixes_nodes = list(prefixes_for_grouping_module_parameters_in_nodes or [])
        self.calculate_svd = bool(calculate_svd_and_other_expensive_operations_of_parameters)
        self.trial_id = trial_id
        self.group_path = Path(comgra_root_path) / group
        self.trial_path = self.group_path / "trials" / trial_id
        _prepare_trial_folder(self.trial_path)
        self._created = time.time()
        self._settings = {
            "max_num_batch_size_to_record": max_num_batch_size_to_record,
            "prefixes_for_grouping_module_parameters_visually": self.prefixes_visual,
            "prefixes_for_grouping_module_parameters_in_nodes": self.prefixes_nodes,
            "calculate_svd_and_other_expensive_operations_of_parameters": self.calculate_svd,
            "decision_maker_for_recordings": repr(decision_maker_for_recordings),
        }
        self._write_trial_json("running")
        self._writer = WriterClient(self.trial_path, trial_id, self.calculate_svd)
        self._module_tree: list[dict] = []
        self._params: list[_Parameter] = []
        self._known_types: set[str] = set()
        self._valid_types: set[str] = set()  # types of execution that passed the check
        self._param_template: tuple[list, _Batch] | None = None  # see _new_batch
        self._msg_parts: dict[tuple, tuple[int, str]] = {}  # see _write_batch
        self._json_parts: dict[tuple, str] = {}  # see _write_batch
        self._plan_ids = itertools.count()
        self._all_types_known = False
        self._record_by_default = True
        self._batch_size = 0
        self._decided = True
        self._sample_indices: list[int] = []
        self._sample_categories: list[str] = []
        self._batch: _Batch | None = None
        self._kpi_thinners: dict[tuple[str, str, str], KpiThinner] = {}
        self._kpi_rows: list[tuple] = []
        self._kpi_last_submit = time.monotonic()
        self._seen_graphs: set[str] = set()
        self._graph_keys: dict[tuple, str] = {}
        # Registration signatures as small ints for the cache keys of every recorded step
        # (a key of ints hashes in a fraction of the time of one of nested tuples). Ids
        # are never reused, so a key made before the table was emptied cannot match a
        # different signature afterwards.
        self._sig_ids: dict[tuple, int] = {}
        self._sig_counter = itertools.count()
        self._recorded_steps = 0
        self._warned_no_gradients = False
        self._warned_unused: set[str] = set()

    # ----- metadata ---------------------------------------------------------------------

    def _write_trial_json(self, status: str) -> None:
        write_json(
            self.trial_path / "trial.json",
            {
                "schema_version": SCHEMA_VERSION,
                "trial_id": self.trial_id,
                "group": self.group_path.name,
                "created": self._created,
                "status": status,
                "settings": self._settings,
                "versions": {
                    "comgra_like": __version__,
                    "torch": torch.__version__,
                    "python": platform.python_version(),
                },
            },
        )

    def track_module(self, module_name: str, module: torch.nn.Module) -> None:
        """Track a module: its parameters are recorded on every recorded step."""
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
                self._params.append(_Parameter(
                    full_name=p_full, tensor=p, node=node or p_full, role=p_full,
                    module_group=visual,
                ))
            parent = full.rsplit(".", 1)[0] if "." in full else None
            total = sum(int(p.numel()) for p in sub.parameters())
            self._module_tree.append({"name": full, "parent": parent, "parameters": params,
                                      "num_parameters_total": total})
        write_json(self.trial_path / "modules.json", {"modules": self._module_tree})

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
        append_jsonl(self.trial_path / "notes.jsonl", {"text": str(note), "wall_time": time.time(),
                                                      "training_step": self.training_step})

    # ----- the batch ----------------------------------------------------------------------

    def recording_is_active(self) -> bool:
        """Whether the current training step is being recorded."""
        return self._recording

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
        self._stage = "batch"
        self._decision_called = False
        self._recording = record
        if not record:
            return
        self._batch_size = current_batch_size
        self._record_by_default = bool(record_all_tensors_per_batch_index_by_default)
        self._decided = type_of_execution is not None
        k = current_batch_size if self.max_num_batch_size_to_record is None else min(
            current_batch_size, self.max_num_batch_size_to_record)
        self._sample_indices = list(range(k))
        self._sample_categories = [""] * k
        try:
            batch = self._batch = self._new_batch()
            batch.walker = self._make_walker(batch)
            batch.slot = self._writer.acquire()
            # The optimizer updates in place: the values before this step are kept now.
            self._capture(batch.regs, [p.tensor for p in self._params], _FORWARD)
            marks = batch.grad_marks
            for reg, p in zip(batch.regs, self._params):
                grad = p.tensor.grad
                if grad is not None:
                    marks[reg.rid] = (grad, grad._version)
        except BaseException:
            # No slot kept, no step left open: the loop may call start_batch() again.
            self._drop_batch()
            self._stage = "idle"
            self.training_step = previous_step
            raise

    def _new_batch(self) -> _Batch:
        """A batch that holds the parameters' registrations (they come first, in order).

        They are the same on every recorded step, so they are built once and copied; a
        parameter whose shape or dtype changed (``.data`` replaced) or more parameters
        (a module tracked after a batch that was not recorded) build them anew.
        """
        key = [(p.tensor.shape, p.tensor.dtype) for p in self._params]
        template = self._param_template
        if template is None or template[0] != key:
            self._batch = model = _Batch()
            for i, p in enumerate(self._params):
                self._add_registration(p.full_name, p.tensor, p.node, p.role, "parameter", -1,
                                       None, False, False, None, i, p.tensor.grad_fn)
            template = self._param_template = (key, model)
        model = template[1]
        batch = _Batch(
            regs=list(model.regs), by_name=dict(model.by_name),
            by_node_role=dict(model.by_node_role), by_tensor=dict(model.by_tensor),
            owner_leaf=dict(model.owner_leaf), owner_fn=dict(model.owner_fn),
        )
        if model.regs:
            batch.by_iteration[-1] = list(model.regs)
        return batch

    @staticmethod
    def _check_type_of_execution(type_of_execution) -> None:
        if not isinstance(type_of_execution, str) or not TYPE_OF_EXECUTION_PATTERN.match(
            type_of_execution
        ):
            raise ConfigurationError(
                f"type_of_execution {type_of_execution!r} may only contain letters, digits, "
                "'_' and '-'"
            )
        if type_of_execution == "any" or type_of_execution.startswith("__"):
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
        self._stage = "iteration"
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
            return
        if not isinstance(tensor, torch.Tensor):
            raise RegistrationError(
                f"register_tensor({tensor_name!r}, ...) needs a torch.Tensor, got "
                f"{type(tensor).__name__}"
            )
        if not isinstance(tensor_name, str) or not tensor_name:
            raise RegistrationError(f"tensor_name must be a non-empty string, got {tensor_name!r}")
        if sum(map(bool, (is_input, is_parameter, is_target, is_loss))) > 1:
            raise RegistrationError(
                f"{tensor_name!r}: at most one of is_input, is_parameter, is_target and is_loss "
                "may be True"
            )
        if is_initial_value:
            if self._stage != "batch" or self.iteration is not None:
                raise CallOrderError(
                    f"{tensor_name!r}: is_initial_value=True registers a state before the first "
                    "iteration: call it after start_batch() and before start_iteration()"
                )
            iteration = -1
        elif is_parameter:
            iteration = -1
        else:
            if self._stage != "iteration":
                raise CallOrderError(
                    f"register_tensor({tensor_name!r}) must be called between start_iteration() "
                    "and finish_iteration() (or pass is_initial_value=True before the first "
                    "iteration)"
                )
            iteration = self.iteration
        if recording_type not in (None, "neuron", "kpis"):
            raise RegistrationError(
                f"{tensor_name!r}: recording_type must be 'neuron', 'kpis' or None, got "
                f"{recording_type!r}"
            )
        if tensor.is_meta:
            raise RegistrationError(
                f"{tensor_name!r} is on the meta device and has no values to record; register "
                "a tensor with data (e.g. after model.to_empty(device='cpu') and initialising it)"
            )
        if not (tensor.is_floating_point() or tensor.is_complex()):
            raise RegistrationError(
                f"{tensor_name!r} has dtype {tensor.dtype}, which cannot require a gradient. "
                "Register a float copy instead (tensor.float()) and connect it with "
                "add_tensor_connection()"
            )
        if is_loss:
            if tensor.numel() != 1:
                raise RegistrationError(
                    f"loss {tensor_name!r} must be a scalar (0-dim) tensor, got shape "
                    f"{tuple(tensor.shape)}; reduce it (e.g. .mean()) or register it without "
                    "is_loss=True"
                )
            batch_dim = None
        elif is_parameter:
            batch_dim = None
        else:
            batch_dim = index_of_batch_dimension
        if batch_dim is not None:
            if not isinstance(batch_dim, int) or not (0 <= batch_dim < tensor.dim()):
                raise RegistrationError(
                    f"{tensor_name!r} has shape {tuple(tensor.shape)} and no dimension "
                    f"{batch_dim}; pass index_of_batch_dimension=None for a tensor without a "
                    "batch dimension"
                )
            if tensor.shape[batch_dim] != self._batch_size:
                raise RegistrationError(
                    f"{tensor_name!r} has size {tensor.shape[batch_dim]} in its batch dimension "
                    f"{batch_dim} (shape {tuple(tensor.shape)}), but start_batch() declared a "
                    f"batch size of {self._batch_size}"
                )
        per_sample = self._record_by_default if record_per_batch_index is None else bool(
            record_per_batch_index)
        if batch_dim is None:
            if record_per_batch_index:
                raise RegistrationError(
                    f"{tensor_name!r} has no batch dimension, so record_per_batch_index=True is "
                    "impossible"
                )
            per_sample = False
        kind = ("input" if is_input else "parameter" if is_parameter else "target" if is_target
                else "loss" if is_loss else "calculated")
        node = node_name if node_name is not None else tensor_name
        role = role_within_node if role_within_node is not None else tensor_name
        with_values = recording_type != "kpis" and not is_parameter
        batch = self._batch
        alias = batch.by_tensor.get(id(tensor))
        if alias is not None and alias.tensor is not tensor:
            alias = None
        # Booked first (it refuses duplicates), so that a refused registration leaves the
        # tensor as it was. Making a leaf require a gradient leaves its grad_fn None.
        grad_fn = tensor.grad_fn
        reg = self._add_registration(tensor_name, tensor, node, role, kind, iteration, batch_dim,
                                     per_sample, with_values,
                                     alias.rid if alias is not None else None, -1, grad_fn)
        if grad_fn is not None:
            tensor.retain_grad()
        elif not tensor.requires_grad and not tensor.is_inference():
            # (A tensor made under torch.inference_mode(), e.g. in a validation loop, can
            # never require a gradient: it is recorded with its values, without edges.)
            tensor.requires_grad_(True)
            if kind != "parameter" and alias is None:
                batch.made_grad[reg.rid] = tensor_name

    def _add_registration(self, tensor_name, tensor, node, role, kind, iteration, batch_dim,
                          per_sample, with_values, alias_of, param_index,
                          grad_fn) -> _Registration:
        """Book a registration (``grad_fn``: the tensor's, read once by the caller)."""
        batch = self._batch
        if (tensor_name, iteration) in batch.by_name:
            raise RegistrationError(
                f"a tensor named {tensor_name!r} is registered already in iteration {iteration} "
                f"of step {self.training_step}; give each tensor a unique name per iteration"
            )
        if (node, role, iteration) in batch.by_node_role:
            raise RegistrationError(
                f"node {node!r} already has a tensor with role {role!r} in iteration {iteration} "
                f"of step {self.training_step} (while registering {tensor_name!r}); pass a "
                "different role_within_node"
            )
        reg = _Registration(len(batch.regs), tensor_name, node, role, kind, iteration, batch_dim,
                            per_sample, with_values, tensor, alias_of, param_index)
        shape = list(tensor.shape)
        if batch_dim is not None:
            shape[batch_dim] = -1
        sig = (tensor_name, node, role, kind, iteration, tuple(shape), alias_of, param_index,
               per_sample, with_values, batch_dim, tensor.dtype)
        sig_ids = self._sig_ids
        sig_id = sig_ids.get(sig)
        if sig_id is None:
            if len(sig_ids) >= _MAX_SIG_IDS:  # names or shapes that change every step
                sig_ids.clear()
            sig_id = sig_ids[sig] = next(self._sig_counter)
        reg.sig_id = sig_id
        batch.regs.append(reg)
        batch.by_iteration.setdefault(iteration, []).append(reg)
        batch.by_name[(tensor_name, iteration)] = reg
        batch.by_node_role[(node, role, iteration)] = reg
        if alias_of is None:
            batch.by_tensor[id(tensor)] = reg
            if grad_fn is not None:
                batch.owner_fn.setdefault((grad_fn, tensor.output_nr), reg.rid)
            else:
                batch.owner_leaf.setdefault(id(tensor), reg.rid)
        return reg

    # ----- connections --------------------------------------------------------------------

    def _resolve_source(self, src, what: str) -> _Registration:
        batch = self._batch
        if isinstance(src, str):
            candidates = [r for (name, _), r in batch.by_name.items() if name == src]
            if not candidates:
                raise RegistrationError(
                    f"{what}: no tensor named {src!r} is registered in this batch; register it "
                    "before connecting it"
                )
            return max(candidates, key=lambda r: r.iteration)
        if isinstance(src, torch.Tensor):
            reg = batch.by_tensor.get(id(src))
            if reg is None or reg.tensor is not src:
                raise RegistrationError(
                    f"{what}: the source tensor (shape {tuple(src.shape)}) is not registered; "
                    "register it first or pass its name"
                )
            return reg
        raise RegistrationError(f"{what}: expected a tensor or a tensor name, got {type(src).__name__}")

    def add_tensor_connection(self, src, sink) -> None:
        """Add a graph edge from ``src`` to ``sink`` where autograd has none."""
        if not self._recording:
            return
        what = "add_tensor_connection"
        source = self._resolve_source(src, what)
        batch = self._batch
        if isinstance(sink, str):
            target = self._resolve_source(sink, what)
            batch.conn_reg.setdefault(target.rid, set()).add(source.rid)
            return
        if not isinstance(sink, torch.Tensor):
            raise RegistrationError(f"{what}: sink must be a tensor or a registered tensor's name")
        target = batch.by_tensor.get(id(sink))
        if target is not None and target.tensor is sink:
            batch.conn_reg.setdefault(target.rid, set()).add(source.rid)
        elif sink.grad_fn is not None:
            batch.conn_fn.setdefault(sink.grad_fn, set()).add(source.rid)
            batch.keep_alive.append(sink)
        else:
            if not sink.requires_grad and (sink.is_floating_point() or sink.is_complex()):
                sink.requires_grad_(True)
            batch.conn_leaf.setdefault(id(sink), set()).add(source.rid)
            batch.keep_alive.append(sink)

    def detach_while_keeping_connection(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor.detach()``, but still connected to ``tensor`` in the dependency graph."""
        if not isinstance(tensor, torch.Tensor):
            raise RegistrationError(
                "detach_while_keeping_connection() needs a torch.Tensor, got "
                f"{type(tensor).__name__}; pass the tensor whose detached copy you need"
            )
        res = tensor.detach()
        if self._recording:
            self.add_tensor_connection(tensor, res)
        return res

    # ----- gradients and the end of an iteration / batch ---------------------------------

    def record_current_gradients(
        self, name_of_loss_group: str, set_gradients_to_zero_if_not_a_parameter: bool = False
    ) -> None:
        """Store the current ``.grad`` of every registered tensor under this loss group."""
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
        batch = self._batch
        if name in batch.gradient_groups:
            raise RegistrationError(
                f"gradients of loss group {name!r} were recorded already in step "
                f"{self.training_step}; use a different name for each call in one batch"
            )
        regs, grads = [], []
        marks = batch.grad_marks
        fresh = False
        for reg in batch.regs:
            if reg.alias_of is not None:
                continue
            grad = reg.tensor.grad
            if grad is not None:
                regs.append(reg)
                grads.append(grad)
                if not fresh:
                    mark = marks.get(reg.rid)
                    fresh = mark is None or mark[0] is not grad or mark[1] != grad._version
        if regs and not fresh:
            raise CallOrderError(
                f"record_current_gradients({name!r}) in step {self.training_step}: no "
                "gradient changed since start_batch() or the last record_current_gradients(), "
                "so these are old gradients. Call it after loss.backward()"
            )
        if not regs and not self._warned_no_gradients:
            self._warned_no_gradients = True
            log.warning(
                "comgra_like: record_current_gradients(%r) in step %s found no gradient on any "
                "registered tensor; call it after loss.backward() (this warning is shown once)",
                name, self.training_step)
        for reg, grad in zip(regs, grads):
            marks[reg.rid] = (grad, grad._version)
        batch.gradient_groups.add(name)
        self._capture(regs, grads, f"gradient:{name}")
        if set_gradients_to_zero_if_not_a_parameter:
            for reg in regs:
                if reg.kind != "parameter":
                    reg.tensor.grad = None

    def finish_iteration(self) -> None:
        """End the current iteration; its dependency graph is extracted now."""
        if not self.comgra_is_active:
            return
        if self._stage != "iteration":
            raise CallOrderError(
                f"finish_iteration() without a matching start_iteration() (stage {self._stage!r})"
            )
        self._stage = "batch"
        if self._recording:
            self._batch.graphs[self.iteration] = self._extract_graph(self.iteration)

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
            self._drop_batch()
            return
        self.type_of_execution = type_of_execution
        self._decided = True
        if not self.decision_maker.is_record_on_this_step(self.training_step, type_of_execution):
            self._drop_batch()
            return
        if cats is not None:
            k = len(self._sample_indices)
            self._sample_indices, self._sample_categories = _round_robin(cats, k)
        for args in self._batch.pending_kpis:
            self._offer_kpi(*args)
        self._batch.pending_kpis.clear()

    def _drop_batch(self) -> None:
        """Forget the current batch; its slot goes back unless it was sent to the writer."""
        batch = self._batch
        if batch is not None and batch.slot is not None:
            self._writer.release(batch.slot)
            batch.slot = None
        self._batch = None
        self._recording = False

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
        self._stage = "idle"
        if self._recording and not self._decided:
            # The step ends unrecorded; its slot goes back, so a loop that catches this
            # error can go on.
            self._drop_batch()
            raise RecordingDecisionError(
                f"step {self.training_step} was started with type_of_execution=None but "
                "decide_recording_of_batch() was never called, so it is not recorded; call "
                "decide_recording_of_batch() before finish_batch()"
            )
        if self._recording:
            if self._batch.made_grad:
                self._warn_unused_leaves(self._batch)
            try:
                self._write_batch()
            finally:
                self._drop_batch()
            self._recorded_steps += 1
            self._known_types.add(self.type_of_execution)
            self.decision_maker.mark_recorded(self.training_step, self.type_of_execution)
        self._recording = False
        if self._kpi_rows and time.monotonic() - self._kpi_last_submit > 1.0:
            self._submit_kpis()

    def _warn_unused_leaves(self, batch: _Batch) -> None:
        """Warn (once per name) about registered leaves that nothing registered uses.

        A tensor that did not require a gradient when it was used leaves no trace in the
        autograd graph, so registering it afterwards cannot connect it: its edges are lost.
        """
        for rid, name in batch.made_grad.items():
            if rid not in batch.depended_on and name not in self._warned_unused:
                self._warned_unused.add(name)
                log.warning(
                    "comgra_like: step %s: nothing registered depends on %r in the dependency "
                    "graph. If it was used before register_tensor(%r, ...) was called, its "
                    "edges are lost: register a tensor right after creating it, before using "
                    "it (this warning is shown once per name)",
                    self.training_step, name, name)

    def finalize(self) -> None:
        """Write everything still buffered, compact the trial and mark it finished."""
        if not self.comgra_is_active or self._finalized:
            return
        if self._stage != "idle":
            log.warning(
                "comgra_like: finalize() was called inside step %s (finish_batch() was not "
                "called), so that step is not recorded; call finish_batch() before finalize()",
                self.training_step)
            self._drop_batch()
            self._stage = "idle"
        self._finalized = True
        self._submit_kpis()
        self._writer.close()
        compact_trial(self.trial_path)
        self._write_trial_json("finished")

    # ----- KPIs ---------------------------------------------------------------------------

    def record_kpi_in_graph(self, kpi_group, kpi_name, val, timepoint=None,
                            record_even_if_recording_is_inactive=False) -> None:
        """A point of a KPI curve (Graphs page), stored densely early and sparser later."""
        if not self.comgra_is_active:
            return
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
            self._batch.pending_kpis.append(args)
        else:
            self._offer_kpi(*args)

    def _offer_kpi(self, group, name, timepoint, val) -> None:
        toe = self.type_of_execution or "main_execution_type"
        key = (group, toe, name)
        thinner = self._kpi_thinners.get(key)
        if thinner is None:
            thinner = self._kpi_thinners[key] = KpiThinner()
        if thinner.offer(timepoint, val, name=f"{group}/{name}"):
            self._kpi_rows.append((group, name, toe, timepoint, val, time.time()))

    def _submit_kpis(self) -> None:
        if not self._kpi_rows:
            return
        rows, self._kpi_rows = self._kpi_rows, []
        self._kpi_last_submit = time.monotonic()
        self._writer.submit_kpis(rows)

    # ----- graph extraction ---------------------------------------------------------------

    def _make_walker(self, batch: _Batch) -> DependencyWalker:
        def describe_leaf(fn):
            variable = getattr(fn, "variable", None)
            if variable is None:
                return None
            return (
                f"step {self.training_step}, iteration {self.iteration}: a tensor of shape "
                f"{tuple(variable.shape)} ({variable.dtype}) that requires a gradient is used "
                "by registered tensors but is not registered itself. If it is a parameter, "
                "call track_module() on its module; otherwise call register_tensor() on it "
                "right after creating it (or detach it)."
            )

        return DependencyWalker(batch.owner_fn, batch.owner_leaf, batch.conn_fn, batch.conn_leaf,
                                describe_leaf)

    def _extract_graph(self, iteration: int) -> str:
        batch = self._batch
        regs = batch.regs
        current = batch.by_iteration.get(iteration, [])
        nodes: dict[str, dict] = {}
        edges: set[tuple[str, str, str, str]] = set()

        def node_id(r: _Registration) -> str:
            if r.iteration == iteration or r.kind == "parameter":
                return r.node
            return f"{r.node}@{'initial' if r.iteration < 0 else r.iteration}"

        def add_node(r: _Registration) -> str:
            nid = node_id(r)
            entry = nodes.get(nid)
            if entry is None:
                if r.kind == "parameter":
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
            if r.kind == "parameter":
                entry["module_group"] = self._params[r.param_index].module_group
            return nid

        walker = batch.walker
        deps_of = []
        for r in current:
            if r.alias_of is not None:
                deps = {r.alias_of}
            else:
                fn = r.tensor.grad_fn
                deps = set(walker.dependencies_of_node(fn)) if fn is not None else set()
                if fn is None:
                    deps |= batch.conn_leaf.get(id(r.tensor), set())
            deps |= batch.conn_reg.get(r.rid, set())
            deps.discard(r.rid)
            deps_of.append(deps)
        if batch.made_grad:
            batch.depended_on.update(*deps_of)
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
        if self.prefixes_nodes:
            # Merged parameter nodes show all their roles, not only those used here.
            for r in batch.by_iteration.get(-1, []):
                if r.kind == "parameter" and r.node in nodes:
                    add_node(r)
        # Autograd graphs are acyclic: only hand-made connections can close a loop.
        manual = batch.conn_reg or batch.conn_fn or batch.conn_leaf
        cycle = find_cycle(nodes, [(a, b) for a, b, _, _ in edges]) if manual else None
        if cycle:
            raise GraphError(
                f"step {self.training_step}, iteration {iteration}: the dependency graph has a "
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
            path = self.trial_path / "graphs" / f"{digest}.json"
            if not path.exists():
                write_json(path, structure)
            self._seen_graphs.add(digest)
        return digest

    # ----- copying and sending a recorded batch ----------------------------------------------

    def _capture(self, regs: list[_Registration], tensors: list[torch.Tensor],
                 recording_types: str | list[str]) -> None:
        """Copy tensors (as float32) into the batch's shared memory for the writer.

        Steps of a training loop capture the same tensors in the same order, so where each
        one goes, the views that write it there and its description for the writer are
        planned once per slot and reused: per step only the copies remain. Tensors of one
        size go next to each other, so that the writer reduces them as one block.
        """
        if not regs:
            return
        batch = self._batch
        slot = batch.slot
        single = isinstance(recording_types, str)
        key = (recording_types if single else tuple(recording_types), tuple(slot.fill),
               self._batch_size, tuple([r.sig_id for r in regs]))
        plan = slot.plans.get(key)
        if plan is None:
            plan = self._plan_capture(slot, regs, tensors, [recording_types] * len(regs)
                                      if single else recording_types)
            if len(slot.plans) >= 64:  # tensors that change every step: plan afresh
                slot.plans.clear()
            slot.plans[key] = plan
        else:
            slot.fill[:] = plan.fill
            slot.needed = plan.needed
        sources = [tensors[i] for i in plan.order]
        enabled = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        try:
            if plan.complex:
                for view, t in zip(plan.views, sources):
                    view.copy_(t.abs() if t.is_complex() else t)
            else:
                torch._foreach_copy_(plan.views, sources)  # one call instead of one per tensor
        finally:
            torch.set_grad_enabled(enabled)
        batch.plans.append(plan)

    def _plan_capture(self, slot: Slot, regs, tensors, recording_types) -> _CapturePlan:
        order = sorted(range(len(regs)), key=lambda i: tensors[i].numel())
        refs, views, layout = [], [], []
        for i in order:
            t, reg = tensors[i], regs[i]
            n = t.numel()
            seg_index, offset = self._writer.allocate(slot, n)
            seg = slot.segments[seg_index]
            if seg.view is None:
                seg.view = torch.frombuffer(seg.mm, dtype=torch.float32)
            views.append(seg.view[offset:offset + n].view(t.shape))
            refs += (seg_index, offset)
            layout.append((reg.tensor_name, reg.node, reg.role, reg.kind, reg.iteration,
                           recording_types[i], tuple(t.shape), reg.batch_dim, reg.per_sample,
                           reg.with_values, reg.param_index))
        return _CapturePlan(order, views, refs, layout, list(slot.fill), slot.needed,
                            any(t.is_complex() for t in tensors), next(self._plan_ids))

    def _write_batch(self) -> None:
        """Copy the forward values and the updated parameters, and send the batch.

        Forward values are copied now (training code may reuse its buffers), gradients were
        copied when recorded, parameters at start_batch; the parameters after the
        optimizer step are copied too, and the writer subtracts. Statistics, singular
        values and Arrow tables are the writer process's work.
        """
        batch = self._batch
        regs = [reg for reg in batch.regs if reg.alias_of is None]
        self._capture(regs, [reg.tensor for reg in regs],
                      [_UPDATE if reg.param_index >= 0 else _FORWARD for reg in regs])
        # The same plans give the same layout and references: their JSON is made once.
        plans = batch.plans
        key = tuple([plan.pid for plan in plans])
        cached = self._msg_parts.get(key)
        if cached is None or cached[0] != self._writer.layout_generation:
            layout = [x for plan in plans for x in plan.layout]
            refs = [x for plan in plans for x in plan.refs]
            layout_id, new = self._writer.layout_id(tuple(layout))
            head = f'"layout_id":{layout_id},"refs":{json.dumps(refs, separators=(",", ":"))}'
            if len(self._msg_parts) >= 256:
                self._msg_parts.clear()
            self._msg_parts[key] = (self._writer.layout_generation, head)
            if new:  # the writer learns the layout with this message only
                head += ',"layout":' + json.dumps(layout, separators=(",", ":"))
        else:
            head = cached[1]
        # The type of execution and the samples repeat from step to step too.
        parts_key = (self.type_of_execution, tuple(self._sample_indices),
                     tuple(self._sample_categories))
        parts = self._json_parts.get(parts_key)
        if parts is None:
            if len(self._json_parts) >= 256:
                self._json_parts.clear()
            parts = self._json_parts[parts_key] = (
                f'"toe":{json.dumps(self.type_of_execution)},'
                f'"samples":{json.dumps(self._sample_indices)},'
                f'"categories":{json.dumps(self._sample_categories)}'
            )
        graphs = ",".join([f'[{i},"{h}"]' for i, h in sorted(batch.graphs.items())])
        body = (
            f'{head},"step":{self.training_step},{parts},'
            f'"batch_size":{self._batch_size},"wall":{time.time()!r},"graphs":[{graphs}]'
        )
        slot, batch.slot = batch.slot, None
        self._writer.submit_batch(slot, body)
        if self._kpi_rows:
            self._submit_kpis()


def _rel_iteration(reg: _Registration, iteration: int):
    if reg.kind == "parameter" or reg.iteration < 0:
        return "step"
    return reg.iteration - iteration


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


def _prepare_trial_folder(trial_path: Path) -> None:
    """Create the trial's folder, replacing an earlier recording of the same trial.

    Replacing deletes nothing but that trial's own folder: the resolved path must sit
    directly in the group's ``trials`` folder, and a symbolic link is refused rather than
    followed. Folders that cannot be made give a StorageError that names them.
    """
    trials = trial_path.parent
    try:
        trials.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot create the folder {trials} for the recording ({type(e).__name__}: "
            f"{e.strerror or e}); check that comgra_root_path is a folder (not a file) you can "
            "write to"
        ) from None
    if trial_path.is_symlink():
        raise StorageError(
            f"{trial_path} is a symbolic link; a recording replaces its trial folder and will "
            "not delete what a link points to. Remove the link or choose another trial_id"
        )
    if trial_path.exists():
        if trial_path.resolve().parent != trials.resolve() or not trial_path.is_dir():
            raise StorageError(
                f"{trial_path} exists and is not a trial folder inside {trials}; remove it or "
                "choose another trial_id"
            )
        log.warning("comgra_like: replacing the existing recording %s", trial_path)
        try:
            shutil.rmtree(trial_path)
        except OSError as e:
            raise StorageError(
                f"cannot delete the earlier recording {trial_path} to replace it ({e}); "
                "delete it by hand or choose another trial_id"
            ) from None
    try:
        trial_path.mkdir()
    except OSError as e:
        raise StorageError(
            f"cannot create the trial folder {trial_path} ({type(e).__name__}: "
            f"{e.strerror or e}); check that the folder is writable"
        ) from None


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
