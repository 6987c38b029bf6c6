"""``watch(model, flight_recorder=...)``: a FlightRecorder fed by hooks of its own on every
training step, while watch records one step in ``log_freq`` (issue 30).

What it sees on every training forward of the root module (a training step, numbered as
watch numbers them): every parameter's value (at the forward) and update (at the next
training forward, after the optimizer step), every parameter's gradient (a
post-accumulate-grad hook that returns nothing), and the root module's output (its value
and gradient). Forward passes in eval mode are not steps. The steps after a trigger are
not recorded in full by watch (its own schedule, ``log_freq``, decides).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import FlightTriggerError
from .flight import FlightRecorder
from .step import Parameter

log = logging.getLogger("comgra_like")


class FlightDriver:
    """The hooks that feed one FlightRecorder from a watched module."""

    def __init__(self, flight: FlightRecorder, module: torch.nn.Module, root: str,
                 trial_path: Path, rank: int = 0):
        flight.attach(trial_path, rank)
        self.flight, self.root = flight, root
        self.params: list[Parameter] = []
        seen: set[int] = set()
        for name, p in module.named_parameters():
            if id(p) in seen:
                continue  # a shared parameter, under its first name
            seen.add(id(p))
            full = f"{root}.{name}"
            self.params.append(Parameter(full_name=full, tensor=p, node=full, role=full,
                                         module_group=None))
        self.step = 0
        self.open = False
        self.handles = [module.register_forward_pre_hook(self._pre),
                        module.register_forward_hook(self._post)]
        for param in self.params:
            self.handles.append(param.tensor.register_post_accumulate_grad_hook(
                self._grad_hook(param.full_name)))

    def _pre(self, module, args) -> None:
        if not module.training:
            return
        try:
            if self.open:
                self.flight.end(self.params)  # the update: after the optimizer's step
            self.flight.begin(self.step, self.params)
            self.step += 1
            self.open = True
        except FlightTriggerError:
            raise  # on_trigger="raise": stops training on purpose (the window is written)
        except Exception as e:  # noqa: BLE001 - never into training
            log.warning("comgra_like.watch: flight recorder: %s", e)

    def _post(self, module, args, output) -> None:
        if self.open and module.training and isinstance(output, torch.Tensor):
            self.flight.observe_tensor(f"{self.root}.output", output, self.root, "calculated")

    def _grad_hook(self, name: str):
        def hook(param) -> None:
            if self.open and param.grad is not None:
                self.flight.observe_gradient(name, param.grad)
        return hook

    def close(self) -> None:
        """The last step ends, the hooks go."""
        try:
            if self.open:
                self.open = False
                self.flight.end(self.params)
            self.flight.settle()
        except Exception as e:  # noqa: BLE001
            log.warning("comgra_like.watch: flight recorder: %s", e)
        finally:
            for h in self.handles:
                h.remove()
            self.handles = []
            self.params = []
