"""A trial's configuration (its hyperparameters) as trial.json stores it: one flat JSON
object, nested dicts flattened with dots (``{"optim": {"lr": 0.1}}`` -> ``optim.lr``).

Values are what JSON holds: None, booleans, numbers, strings, and lists of those. A
numpy scalar or a one-element tensor-like value with ``.item()`` is taken as its Python
number; anything else (an object, a function, a class) is refused with the key that
holds it, since the file must never need pickle to read back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError

MAX_KEYS = 10_000
MAX_KEY_LENGTH = 256


def flatten_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The flat, JSON-able form of ``config`` (dotted keys, sorted); {} for None."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"config must be a dict of hyperparameters (e.g. {{'lr': 0.01}}), got "
            f"{type(config).__name__}")
    out: dict[str, Any] = {}
    _flatten(config, "", out)
    if len(out) > MAX_KEYS:
        raise ConfigurationError(f"config has {len(out)} entries after flattening; at most "
                                 f"{MAX_KEYS} are stored")
    return dict(sorted(out.items()))


def _flatten(config: Mapping, prefix: str, out: dict[str, Any]) -> None:
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(
                f"config keys must be non-empty strings, got {key!r}"
                + (f" under {prefix[:-1]!r}" if prefix else ""))
        name = prefix + key
        if len(name) > MAX_KEY_LENGTH:
            raise ConfigurationError(f"config key {name[:40]!r}... is longer than "
                                     f"{MAX_KEY_LENGTH} characters")
        if isinstance(value, Mapping):
            if not value:
                continue  # nothing to store under an empty section
            _flatten(value, name + ".", out)
            continue
        if name in out:
            raise ConfigurationError(f"config key {name!r} is given twice (once nested, once "
                                     "with a dot in its name)")
        out[name] = _plain(value, name)


def _plain(value: Any, name: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN/Inf
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{name}[{i}]") for i, v in enumerate(value)]
    if callable(getattr(value, "item", None)) and _numel(value) == 1:
        return _plain(value.item(), name)  # numpy scalars, one-element arrays and tensors
    raise ConfigurationError(
        f"config[{name!r}] is a {type(value).__name__}; store plain values (numbers, strings, "
        "booleans, None, lists of them, nested dicts), e.g. str(value) or its number")


def _numel(value: Any) -> int | None:
    size = getattr(value, "size", None)
    if callable(size):  # a torch tensor: size() is its shape
        numel = getattr(value, "numel", None)
        return numel() if callable(numel) else None
    return size if isinstance(size, int) else None


def read_config(trial_json: Mapping[str, Any]) -> dict[str, Any]:
    """The config a trial.json holds ({} for trials recorded before configs existed)."""
    config = trial_json.get("config")
    return dict(config) if isinstance(config, Mapping) else {}
