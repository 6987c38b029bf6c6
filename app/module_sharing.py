"""Tied (shared) parameters on the Modules page (issue 27): a parameter held by several
modules (GPT-2's ``lm_head`` and ``wte``; T5's ``shared``, both ``embed_tokens`` and
``lm_head``) is recorded once, under its first holder, and shown under every holder,
marked "shared with …" in the module's hover and in its histogram panel.

Pure functions over the module graph's ``shared_parameters`` (``Group.read_module_graph``)
and the ``shared_with``/``recorded_as`` columns of ``Group.read_histograms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from comgra_like.query.watch import shared_of_graph

from .plot_text import plot_text


@dataclass(frozen=True)
class SharedParameter:
    """One parameter of a module that other modules hold too.

    Attributes:
        name: the parameter's name in this module (``weight``).
        recorded_as: the qualified name its data is recorded under.
        others: the other holders' qualified parameter names.
    """

    name: str
    recorded_as: str
    others: tuple[str, ...]

    @property
    def recorded_here(self) -> bool:
        return self.recorded_as not in self.others


def sharing(graph: Mapping[str, Any] | None) -> dict[str, list[SharedParameter]]:
    """Per module (qualified name) the parameters it shares with other modules."""
    out: dict[str, list[SharedParameter]] = {}
    for entry in shared_of_graph(graph):
        recorded = ".".join(entry["recorded"])
        full = [f"{m}.{p}" for m, p in entry["holders"]]
        for (module, name), mine in zip(entry["holders"], full):
            out.setdefault(module, []).append(SharedParameter(
                name, recorded, tuple(f for f in full if f != mine)))
    return out


def describe(shared: SharedParameter) -> str:
    """``weight shared with model.lm_head.weight`` (plain text), with where its data is
    recorded when that is another module."""
    text = f"{shared.name} shared with {', '.join(shared.others)}"
    if not shared.recorded_here:
        text += f" (recorded as {shared.recorded_as})"
    return text


def hover_rows(shared: list[SharedParameter] | None) -> list[str]:
    """The module hover's rows for its shared parameters (plotly markup)."""
    return [f"<i>{plot_text(describe(s))}</i>" for s in shared or ()]


def panel_note(frame: pd.DataFrame | None, what: str | None, role: str | None) -> str | None:
    """``shared with …`` for a histogram panel showing a shared parameter (plain text), from
    the ``shared_with``/``recorded_as`` columns of its rows; None otherwise."""
    if frame is None or frame.empty or "shared_with" not in frame or what not in (
            "params", "params_grad"):
        return None
    rows = frame[(frame["what"] == what) & (frame["role"] == role)]
    if rows.empty:
        return None
    first = rows.iloc[0]
    others = str(first.get("shared_with") or "")
    if not others:
        return None
    recorded = str(first.get("recorded_as") or "")
    return f"shared with {others}" + (f" (recorded as {recorded})" if recorded else "")


def skipped_note(module: str, shares: Mapping[str, list[SharedParameter]]) -> str | None:
    """For a module watch skipped (a holder that never runs, T5's ``shared``): where its
    shared parameters are shown."""
    found = shares.get(module) or ()
    if not found:
        return None
    return "; ".join(f"its {s.name} is shown under {', '.join(o.rsplit('.', 1)[0] for o in s.others)}"
                     for s in found)
