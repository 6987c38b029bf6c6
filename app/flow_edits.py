"""What the Flow page's browser sends, checked before the server acts on it (issue 28).

The page keeps the edited input and the clicked unit in the browser (``dcc.Store``) and
sends them back with every click and Save. Anyone who can reach the server can send
other values, so nothing the server allocates, reads or writes is sized by them: the
shape, sample, step and origin of an edit come from the stored chain
(:func:`stored_input`), the browser's values are taken only when they are exactly that
many finite numbers (:func:`edited_values`), and a clicked unit only when it is a unit
of a node of the chain (:func:`checked_unit`). Pure functions over the query API's
``FlowData``; the page (``pages/flow.py``) calls them and shows a refusal as text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from comgra_like.errors import ConfigurationError

#: The editor edits inputs of at most this many units per sample (a heatmap of 256x256;
#: the page ships the values to the browser and back as JSON at every click).
MAX_EDIT_UNITS = 65_536


@dataclass(frozen=True)
class StoredInput:
    """The input of a chain's first node for its sample, as stored with the chain: what
    an edit of that chain must look like."""

    chain: str
    record_id: str  # the chain's first flow record (``submit_input(like=...)``)
    node: str
    sample: int
    step: int | None
    probe_id: str | None  # the origin: None for the recorded run
    values: np.ndarray  # float32, the sample's shape

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


def stored_input(chain: str, flows: Sequence[Any]) -> StoredInput | None:
    """The editable input of ``chain`` (its FlowData in order), None when the chain stores
    no value of its first node. A ConfigurationError when it has more units than the
    editor takes."""
    if not flows or flows[0].value_source is None:
        return None
    info = flows[0].info
    n = math.prod(info.source_shape) if info.source_shape else 1
    if n > MAX_EDIT_UNITS:
        raise ConfigurationError(
            f"{info.source} has {n:,} units per sample; the editor edits inputs of at most "
            f"{MAX_EDIT_UNITS:,} (submit larger edits from a script with "
            "comgra_like.probe.submit_input)")
    values = np.asarray(flows[0].value_source, dtype=np.float32)
    return StoredInput(chain=chain, record_id=info.record_id, node=info.source,
                       sample=int(info.sample), step=info.training_step,
                       probe_id=info.probe_id, values=values)


def editor_state(stored: StoredInput, values: np.ndarray) -> dict:
    """What the browser keeps between clicks: the chain, its input's shape (checked on the
    way back) and the edited values."""
    return {"chain": stored.chain, "shape": list(stored.shape),
            "values": np.asarray(values, dtype=np.float32).reshape(-1).tolist()}


def edited_values(state: Any, stored: StoredInput) -> np.ndarray:
    """The edited values of a browser-sent editor ``state``, as an array of the stored
    input's shape. Refused (ConfigurationError) unless the state is of this chain, says
    the stored shape and holds exactly that many finite numbers: nothing is allocated
    from what the browser says before it was compared with the stored input."""
    if not isinstance(state, Mapping) or state.get("chain") != stored.chain:
        raise ConfigurationError("the edit is not of the chain shown: choose the chain again")
    shape = state.get("shape")
    if not isinstance(shape, list) or [s for s in shape if type(s) is not int] or tuple(
            shape) != stored.shape:
        raise ConfigurationError(
            f"the edit has shape {_short(shape)}; {stored.node} of this chain is stored "
            f"with shape {stored.shape}")
    values = state.get("values")
    n = stored.values.size
    if not isinstance(values, list) or len(values) != n:
        count = len(values) if isinstance(values, list) else type(values).__name__
        raise ConfigurationError(
            f"the edit holds {count} values; {stored.node} of shape {stored.shape} has {n}")
    if any(type(v) not in (int, float) for v in values):
        raise ConfigurationError("the edited values must be numbers")
    array = np.asarray(values, dtype=np.float64)
    if not np.isfinite(array).all() or (np.abs(array) > np.finfo(np.float32).max).any():
        raise ConfigurationError("the edited values must be finite float32 numbers")
    return array.astype(np.float32).reshape(stored.shape)


def checked_z(z: Any) -> float:
    """The value a click paints (the page's z field): a finite float32 number, 1.0 when
    empty."""
    if z is None or z == "":
        return 1.0
    try:
        value = float(z)
    except (TypeError, ValueError):
        raise ConfigurationError(f"z must be a number, not {_short(z)}") from None
    if not math.isfinite(value) or abs(value) > float(np.finfo(np.float32).max):
        raise ConfigurationError(f"z must be a finite float32 number, not {value}")
    return value


def checked_unit(unit: Any, chain: str | None, nodes: Sequence[Any]) -> tuple[str, int] | None:
    """(node, flat unit index) of a browser-sent clicked unit ``{"chain", "node",
    "unit"}`` when it names a unit of a node of ``chain`` (its ChainNodes); None
    otherwise (another chain, a node or unit that is not there, not a number)."""
    if not isinstance(unit, Mapping) or chain is None or unit.get("chain") != chain:
        return None
    shapes = {n.name: tuple(n.shape) for n in nodes}
    node, index = unit.get("node"), unit.get("unit")
    if not isinstance(node, str) or node not in shapes or type(index) is not int:
        return None
    n = math.prod(shapes[node]) if shapes[node] else 1
    return (node, index) if 0 <= index < n else None


def checked_count(value: Any, low: int, high: int, default: int) -> int:
    """An integer inside [low, high] (a dropdown's count); ``default`` for anything that
    is not an integer."""
    if type(value) is not int:
        return default
    return min(high, max(low, value))


def checked_slider(value: Any, low: float, high: float, default: float) -> float:
    """A slider position inside [low, high]; ``default`` for anything that is not a
    finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        return default
    return min(high, max(low, float(value)))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
