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


#: The column that marks a row as flight data (True) or regularly recorded (False).
FLIGHT_COLUMN = "flight"
#: The column naming the window (the trigger) a flight row comes from; None for the
#: regularly recorded rows.
TRIGGER_COLUMN = "trigger"
#: What a flight row's ``role`` becomes as a ``recording_type`` of read_statistics
#: (a gradient's loss group is not known to the flight recorder: see
#: ``read_flight_statistics(gradient_type=...)``).
_RECORDING_TYPE = {ff.VALUE: "forward", ff.UPDATE: "update"}


def read_flight_statistics(group: str | os.PathLike, trial_id: str, *, nodes: Any = None,
                           recording_types: Any = None, statistics: Any = None,
                           steps: Any = None, name: str | None = None,
                           gradient_type: str = "gradient:default") -> pd.DataFrame:
    """A trial's flight windows as rows of the same shape as ``Group.read_statistics``,
    so that a chart draws the dense window among the sparsely recorded steps.

    Columns: ``STATISTICS_KEY_COLUMNS`` (training_step, type_of_execution, iteration,
    node, role, tensor_name, kind, recording_type, aggregation, sample_index), the
    ``statistics`` asked for (all of ``ALL_STATISTICS`` by default), then ``flight``
    (always True here) and ``trigger`` (the window's name, as in ``FlightTrigger.name``
    and ``read_flight``'s ``window``). Ordered by training step, then the order the step
    computed its rows in. One row per step, tensor and quantity of the windows:

    * ``recording_type``: ``"forward"`` for a value, ``gradient_type`` for a gradient
      (the flight recorder does not know the loss group; pass the one your
      ``record_current_gradients`` uses, default ``"gradient:default"``), ``"update"``
      for a parameter's change over the step. The KPIs the flight recorder kept are not
      rows here (``read_flight`` has them, role ``kpi``).
    * ``aggregation`` is ``"none"`` and ``sample_index`` -1: a flight statistic is taken
      over **all** values of the tensor (every sample of the batch), not per sample or
      over the batch dimension like the ``batch_*`` rows. For parameters and losses that
      is what the regular rows hold too (aggregation ``"none"``); for a tensor with a
      batch dimension, compare it with the regular rows knowing that.
    * ``role`` and ``tensor_name``: the tensor's name; ``node``: its node;
      ``type_of_execution``: ``"main_execution_type"``; ``iteration``: -1 for a
      parameter (as the regular rows: parameters are per step), else 0.
    * Statistics: ``mean``, ``std``, ``abs_max``, ``norm`` (the L2 norm), ``nan_count``,
      ``inf_count`` and ``numel`` are kept; ``update_ratio`` of an update row is
      ‖update‖ / ‖value‖ of that parameter at that step; ``abs_mean``, ``min``, ``max``
      and ``svd_top`` are NaN (not kept by the flight recorder).

    Filters as in ``read_statistics``: ``nodes``, ``recording_types``, ``statistics`` (a
    name or a list; None keeps all); ``steps`` a ``range`` (stop excluded) or a
    ``(first, last)`` pair (both included); ``name`` one window only. A step in two
    windows (a cooldown shorter than the window) is taken from the earlier window once.
    A trial without windows gives an empty frame with these columns.
    """
    from .tensors import STATISTICS_KEY_COLUMNS, statistic_names, step_selection

    columns = list(STATISTICS_KEY_COLUMNS) + statistic_names(statistics)
    wanted = step_selection(steps)
    raw = read_flight(group, trial_id, name)
    raw = raw[raw["role"] != ff.KPI]
    if len(raw):
        # a step in two windows: the earlier window's rows, once
        first_window = raw.groupby("training_step")["window"].transform("min")
        raw = raw[raw["window"] == first_window]
    rtype = raw["role"].map({**_RECORDING_TYPE, ff.GRADIENT: gradient_type})
    n = len(raw)
    out = pd.DataFrame({
        "training_step": raw["training_step"].to_numpy(np.int64),
        "type_of_execution": np.full(n, "main_execution_type", object),
        "iteration": np.where(raw["kind"].to_numpy(object) == "parameter", -1, 0).astype(
            np.int32),
        "node": raw["node"].to_numpy(object),
        "role": raw["name"].to_numpy(object),
        "tensor_name": raw["name"].to_numpy(object),
        "kind": raw["kind"].to_numpy(object),
        "recording_type": rtype.to_numpy(object),
        "aggregation": np.full(n, "none", object),
        "sample_index": np.full(n, -1, np.int32),
        "mean": raw["mean"].to_numpy(np.float64),
        "std": raw["std"].to_numpy(np.float64),
        "abs_max": raw["abs_max"].to_numpy(np.float64),
        "norm": raw["l2_norm"].to_numpy(np.float64),
        "nan_count": raw["nan_count"].to_numpy(np.float64),
        "inf_count": raw["inf_count"].to_numpy(np.float64),
        "numel": raw["numel"].to_numpy(np.float64),
        "order": raw["order"].to_numpy(np.int64),
        TRIGGER_COLUMN: raw["window"].to_numpy(object),
    })
    for missing in ("abs_mean", "min", "max", "svd_top"):
        out[missing] = np.nan
    values = out[out["recording_type"] == "forward"].set_index(
        ["training_step", "tensor_name"])["norm"]
    values = values[~values.index.duplicated()]
    ratio = np.full(n, np.nan)
    upd = (out["recording_type"] == "update").to_numpy()
    if upd.any():
        keys = pd.MultiIndex.from_arrays([out["training_step"][upd], out["tensor_name"][upd]])
        denom = values.reindex(keys).to_numpy(np.float64)
        with np.errstate(all="ignore"):
            ratio[upd] = out["norm"][upd].to_numpy() / denom
    out["update_ratio"] = ratio
    keep = np.ones(n, bool)
    if nodes is not None:
        keep &= out["node"].isin([nodes] if isinstance(nodes, str) else list(nodes)).to_numpy()
    if recording_types is not None:
        keep &= out["recording_type"].isin(
            [recording_types] if isinstance(recording_types, str) else list(recording_types)
        ).to_numpy()
    if wanted is not None:
        first, last, every = wanted
        s = out["training_step"].to_numpy()
        keep &= (s >= first) & (s <= last) & ((s - first) % every == 0)
    out = out[keep].sort_values(["training_step", "order"], kind="stable")
    out[FLIGHT_COLUMN] = True
    return out[columns + [FLIGHT_COLUMN, TRIGGER_COLUMN]].reset_index(drop=True)


def statistics_with_flight(group: Any, trial_id: str, *, gradient_type: str | None = None,
                           **filters: Any) -> pd.DataFrame:
    """``group.read_statistics(trial_id, **filters)`` and the trial's flight windows
    (``read_flight_statistics``) in one frame, ordered by training step: the regular
    rows with ``flight`` False and ``trigger`` None, the flight rows with ``flight`` True
    and their window's name. ``group``: an open ``Group`` (``open_group``). ``filters``:
    nodes, recording_types, statistics, steps (the others of read_statistics, e.g.
    aggregations, apply to the regular rows only). ``gradient_type``: the recording type
    a flight gradient row gets; by default the trial's own when it recorded exactly one
    gradient type, else ``"gradient:default"``. A step may have both kinds of rows (a
    recorded step inside a window): tell them apart by ``flight``."""
    regular = group.read_statistics(trial_id, **filters)
    if gradient_type is None:
        grads = [t for t in pd.unique(regular["recording_type"]) if str(t).startswith("gradient:")]
        gradient_type = grads[0] if len(grads) == 1 else "gradient:default"
    shared = {k: filters[k] for k in ("nodes", "recording_types", "statistics", "steps")
              if k in filters}
    flight = read_flight_statistics(group.path, trial_id, gradient_type=gradient_type, **shared)
    regular = regular.assign(**{FLIGHT_COLUMN: False, TRIGGER_COLUMN: None})
    if not len(flight):
        return regular.reset_index(drop=True)
    if not len(regular):
        return flight
    both = pd.concat([regular, flight.astype({c: regular[c].dtype for c in regular.columns
                                              if c in flight.columns and c not in (
                                                  FLIGHT_COLUMN, TRIGGER_COLUMN)},
                                             errors="ignore")],
                     ignore_index=True)
    return both.sort_values("training_step", kind="stable").reset_index(drop=True)
