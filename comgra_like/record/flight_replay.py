"""The flight recorder's replay of a failing step (issue 30, "Going further").

With ``FlightRecorder(keep_state=True)`` the parameters' values from before each of the
last two steps are kept in host memory (a copy of every parameter per step: the model's
size in host memory twice, and on a GPU one device-to-host copy of the model per step),
and with ``optimizer=`` (or ``watch(optimizer=...)``) the optimizer's state too (Adam's
two moments: twice the model's size more, twice).
After a ``non_finite`` trigger, :func:`replay` loads them into a fresh model of the same
architecture that you pass (built like the trained one, without watch() or a recorder on
it), runs the failing step again through a function of yours (forward, loss, backward of
the same batch: keep it, e.g. by its sample ids) and watches every operation with a
dispatch mode: the first operation whose inputs are finite and whose output is not is
named, with the module it ran in (forward) or the autograd node (backward). The trained
model is not touched, and the random number generators are left as they were. Given a
fresh optimizer, the replay loads the kept optimizer state into it and replays its
``step()`` as well.
"""

from __future__ import annotations

import contextlib
import copy
from collections import deque
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import ConfigurationError, NotFoundError


@dataclass(frozen=True)
class ReplayResult:
    """What a replay found: the training ``step`` replayed; ``op`` (an aten operation,
    e.g. ``aten.log.default``), ``module`` (the module it ran in, named as in the model;
    "" for the model itself; in the optimizer's step the module of the parameter) and
    ``phase`` ("forward", "backward" or "optimizer") of the first
    operation that made a non-finite value from finite inputs; None where the replay
    made none (``message`` says what happened)."""

    step: int
    op: str | None
    module: str | None
    phase: str | None
    message: str
    #: in the optimizer's step: the parameter and the state it was written to, e.g.
    #: ``"lin.weight (momentum_buffer)"`` (None elsewhere)
    tensor: str | None = None


class StateKeeper:
    """What the step started from, for the last two steps, on the host: the parameters'
    values in the recorder's order of its parameters (for a model: its
    ``named_parameters`` order) and, for each optimizer it was given, a copy of the
    optimizer's ``state_dict()`` (its state tensors copied, its hyperparameters, so a
    learning rate a scheduler changed is the step's). The copies of the step dropped from
    the two are reused when the shapes match (no allocation per step)."""

    def __init__(self) -> None:
        self.states: deque[tuple[int, list[tuple[str, torch.Tensor]], list[dict]]] = deque(
            maxlen=2)
        self.optimizers: list[torch.optim.Optimizer] = []

    def keep(self, step: int, names: list[str], tensors: list) -> None:
        spare = self.states[0] if len(self.states) == self.states.maxlen else None
        old_params = dict(spare[1]) if spare is not None else {}
        old_opts = spare[2] if spare is not None else []
        with torch.no_grad():
            params = [(n, _host_copy(t, old_params.get(n))) for n, t in zip(names, tensors)]
            opts = [_copy_state_dict(opt.state_dict(), old_opts[i] if i < len(old_opts) else None)
                    for i, opt in enumerate(self.optimizers)]
        self.states.append((step, params, opts))

    def _entry(self, step: int) -> tuple:
        for entry in self.states:
            if entry[0] == step:
                return entry
        raise NotFoundError(
            f"no kept state of training step {step}; kept: "
            f"{[s for s, _, _ in self.states] or 'none'} (FlightRecorder(keep_state=True) "
            "keeps the last two steps)")

    def state_of(self, step: int) -> list[tuple[str, torch.Tensor]]:
        """The parameters' values before ``step`` (name, host tensor)."""
        return self._entry(step)[1]

    def optimizer_states_of(self, step: int) -> list[dict]:
        """The optimizers' ``state_dict()`` before ``step`` (host copies; [] when the
        flight recorder was given no optimizer)."""
        return self._entry(step)[2]


def _host_copy(t: torch.Tensor, into: torch.Tensor | None) -> torch.Tensor:
    """``t`` copied to the host, into ``into`` when it has t's shape and dtype."""
    t = t.detach()
    if (into is not None and into.shape == t.shape and into.dtype == t.dtype
            and into.device.type == "cpu"):
        return into.copy_(t)
    return t.to("cpu", copy=True)


def _copy_state_dict(sd: dict, old: dict | None) -> dict:
    """An optimizer's state_dict with every tensor of its state copied to the host (into
    ``old``'s tensors where they match; new ones with None) and its param_groups
    deep-copied."""
    old_state = (old or {}).get("state") or {}
    state = {}
    for index, entries in sd.get("state", {}).items():
        before = old_state.get(index) or {}
        state[index] = {k: (_host_copy(v, before.get(k)) if isinstance(v, torch.Tensor)
                            else copy.deepcopy(v)) for k, v in entries.items()}
    groups = [{k: (v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor)
                   else copy.deepcopy(v)) for k, v in g.items()}
              for g in sd.get("param_groups", [])]
    return {"state": state, "param_groups": groups}


class _FirstNonFinite(TorchDispatchMode):
    """Finds the first operation that makes a non-finite value from finite inputs. An
    operation that changes its inputs in place (an optimizer's ``add_``) is judged by its
    inputs as they were before it ran."""

    def __init__(self, modules: list[str]):
        super().__init__()
        self.modules = modules  # the stack of module names running now
        self.found: tuple[str, str, str, torch.Tensor | None] | None = None
        self.phase = "forward"  # "optimizer" while the replay runs the optimizer's step

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mutable = self.found is None and func._schema.is_mutable
        finite_before = mutable and not _has_non_finite((args, kwargs))
        out = func(*args, **kwargs)
        if self.found is not None:
            return out
        if mutable:  # judged by its inputs before it ran
            bad = _first_non_finite((out, args, kwargs)) if finite_before else None
        else:
            bad = _first_non_finite(out)
            if bad is not None and _has_non_finite((args, kwargs)):
                bad = None
        if bad is not None:
            node = torch._C._current_autograd_node()
            if self.phase == "optimizer":
                self.found = (str(func), "", "optimizer", bad)
            elif node is not None:  # inside the backward: the autograd node is the place
                self.found = (str(func), node.name(), "backward", bad)
            else:
                self.found = (str(func), self.modules[-1] if self.modules else "", "forward",
                              bad)
        return out


def _first_non_finite(value) -> torch.Tensor | None:
    """The first tensor in ``value`` (nested lists, tuples, dicts) with a NaN or Inf."""
    if isinstance(value, torch.Tensor):
        return value if (value.is_floating_point() and value.numel()
                         and not torch.isfinite(value).all()) else None
    items = value.values() if isinstance(value, dict) else (
        value if isinstance(value, (list, tuple)) else ())
    for v in items:
        found = _first_non_finite(v)
        if found is not None:
            return found
    return None


def _has_non_finite(value) -> bool:
    return _first_non_finite(value) is not None


def replay(keeper: StateKeeper, step: int, model: torch.nn.Module, run_step,
           optimizer=None) -> ReplayResult:
    """Replay ``step`` on ``model`` (a fresh model of the watched architecture), loaded
    with the parameters kept from before it; ``run_step(model)`` runs the step's forward,
    loss and ``backward()``. ``optimizer``: a fresh optimizer (or a list, in the order the
    flight recorder was given them) built like the trained one over ``model``'s
    parameters: it is loaded with the optimizer state kept from before the step and its
    ``step()`` is replayed too, so a non-finite value the optimizer makes (a moment that
    overflows, a division by a zero second moment) is named with the parameter and state
    it was written to."""
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
    optimizers = _optimizers_to_load(keeper, step, optimizer)
    twin = model
    with torch.no_grad():
        for mine, (_, kept) in zip(params, state):
            mine.copy_(kept.to(mine.device))
    for opt, kept_sd in optimizers:
        try:
            # a copy: loading may keep the tensors it is given, and the step changes them
            opt.load_state_dict(_copy_state_dict(kept_sd, None))
        except (ValueError, KeyError, RuntimeError) as e:
            raise ConfigurationError(
                f"replay(optimizer=...): the kept optimizer state does not load into "
                f"{type(opt).__name__} ({e}); pass a fresh optimizer built like the trained "
                "one, over the fresh model's parameters") from e
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
    labels: dict[int, tuple[str, str]] = {}
    try:
        with mode, contextlib.ExitStack():
            try:
                run_step(twin)
                if optimizers and mode.found is None:
                    labels = _labels(twin, [opt for opt, _ in optimizers])
                    mode.phase = "optimizer"
                    for opt, _ in optimizers:
                        opt.step()
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
    op, module, phase, tensor = mode.found
    if phase == "optimizer":
        names = [type(opt).__name__ for opt, _ in optimizers]
        label = labels.get(_storage_of(tensor)) if tensor is not None else None
        if label is not None:
            parameter, what = label
            module = parameter.rpartition(".")[0]
            where = f"{parameter} ({what})"
            return ReplayResult(step, op, module, phase,
                                f"first non-finite value: {op} in the optimizer's step "
                                f"({', '.join(names)}), written to {where}", where)
        return ReplayResult(step, op, "", phase,
                            f"first non-finite value: {op} in the optimizer's step "
                            f"({', '.join(names)})")
    return ReplayResult(step, op, module, phase,
                        f"first non-finite value: {op} in module {module or '(the model)'} "
                        f"({phase})")


def _optimizers_to_load(keeper: StateKeeper, step: int, optimizer) -> list[tuple]:
    """(fresh optimizer, kept state_dict) pairs; a clear error when they do not match."""
    if optimizer is None:
        return []
    fresh = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    if not all(isinstance(o, torch.optim.Optimizer) for o in fresh):
        raise ConfigurationError("replay(optimizer=...): a torch.optim.Optimizer or a list of "
                                 "them, built like the trained ones over the fresh model")
    kept = keeper.optimizer_states_of(step)
    if not kept:
        raise ConfigurationError(
            "replay(optimizer=...): no optimizer state was kept; give the flight recorder "
            "the optimizer (FlightRecorder(keep_state=True, optimizer=opt), or "
            "watch(model, optimizer=opt, flight_recorder=...))")
    if len(kept) != len(fresh):
        raise ConfigurationError(
            f"replay(optimizer=...): {len(fresh)} optimizer(s) given, {len(kept)} kept; pass "
            "one fresh optimizer per trained one, in the same order")
    return list(zip(fresh, kept))


def _storage_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _labels(model: torch.nn.Module, optimizers: list) -> dict[int, tuple[str, str]]:
    """Where each tensor the optimizers write lives: (parameter name, "value" or the
    state's key), by storage."""
    names = {id(p): n for n, p in model.named_parameters()}
    labels: dict[int, tuple[str, str]] = {}
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                name = names.get(id(p))
                if name is None:
                    continue
                labels[_storage_of(p)] = (name, "value")
                for key, v in opt.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor):
                        labels[_storage_of(v)] = (name, key)
    return labels
