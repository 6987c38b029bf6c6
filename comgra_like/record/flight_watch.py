"""``watch(model, flight_recorder=...)``: a FlightRecorder fed by hooks of its own on every
training step, while watch records one step in ``log_freq`` (issue 30).

What it sees on every training step (numbered as watch numbers them: a further forward
of the open step, e.g. a micro-batch of gradient accumulation, adds rows to that step):
every parameter's value (at the step's first forward) and update (at the next step's,
after the optimizer step), every parameter's gradient (a post-accumulate-grad hook that
returns nothing; on a GPU or in a distributed job it only notes the parameter, and all
of a backward pass are reduced together when it ends, after DDP's averaging), and the
output of every module (the root's included: each floating-point tensor of the output,
named as watch names it, ``"<module> output 0"``; the root's ``loss`` output is the
step's loss) with its gradient (a tensor hook that returns nothing). Forward
passes in eval mode are not steps, and a module called while no training forward runs
(an eval forward, a checkpoint's recomputation in the backward) is not seen.

After a trigger the next ``after`` steps are recorded in full: the driver's forward
pre-hook runs before watch's own (it judges the step that just ended first) and asks the
recorder with ``request_recording(after)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from ..errors import FlightTriggerError
from .flight import FlightRecorder
from .module_io import outputs_of
from .step import Parameter
from .watch_gradients import queue_after_backward

log = logging.getLogger("comgra_like")


class FlightDriver:
    """The hooks that feed one FlightRecorder from a watched module.

    ``recorder``: watch's own recorder (its public ``trial_path``, ``rank``,
    ``request_recording`` for the steps after a trigger and ``writer``, whose
    ``flight_trigger`` names each trigger in trial.json)."""

    def __init__(self, flight: FlightRecorder, module: torch.nn.Module, root: str, recorder,
                 continues_step: Callable[[], bool] | None = None):
        def notify(trigger: dict) -> None:
            writer = recorder.writer
            if writer is not None:
                writer.flight_trigger(trigger)

        flight.attach(recorder.trial_path, recorder.rank, notify)
        self.flight, self.root = flight, root
        # watch()'s rule: whether a training forward now continues the open step (a
        # further micro-batch of gradient accumulation) rather than opening the next one
        self.continues_step = continues_step
        self.request_recording: Callable[[int], None] | None = getattr(
            recorder, "request_recording", None)
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
        self.active = False  # inside a training forward of the root module
        # first: the step that just ended is judged before watch decides on this one
        self.handles = [module.register_forward_pre_hook(self._pre, prepend=True)]
        for sub_name, sub in module.named_modules():
            node = f"{root}.{sub_name}" if sub_name else root
            self.handles.append(sub.register_forward_hook(self._output_hook(node)))
        self.handles.append(module.register_forward_hook(self._post))
        self._grad_params: list[Parameter] = []  # those with a gradient in this backward
        for param in self.params:
            self.handles.append(param.tensor.register_post_accumulate_grad_hook(
                self._grad_hook(param)))

    def _pre(self, module, args) -> None:
        self.active = False
        if not module.training:
            return
        try:
            if self.open and self.continues_step is not None and self.continues_step():
                self.active = True  # a further forward of the open step: more rows of it
                return
            if self.open:
                self.flight.end(self.params)  # the update: after the optimizer's step
                self._hand_over()
            self.flight.begin(self.step, self.params)
            self.step += 1
            self.open = self.active = True
        except FlightTriggerError:
            raise  # on_trigger="raise": stops training on purpose (the window is written)
        except Exception as e:  # noqa: BLE001 - never into training
            log.warning("comgra_like.watch: flight recorder: %s", e)

    def _hand_over(self) -> None:
        """After a trigger: the recorder records the next ``after`` steps in full."""
        steps = self.flight.take_after_steps()
        if steps and self.request_recording is not None:
            try:
                self.request_recording(steps)
            except Exception as e:  # noqa: BLE001 - never into training
                log.warning("comgra_like.watch: flight recorder: the steps after the "
                            "trigger are not recorded in full (%s)", e)

    def _output_hook(self, node: str):
        flight = self.flight

        def hook(module, args, output) -> None:
            if not self.active:
                return
            try:
                for role, t in outputs_of(output):
                    if t.is_floating_point():
                        # the model's own loss (a transformers ModelOutput's ``loss``)
                        kind = "loss" if node == self.root and role == "output loss" \
                            else "calculated"
                        flight.observe_tensor(f"{node} {role}", t, node, kind)
            except Exception as e:  # noqa: BLE001 - never into training
                self.active = False
                log.warning("comgra_like.watch: flight recorder: %s", e)
        return hook

    def observe_loss(self, loss) -> None:
        """``handle.log_loss(loss)``: the step's loss for the loss-spike trigger (each
        micro-batch's: the step is judged on their mean)."""
        if not self.open:
            return
        try:
            if isinstance(loss, torch.Tensor):
                self.flight.observe_tensor("loss", loss.detach(), "loss", "loss")
            else:
                self.flight.observe_kpi("train", "loss", float(loss))
        except Exception as e:  # noqa: BLE001 - never into training
            log.warning("comgra_like.watch: flight recorder: %s", e)

    def _post(self, module, args, output) -> None:
        self.active = False  # the training forward is over (the root's hooks ran)

    def _grad_hook(self, entry: Parameter):
        def hook(param) -> None:
            if not self.open or param.grad is None:
                return
            try:
                if not self.flight.gradients_together(param.grad):
                    # the CPU, one process: at once, while the gradient is in the cache
                    # (reduced together at the end cost x0.1 more on the watch benchmark)
                    self.flight.observe_gradient(entry.full_name, param.grad)
                    return
                if not self._grad_params:  # the first of this backward pass
                    queue_after_backward(self._gradients_done)
                self._grad_params.append(entry)
            except Exception as e:  # noqa: BLE001 - inside backward: never into training
                log.warning("comgra_like.watch: flight recorder: %s", e)
        return hook

    def _gradients_done(self) -> None:
        """The end of a backward pass: its parameters' gradients, reduced together (a
        few launches for all of them on a GPU instead of three each), as they are after
        DDP's averaging."""
        params, self._grad_params = self._grad_params, []
        if self.open and params:
            self.flight.observe_gradients(params)

    def close(self) -> None:
        """The last step ends, the hooks go."""
        try:
            self.active = False
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

