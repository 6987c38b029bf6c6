"""The Flow page's pure pieces: the history of origins, chains by id, the unit a click
names, the text of an edit's state."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from comgra_like.query.flow_serving import FAILED, PENDING

from ... import flow_figures as ff
from .layout import RUN


def trial_of(selection: Any) -> str | None:
    """The selection's trial (None for anything else the browser sends)."""
    current = selection.get("current") if isinstance(selection, Mapping) else None
    trial = current.get("trial") if isinstance(current, Mapping) else None
    return trial if isinstance(trial, str) else None


def origin_of(info: Any) -> str:
    return RUN if info.probe_id is None else info.probe_id


def history(probes: Sequence[Any]) -> list[dict]:
    """The origins in order: the recorded run, then every edit (oldest first)."""
    entries = [{"label": "recorded run", "value": RUN}]
    for k, p in enumerate(probes, 1):
        note = f" · {p.note}" if p.note else ""
        entries.append({"label": f"edit {k} ({p.status}){note}", "value": p.probe_id})
    return entries


def newest_unseen(values: Sequence[Any], trial: str | None, shown: Any) -> Any:
    """The newest edit of ``values`` that the listing shown before (``shown``, the
    LISTS_KEY of the same trial) did not have, or None. A new edit is followed: an
    interval tick whose call of ``lists`` left before Save and returns after it must not
    take the origin back to the edit shown before."""
    if not (isinstance(shown, list) and len(shown) > 2 and shown[0] == trial
            and isinstance(shown[2], list)):
        return None
    seen = {p[0] for p in shown[2] if isinstance(p, list) and p}
    new = [v for v in values[1:] if v not in seen]
    return new[-1] if new else None


def chains_of(flows: Sequence[Any]) -> dict[str, list[Any]]:
    """The flows by chain id, each chain in order of position (oldest chain first)."""
    chains: dict[str, list[Any]] = {}
    for f in flows:
        chains.setdefault(f.chain_id, []).append(f)
    return {c: sorted(fs, key=lambda f: f.position) for c, fs in chains.items()}


def chain_label(flows: Sequence[Any]) -> str:
    names = [flows[0].source] + [f.target for f in flows] if flows else []
    return f"{' → '.join(names)} (sample {flows[0].sample})" if flows else ""


def chain_names(flows: Sequence[Any]) -> list[str]:
    return [flows[0].source] + [f.target for f in flows] if flows else []


def unit_of_point(point: Mapping[str, Any], shape: Sequence[int]) -> int | None:
    """The unit a click on a heatmap cell of a node of ``shape`` names: by the cell's
    column and row (x, y), or its customdata when those are missing."""
    if not isinstance(point, Mapping):
        return None
    x, y = point.get("x"), point.get("y")
    if _finite(x) and _finite(y):
        return ff.map_layout(shape).unit_at(round(y), round(x))
    unit = point.get("customdata")
    n = math.prod(shape) if shape else 1
    return int(unit) if _finite(unit) and 0 <= unit < n else None


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def clicked_point(click: Any) -> Mapping[str, Any]:
    """The first point of a graph's clickData (an empty mapping for anything else)."""
    points = click.get("points") if isinstance(click, Mapping) else None
    point = points[0] if isinstance(points, list) and points else None
    return point if isinstance(point, Mapping) else {}


def probe_text(probe: Any, k: int, total: int) -> str:
    head = f"edit {k} of {total}"
    if probe.status == PENDING:
        return (f"{head}: pending — waiting for the process serving probes "
                "(comgra_like.probe.serve) to run it")
    if probe.status == FAILED:
        return f"{head}: failed — {probe.error}"
    seconds = f" in {probe.seconds:.2f} s" if probe.seconds is not None else ""
    return f"{head}: done{seconds}" + (f" · {probe.note}" if probe.note else "")

