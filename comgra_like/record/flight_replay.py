"""The flight recorder's replay of a failing step (issue 30, "Going further").

With ``FlightRecorder(keep_state=True)`` the parameters' values from before each of the
last two steps are kept in host memory (a copy of every parameter per step: the model's
size in host memory twice, and on a GPU one device-to-host copy of the model per step).
After a ``non_finite`` trigger, :func:`replay` loads them into a fresh model of the same
architecture that you pass (built like the trained one, without watch() or a recorder on
it), runs the failing step again through a function of yours (forward, loss, backward of
the same batch: keep it, e.g. by its sample ids) and watches every operation with a
dispatch mode: the first operation whose inputs are finite and whose output is not is
named, with the module it ran in (forward) or the autograd node (backward). The trained
model is not touched, and the random number generators are left as they were.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import ConfigurationError, NotFoundError


@dataclass(frozen=True)
class ReplayResult:
    """What a replay found: the training ``step`` replayed; ``op`` (an aten operation,
    e.g. ``aten.log.default``), ``module`` (the module it ran in, named as in the model;
    "" for the model itself) and ``phase`` ("forward" or "backward") of the first
    operation that made a non-finite value from finite inputs; None where the replay
    made none (``message`` says what happened)."""

    step: int
    op: str | None
    module: str | None
    phase: str | None
    message: str


class StateKeeper:
    """The parameters' values before each of the last two steps, on the host, in the
    recorder's order of its parameters (for a model: its ``named_parameters`` order)."""

    def __init__(self) -> None:
        self.states: deque[tuple[int, list[tuple[str, torch.Tensor]]]] = deque(maxlen=2)

    def keep(self, step: int, names: list[str], tensors: list) -> None:
        with torch.no_grad():
            self.states.append((step, [(n, t.detach().to("cpu", copy=True))
                                       for n, t in zip(names, tensors)]))

    def state_of(self, step: int) -> list[tuple[str, torch.Tensor]]:
        for s, state in self.states:
            if s == step:
                return state
        raise NotFoundError(
            f"no kept state of training step {step}; kept: "
            f"{[s for s, _ in self.states] or 'none'} (FlightRecorder(keep_state=True) "
            "keeps the last two steps)")


class _FirstNonFinite(TorchDispatchMode):
    """Finds the first operation that makes a non-finite value from finite inputs."""

    def __init__(self, modules: list[str]):
        super().__init__()
        self.modules = modules  # the stack of module names running now
        self.found: tuple[str, str, str] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.found is None and _has_non_finite(out) and not _has_non_finite(
                (args, kwargs)):
            node = torch._C._current_autograd_node()
            if node is not None:  # inside the backward: the autograd node is the place
                self.found = (str(func), node.name(), "backward")
            else:
                self.found = (str(func), self.modules[-1] if self.modules else "", "forward")
        return out


def _has_non_finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.is_floating_point() and value.numel()
                    and not torch.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False


def replay(keeper: StateKeeper, step: int, model: torch.nn.Module, run_step
           ) -> ReplayResult:
    """Replay ``step`` on ``model`` (a fresh model of the watched architecture), loaded
    with the parameters kept from before it; ``run_step(model)`` runs the step's forward,
    loss and ``backward()``."""
    if not callable(run_step):
        raise ConfigurationError("replay(model, run_step): run_step must be a function "
                                 "that runs the failing step on the model it is given")
    state = keeper.state_of(step)
    params = list(model.parameters())
    if len(params) != len(state) or any(p.shape != t.shape for p, (_, t) in zip(params, state)):
        raise ConfigurationError(
            f"replay(model, ...): the model's {len(params)} parameters do not match the "
            f"{len(state)} kept ones (first kept: {state[0][0] if state else 'none'}); pass "
            "a fresh model built like the one the flight recorder watched")
    twin = model
    with torch.no_grad():
        for mine, (_, kept) in zip(params, state):
            mine.copy_(kept.to(mine.device))
    modules: list[str] = []

    def enter(name):
        def pre(module, args) -> None:
            modules.append(name)
        return pre

    def leave(module, args, output) -> None:
        if modules:
            modules.pop()

    handles = []
    for name, sub in twin.named_modules():
        handles.append(sub.register_forward_pre_hook(enter(name)))
        handles.append(sub.register_forward_hook(leave))
    mode = _FirstNonFinite(modules)
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    message = "the replay made no non-finite value (the cause may lie outside the model)"
    try:
        with mode, contextlib.ExitStack():
            try:
                run_step(twin)
            except Exception as e:  # noqa: BLE001 - the step may fail again: say so
                message = f"the replayed step raised {type(e).__name__}: {e}"
    finally:
        for h in handles:
            h.remove()
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    if mode.found is None:
        return ReplayResult(step, None, None, None, message)
    op, module, phase = mode.found
    return ReplayResult(step, op, module, phase,
                        f"first non-finite value: {op} in module {module or '(the model)'} "
                        f"({phase})")
