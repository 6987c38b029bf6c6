"""The recorder's calls about the tensors of a step: register_tensor, connections,
sample ids, record_current_gradients.

A mixin of ``ComgraRecorder`` (record/recorder.py): it uses the recorder's state.
"""

from __future__ import annotations

import logging

import torch

from ..errors import CallOrderError, ConfigurationError, RecordingDecisionError, RegistrationError
from ..vocabulary import PARAMETER, gradient_type
from .recorder_checks import flight_kind
from .step import check_registration

log = logging.getLogger("comgra_like")


class TensorCalls:
    """What a training loop registers inside a step."""

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
                                            flight_kind(is_input, is_target, is_loss,
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
            self._flight.observe_tensor(tensor_name, tensor, node_name, flight_kind(
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
            # every call: a step of several iterations (accumulation) or loss groups has
            # a row per call; the last is what the optimizer's step will use
            self._flight.observe_gradients(self._params)
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
