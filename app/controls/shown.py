"""What a view already shows: the checks that spare the browser a re-render.

Every view callback keeps a small key of what it shows (in a ``dcc.Store`` of its own,
or the figure's state) and sends nothing when the key did not change; a control is sent
only when its options or value differ from the browser's. These helpers are that check,
written once. Keys travel through the browser as JSON: the store sends tuples back as
lists, so a key is compared in its JSON form (a key with tuples, such as the Findings
page's (trial, version) pairs, never matched and re-sent its view on every tick).
"""

from __future__ import annotations

from typing import Any

from dash import no_update


def unchanged(key: Any, shown: Any) -> bool:
    """Whether the view already shows ``key`` (``shown``: the key its store holds, as
    JSON gives it back)."""
    return as_json(key) == shown


def as_json(value: Any) -> Any:
    """``value`` as it comes back from the browser: tuples as lists, at any depth."""
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def nothing(outputs: int) -> tuple:
    """The answer of a callback of ``outputs`` outputs that changes none of them."""
    return (no_update,) * outputs


def if_changed(new: Any, old: Any) -> Any:
    """``new``, or ``no_update`` when the browser has it already (``old``)."""
    return new if new != old else no_update
