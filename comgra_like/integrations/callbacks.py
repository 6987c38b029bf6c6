"""What the framework callbacks (``lightning.py``, ``huggingface.py``) share: their
arguments checked when the callback is made, a framework's hyperparameters as a trial
config, and ``watch()`` called with the optimizer where it takes one.

No framework is imported here.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import ComgraError, ConfigurationError
from ..record.watching import watch

log = logging.getLogger("comgra_like")

# watch()'s arguments that the callbacks set themselves
OWN_ARGUMENTS = ("standalone_dir", "recorder", "backend", "config", "metrics",
                 "flight_recorder", "log_freq", "optimizer", "scaler")


def check_arguments(log_freq: Any, watch_kwargs: Mapping[str, Any]) -> None:
    """ConfigurationError for what watch() would refuse later, when the callback is made."""
    if type(log_freq) is not int or log_freq < 1:
        raise ConfigurationError(f"log_freq must be a positive integer, got {log_freq!r}")
    taken = sorted(set(watch_kwargs) & set(OWN_ARGUMENTS))
    if taken:
        raise ConfigurationError(
            f"ComgraCallback sets {', '.join(taken)} itself: pass path= for the group folder "
            "and config= for the hyperparameters")
    known = inspect.signature(watch).parameters
    unknown = sorted(k for k in watch_kwargs if k not in known or k == "module")
    if unknown:
        raise ConfigurationError(
            f"ComgraCallback got {', '.join(unknown)}, which watch() does not take")


def plain_config(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """A framework's hyperparameters as a trial config: nested mappings kept (watch()
    flattens them with dots), numbers, strings, booleans and None as they are, lists
    and tuples of those as JSON text, anything else (a module, a class, a path, an
    enum) as its ``str()``; keys that are not strings become strings."""
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        name = str(key)
        if not name:
            continue
        if isinstance(value, Mapping):
            out[name] = plain_config(value)
        else:
            out[name] = _plain_value(value)
    return out


def _plain_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "value") and isinstance(value.value, (str, int)):
        return value.value  # an enum (transformers' IntervalStrategy, ...)
    if isinstance(value, (list, tuple)):
        try:
            return json.dumps(list(value))
        except (TypeError, ValueError):
            return str(list(value))
    return str(value)


def takes_optimizer() -> bool:
    """Whether watch() records the optimizer's step (``optimizer=``, docs/OPTIMIZER.md)."""
    return "optimizer" in inspect.signature(watch).parameters


def start_watch(module, path, log_freq: int, metrics, config, flight_recorder,
                optimizers: list, scaler, watch_kwargs: Mapping[str, Any]):
    """watch() as the callbacks call it: the optimizers (and the loss scaler) passed
    where watch() takes them. A ComgraError (a bad argument, a folder that cannot be
    written) stops the run before training, as watch() does; any other failure is
    logged and training goes on unrecorded (None)."""
    kwargs = dict(watch_kwargs)
    if optimizers and takes_optimizer():
        kwargs["optimizer"] = optimizers if len(optimizers) > 1 else optimizers[0]
        if scaler is not None:
            kwargs["scaler"] = scaler
    try:
        return watch(module, log_freq=log_freq, standalone_dir=path, metrics=metrics,
                     config=config, flight_recorder=flight_recorder, **kwargs)
    except ComgraError:
        raise
    except Exception as e:  # noqa: BLE001 - never into training
        log.warning("comgra_like ComgraCallback: watching %s failed, training goes on "
                    "without a recording: %s: %s", type(module).__name__,
                    type(e).__name__, e)
        return None


def before_clipping(handle) -> None:
    """``handle.gradients_before_clipping()`` where watch() has it (never raises)."""
    call = getattr(handle, "gradients_before_clipping", None)
    if call is None:
        return
    try:
        call()
    except Exception as e:  # noqa: BLE001 - never into training
        log.warning("comgra_like: the gradient norm before clipping was not recorded: %s", e)


def run_closure_first(optimizer: torch.optim.Optimizer):
    """A step pre-hook on ``optimizer`` for loops that hand the forward and backward to
    ``optimizer.step(closure)`` (Lightning's automatic optimization outside a loss
    scaler): it runs the closure before the step's other pre-hooks that come after it,
    so that they (watch()'s optimizer recording) see the gradients the step uses, and
    hands the step a closure whose first call returns that loss; further calls (LBFGS)
    run the closure again. The same computations in the same order: training is
    bitwise the same. Returns the hook's handle."""

    def pre(opt, args, kwargs):
        closure = kwargs.get("closure")
        if closure is None and args:
            closure = args[0]
        if not callable(closure):
            return None
        with torch.enable_grad():  # as the optimizers call it
            loss = closure()
        calls = [0]

        def closure_again() -> Any:
            calls[0] += 1
            return loss if calls[0] == 1 else closure()

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_again}
        return (closure_again, *args[1:]), kwargs

    return optimizer.register_step_pre_hook(pre)


def remove_all(handles: list) -> None:
    """Remove hook handles (and empty the list)."""
    for h in handles:
        h.remove()
    handles.clear()


class WatchSettings:
    """What both framework callbacks hold: watch()'s settings (checked when the callback
    is made), the ``WatchHandle`` while training runs, and ending the recording without
    raising into training."""

    def __init__(self, path, log_freq: int, metrics, config, flight_recorder,
                 watch_kwargs: dict[str, Any]):
        check_arguments(log_freq, watch_kwargs)
        self.path = path
        self.log_freq = log_freq
        self.metrics = metrics
        self.config = config
        self.flight_recorder = flight_recorder
        self.watch_kwargs = watch_kwargs
        self.handle = None

    @property
    def watching(self) -> bool:
        return self.handle is not None and self.handle.watching

    def unwatch_quietly(self) -> None:
        """Finalize the recording; a failure is logged, never raised into training."""
        if self.watching:
            try:
                self.handle.unwatch()
            except Exception as e:  # noqa: BLE001 - never into training
                log.warning("comgra_like ComgraCallback: stopping the recording failed: %s", e)
