"""What a view already shows: the checks that spare the browser a re-render.

Every view callback keeps a small key of what it shows (in a ``dcc.Store`` of its own,
or the figure's state) and sends nothing when the key did not change; a control is sent
only when its options or value differ from the browser's. These helpers are that check,
written once. Keys travel through the browser as JSON: build them of lists, not tuples,
or they never compare equal to the key the store sends back.
"""

from __future__ import annotations

from typing import Any

from dash import no_update


def unchanged(key: Any, shown: Any) -> bool:
    """Whether the view already shows ``key`` (``shown``: the key its store holds)."""
    return key == shown


def nothing(outputs: int) -> tuple:
    """The answer of a callback of ``outputs`` outputs that changes none of them."""
    return (no_update,) * outputs


def if_changed(new: Any, old: Any) -> Any:
    """``new``, or ``no_update`` when the browser has it already (``old``)."""
    return new if new != old else no_update
