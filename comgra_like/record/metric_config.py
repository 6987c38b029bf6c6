"""The metrics config in Taiyi's format, resolved against a model.

``{'fc1': ['InputSndNorm'], 'Conv2d': [['WeightNorm', 'linear(5, 0)']],
nn.BatchNorm2d: [['MeanTID', 'linear(5,0)'], 'InputSndNorm'], 'fc2': [MyMetric]}``

A key is a module's name (as ``model.named_modules()`` gives it, ``''`` for the model
itself), a class name as a string (every module of that class) or a class (every module
that is an instance of it). An entry is a quantity name (computed on every step), a pair
``[name, 'linear(k, o)']`` (steps o, o+k, ...), a user metric class, or ``[class,
'linear(k, o)']``. Every mistake is a ConfigurationError that lists what exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import ConfigurationError
from ..metrics.quantities import QUANTITIES, Quantity, get_quantity
from ..metrics.schedule import EVERY_STEP, Schedule, parse_schedule
from ..metrics.user import check_user_metric, is_user_metric_class

#: The metric name of the loss (monitorch's loss lens), recorded on the root module.
LOSS = "loss"
_WEIGHT_NEEDS = {"weight", "weight_grad", "update"}


@dataclass
class MetricSpec:
    """One metric of one module, resolved."""

    module_name: str  # qualified with the root's name, e.g. model.fc1 (the recording's)
    local_name: str  # as named_modules() gives it ('' for the root)
    module: torch.nn.Module
    module_class: str
    metric: str
    schedule: Schedule
    needs: frozenset[str]
    quantity: Quantity | None = None  # a built-in quantity (computed by the writer)
    user_class: type | None = None  # a user metric (computed in the training process)
    per_backward: bool = False


def _entries(value: object, where: str) -> list:
    if isinstance(value, (str, type)):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ConfigurationError(
            f"the metrics of {where} must be a list of entries (a quantity name, "
            f"[name, 'linear(k, o)'], or a user metric class), got {type(value).__name__}")
    return list(value)


def _entry(item: object, where: str) -> tuple[object, Schedule]:
    """(name or class, schedule) of one entry."""
    if isinstance(item, (str, type)):
        return item, EVERY_STEP
    if isinstance(item, (list, tuple)) and len(item) in (1, 2) and isinstance(
            item[0], (str, type)):
        schedule = parse_schedule(item[1], f"{item[0]!r} of {where}") if len(item) == 2 \
            else EVERY_STEP
        return item[0], schedule
    raise ConfigurationError(
        f"bad metric entry {item!r} for {where}: write a quantity name ('WeightNorm'), a "
        "pair [name, 'linear(k, o)'], a user metric class, or [class, 'linear(k, o)']")


def _modules_of(model: torch.nn.Module, key: object) -> list[tuple[str, torch.nn.Module]]:
    named = list(model.named_modules())
    if isinstance(key, str):
        by_name = [(n, m) for n, m in named if n == key]
        if by_name:
            return by_name
        found = [(n, m) for n, m in named if type(m).__name__ == key]
    elif isinstance(key, type):
        found = [(n, m) for n, m in named if isinstance(m, key)]
    else:
        raise ConfigurationError(
            f"a metrics config key must be a module name, a class name or a class, got "
            f"{type(key).__name__} {key!r}")
    if not found:
        names = [n for n, _ in named if n]
        classes = sorted({type(m).__name__ for _, m in named})
        shown = ", ".join(repr(n) for n in names[:60]) + (" ..." if len(names) > 60 else "")
        what = key.__name__ if isinstance(key, type) else repr(key)
        raise ConfigurationError(
            f"the metrics config key {what} matches no module of "
            f"{type(model).__name__}; its modules are {shown or '(none besides the model)'} "
            f"('' is the model itself), their classes {', '.join(classes)}")
    return found


def _has_tensor(module: torch.nn.Module, attr: str) -> bool:
    return isinstance(getattr(module, attr, None), torch.Tensor)


def _check_applies(spec: MetricSpec, where: str) -> None:
    q = spec.quantity
    cls = spec.module_class
    if q is not None and not q.applies_to(cls):
        raise ConfigurationError(
            f"{spec.metric} cannot be computed on {where} ({cls}): it applies to "
            f"{', '.join(q.module_classes or ())} only")
    if spec.needs & _WEIGHT_NEEDS and not _has_tensor(spec.module, "weight"):
        raise ConfigurationError(
            f"{spec.metric} needs the module's weight, and {where} ({cls}) has none; "
            "configure it for modules with a weight (Linear, Conv2d, ...)")
    if "bias" in spec.needs and not _has_tensor(spec.module, "bias"):
        raise ConfigurationError(
            f"{spec.metric} needs the module's bias, and {where} ({cls}) has none")


def resolve_config(model: torch.nn.Module, config: Mapping, root_name: str = "model"
                   ) -> list[MetricSpec]:
    """Every (module, metric) the config asks for, checked against ``model``."""
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            "metrics= must be a dict {module name, class name or class: [metrics]}, e.g. "
            "{'fc1': ['InputSndNorm'], 'Conv2d': [['WeightNorm', 'linear(5, 0)']]}; got "
            f"{type(config).__name__}")
    specs: dict[tuple[str, str], MetricSpec] = {}
    for key, value in config.items():
        key_text = key.__name__ if isinstance(key, type) else repr(key)
        items = [_entry(item, f"key {key_text}") for item in _entries(value, f"key {key_text}")]
        modules = _modules_of(model, key)
        for what, schedule in items:
            if is_user_metric_class(what):
                name, needs = check_user_metric(what, f"key {key_text}")  # type: ignore[arg-type]
                if name in QUANTITIES or name == LOSS:
                    raise ConfigurationError(
                        f"the user metric {what.__name__} is named {name!r}, the name of a "
                        "built-in metric; give it a name of its own")
                quantity, user = None, what
                per_backward = "output_grad" in needs
            else:
                try:
                    quantity = get_quantity(str(what))
                except ConfigurationError as e:
                    raise ConfigurationError(f"key {key_text}: {e}") from None
                name, needs, user = quantity.name, quantity.needs, None
                per_backward = quantity.per_backward
            for local, module in modules:
                full = f"{root_name}.{local}" if local else root_name
                spec = MetricSpec(full, local, module, type(module).__name__, name, schedule,
                                  frozenset(needs), quantity, user, per_backward)
                where = f"module {local!r}" if local else "the model"
                _check_applies(spec, where)
                earlier = specs.get((full, name))
                if earlier is not None:
                    if earlier.schedule != schedule:
                        raise ConfigurationError(
                            f"{name} of {where} is configured twice, with {earlier.schedule} "
                            f"and {schedule}; keep one")
                    continue
                specs[(full, name)] = spec
    return list(specs.values())
