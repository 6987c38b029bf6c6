"""User metrics: a class with a ``name``, the data it ``needs`` and one ``compute``
method, passed in the metrics config instead of a quantity name.

They are computed in the training process (the writer process cannot import a user's
class without pickle, which this project never uses) and only their number is sent to
the writer, which stores it like any other metric. One instance is made per module the
config entry matches, so a metric may keep state on ``self`` between computations.

Example::

    class ActivationKurtosis(comgra_like.metrics.UserMetric):
        name = "OutputKurtosis"
        needs = ("output",)

        def compute(self, data):
            y = data["output"].flatten().double()
            z = (y - y.mean()) / y.std()
            return float((z ** 4).mean())

    watch(model, metrics={"fc1": [ActivationKurtosis, "WeightNorm"]})
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError

#: What a user metric may ask for. ``data`` holds detached torch tensors: ``input`` (the
#: first positional tensor input of the module's last forward in the step), ``output``
#: (its first tensor output), ``output_grad`` (the gradient of that output; a metric that
#: needs it is computed once per backward pass), ``weight`` and ``weight_grad`` (after the
#: step's last backward pass), ``update`` (the weight's change by the step's optimizer
#: update; such a metric is computed when the next step starts), ``loss`` (the number
#: given to ``track(step, loss=...)`` / ``handle.log_loss``).
USER_NEEDS = ("input", "output", "output_grad", "weight", "weight_grad", "update", "loss")


class UserMetric:
    """Optional base class of a user metric (any class with ``name``, ``needs`` and
    ``compute(self, data) -> float`` works)."""

    name: str = ""
    needs: tuple[str, ...] = ()

    def compute(self, data: dict[str, Any]) -> float:
        raise NotImplementedError


def is_user_metric_class(entry: object) -> bool:
    """Whether a config entry is meant as a user metric (a class, not a name)."""
    return isinstance(entry, type)


def check_user_metric(cls: type, where: str) -> tuple[str, frozenset[str]]:
    """The (name, needs) of a user metric class; a ConfigurationError that says what is
    missing otherwise."""
    example = ("e.g. class MyMetric: name = 'MyMetric'; needs = ('output',); "
               "def compute(self, data): return float(data['output'].abs().mean())")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(
            f"the user metric class {cls.__name__} for {where} needs a class attribute "
            f"name (a non-empty string, the metric's name in the recording); {example}")
    needs = getattr(cls, "needs", None)
    if isinstance(needs, str):
        needs = (needs,)
    try:
        needs = frozenset(needs)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigurationError(
            f"the user metric {name!r} ({cls.__name__}) for {where} needs a class attribute "
            f"needs: a tuple of {', '.join(USER_NEEDS)}; {example}") from None
    wrong = sorted(str(n) for n in needs - set(USER_NEEDS))
    if wrong:
        raise ConfigurationError(
            f"the user metric {name!r} ({cls.__name__}) for {where} needs {wrong}, which "
            f"cannot be captured; a user metric may need {', '.join(USER_NEEDS)}")
    if not callable(getattr(cls, "compute", None)):
        raise ConfigurationError(
            f"the user metric {name!r} ({cls.__name__}) for {where} has no compute(self, "
            f"data) method; {example}")
    return name, needs


def as_number(value: Any, name: str) -> float:
    """A user metric's result as a float (a number or a one-element tensor or array)."""
    if hasattr(value, "numel") and callable(value.numel):
        if value.numel() != 1:
            raise ConfigurationError(
                f"the user metric {name!r} returned a tensor of shape "
                f"{tuple(value.shape)}; compute() must return one number")
        return float(value.item())
    if getattr(value, "size", 1) != 1:
        raise ConfigurationError(
            f"the user metric {name!r} returned an array of {value.size} values; compute() "
            "must return one number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"the user metric {name!r} returned {type(value).__name__} {value!r}; "
            "compute() must return one number") from None

