"""Reading what the flight recorder wrote (issue 30): its triggers and windows.

The ``flight/`` folder of a trial (``format/flight.py``) is listed at each call: a
window is immutable once its JSON is there, so a trigger shows on the next read without
a refresh. ``Group.list_flight_triggers`` and ``Group.read_flight`` call these.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import NotFoundError
from ..format import flight as ff
from ..format.layout import TrialLayout


@dataclass(frozen=True)
class FlightTrigger:
    """One trigger of a flight recorder and the window written for it.

    ``kind``: non_finite, loss_spike, grad_norm_spike, update_spike or predicate;
    ``step``: the training step it fired at; ``tensor``/``node``/``role``: where (for
    non_finite: the first non-finite row in the order the step computed it; for a spike:
    the tensor whose statistic grew most against its window median); ``value``: the
    number that fired it (NaN+Inf count for non_finite); ``window``: first and last step
    of the window; ``others``: further triggers of the same step.
    """

    trial_id: str
    name: str
    rank: int
    seq: int
    kind: str
    step: int
    tensor: str | None
    node: str | None
    role: str | None
    value: float | None
    window: tuple[int, int]
    others: tuple[dict, ...] = ()
    sample_ids: dict[int, list] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def _folder(group: str | os.PathLike, trial_id: str) -> Path:
    return TrialLayout.of(Path(group), trial_id).root


def list_flight_triggers(group: str | os.PathLike, trial_id: str) -> list[FlightTrigger]:
    """Every written window of a trial, oldest first (per rank)."""
    out = []
    for r in ff.list_windows(_folder(group, trial_id)):
        try:
            value = r.get("value")
            out.append(FlightTrigger(
                trial_id=trial_id, name=str(r["name"]), rank=int(r.get("rank", 0)),
                seq=int(r.get("seq", 0)), kind=str(r["kind"]), step=int(r["step"]),
                tensor=r.get("tensor"), node=r.get("node"), role=r.get("role"),
                value=None if value is None else float(value),
                window=(int(r["window"][0]), int(r["window"][1])),
                others=tuple(r.get("triggers", ())[1:]),
                sample_ids={int(k): v for k, v in (r.get("sample_ids") or {}).items()},
                record=r))
        except (KeyError, TypeError, ValueError, IndexError):
            continue  # a damaged record: skipped like a damaged shard
    return out


def read_flight(group: str | os.PathLike, trial_id: str, name: str | None = None
                ) -> pd.DataFrame:
    """The statistics rows of a trial's windows (or of the window ``name``): columns
    training_step, order (position within the step: the order it computed them), name,
    node, role (value, gradient, update, kpi), kind, numel, mean, std, abs_max, l2_norm,
    nan_count, inf_count, window (the window's name) and flight (True: flight data, beside
    the regularly recorded steps of ``read_statistics``)."""
    root = _folder(group, trial_id)
    names = [t.name for t in list_flight_triggers(group, trial_id)]
    if name is not None:
        if name not in names:
            raise NotFoundError(f"trial {trial_id!r} has no flight window {name!r}; it has "
                                f"{', '.join(names) or 'none'}")
        names = [name]
    frames = []
    for n in names:
        table = ff.read_window_stats(root, n).to_pandas()
        table["window"] = n
        frames.append(table)
    if not frames:
        cols = [f.name for f in ff.STATS_SCHEMA] + ["window"]
        frame = pd.DataFrame({c: [] for c in cols})
    else:
        frame = pd.concat(frames, ignore_index=True)
    frame["flight"] = True
    return frame


def read_flight_values(group: str | os.PathLike, trial_id: str, name: str
                       ) -> dict[tuple[int, str, str], np.ndarray]:
    """The full values a window kept (its last ``full_steps`` steps): {(training_step,
    tensor name, role): float32 array in the tensor's shape}."""
    if name not in {t.name for t in list_flight_triggers(group, trial_id)}:
        raise NotFoundError(f"trial {trial_id!r} has no flight window {name!r}")
    table = ff.read_window_full(_folder(group, trial_id), name)
    steps = table.column("training_step").to_pylist()
    names = table.column("name").to_pylist()
    roles = table.column("role").to_pylist()
    shapes = table.column("shape").to_pylist()
    values = table.column("values").combine_chunks() if table.num_rows else None
    out = {}
    for i in range(table.num_rows):
        flat = values[i].values.to_numpy(zero_copy_only=False)
        out[(int(steps[i]), names[i], roles[i])] = np.asarray(flat, np.float32).reshape(
            shapes[i])
    return out
