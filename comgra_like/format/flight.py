"""Files of the flight recorder (issue 30): the ``flight/`` folder of a trial.

When an armed :class:`comgra_like.FlightRecorder` fires a trigger, the training process
writes the window it kept in memory, directly through the filesystem seam (like
``flows/``; the writer process never touches this folder)::

    <group>/trials/<trial_id>/flight/
        <seq>-r<rank>-step<step>.stats.parquet   one row per step, tensor and role of the
                                                 window: the summary statistics
        <seq>-r<rank>-step<step>.full.parquet    the full values of the last full_steps
                                                 steps (flattened float32, with shapes)
        <seq>-r<rank>-step<step>.json            the trigger: kind, step, tensor, value,
                                                 the window's steps (written last: the
                                                 commit mark; a reader ignores a window
                                                 without it)

Every file is written under a hidden temporary name and renamed (``files.py``), so a
reader never sees a part, and nothing is lost when the process is killed after the
write returned. Parquet and JSON only: loading never runs code. No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import StorageError
from .files import Files, StoreUnreachable, files_for, unreachable
from .layout import TrialLayout

FLIGHT_DIR = "flight"
#: Bumped when a field changes meaning; readers skip newer windows.
FLIGHT_FORMAT_VERSION = 1

#: The statistics kept for every tensor and role on every step, in this order.
STATISTICS: tuple[str, ...] = ("mean", "std", "abs_max", "l2_norm", "nan_count", "inf_count")
#: The statistics that are values of the tensor, and the counts of non-finite elements.
VALUE_STATISTICS, COUNT_STATISTICS = STATISTICS[:4], STATISTICS[4:]


def non_finite_rows(statistics: np.ndarray) -> np.ndarray:
    """Which rows (columns in ``STATISTICS`` order) hold a NaN or Inf: a NaN or Inf
    count above 0, or an abs max that is not finite (exact: the largest magnitude is
    finite exactly when every value is). A mean, std or L2 norm that is not finite
    alone is no NaN: a float32 sum of squares overflows for magnitudes over ~1e19, and a
    GPU's batched sums are unknown after a NaN in an earlier tensor of their chunk."""
    v = np.asarray(statistics, dtype=np.float64).reshape(-1, len(STATISTICS))
    with np.errstate(invalid="ignore"):
        return (v[:, 4] > 0) | (v[:, 5] > 0) | ~np.isfinite(v[:, 2])


#: Roles of a row: a tensor's value, its gradient, a parameter's update, a KPI.
VALUE, GRADIENT, UPDATE, KPI = "value", "gradient", "update", "kpi"
#: Trigger kinds.
NON_FINITE, LOSS_SPIKE, GRAD_NORM_SPIKE, UPDATE_SPIKE, PREDICATE = (
    "non_finite", "loss_spike", "grad_norm_spike", "update_spike", "predicate")
TRIGGER_KINDS: tuple[str, ...] = (NON_FINITE, LOSS_SPIKE, GRAD_NORM_SPIKE, UPDATE_SPIKE,
                                  PREDICATE)

STATS_SCHEMA = pa.schema(
    [("training_step", pa.int64()), ("order", pa.int32()), ("name", pa.string()),
     ("node", pa.string()), ("role", pa.string()), ("kind", pa.string()),
     ("numel", pa.int64())]
    + [(s, pa.float64()) for s in STATISTICS]
)
FULL_SCHEMA = pa.schema(
    [("training_step", pa.int64()), ("name", pa.string()), ("role", pa.string()),
     ("shape", pa.list_(pa.int64())), ("values", pa.list_(pa.float32()))]
)

_NAME_RE = re.compile(r"^(\d+)-r(\d+)-step(-?\d+)\.json\Z")


def flight_folder(trial_path: str | Path) -> Path:
    return Path(trial_path) / FLIGHT_DIR


def window_name(seq: int, rank: int, step: int) -> str:
    """The common stem of a window's files; sorts by ``seq`` within a rank."""
    return f"{int(seq):04d}-r{int(rank)}-step{int(step)}"


def write_window(trial_path: str | Path, seq: int, rank: int, trigger: Mapping[str, Any],
                 stats: Mapping[str, Sequence], full: Sequence[tuple[int, str, str,
                                                                     np.ndarray]]) -> str:
    """Write one triggered window; returns its name. ``stats``: columns of
    :data:`STATS_SCHEMA`; ``full``: (step, name, role, array) of the full values."""
    folder = flight_folder(trial_path)
    files = files_for(folder)
    name = window_name(seq, rank, trigger["step"])
    table = pa.table({f.name: pa.array(stats[f.name], type=f.type) for f in STATS_SCHEMA},
                     schema=STATS_SCHEMA)
    files.make_folder(folder)
    files.write_parquet(folder / f"{name}.stats.parquet", table)
    full_table = pa.table({
        "training_step": pa.array([int(s) for s, _, _, _ in full], pa.int64()),
        "name": pa.array([n for _, n, _, _ in full], pa.string()),
        "role": pa.array([r for _, _, r, _ in full], pa.string()),
        "shape": pa.array([list(a.shape) for _, _, _, a in full], pa.list_(pa.int64())),
        "values": pa.array([np.ascontiguousarray(a, np.float32).reshape(-1) for *_, a in full],
                           pa.list_(pa.float32())),
    }, schema=FULL_SCHEMA)
    files.write_parquet(folder / f"{name}.full.parquet", full_table)
    record = {"format_version": FLIGHT_FORMAT_VERSION, "name": name, "seq": int(seq),
              "rank": int(rank), **{k: _plain(v) for k, v in trigger.items()}}
    files.write_json(folder / f"{name}.json", record)
    return name


def list_windows(trial_path: str | Path, files: Files | None = None) -> list[dict]:
    """The committed windows of a trial (their trigger records), oldest first per rank.

    A damaged record is skipped like a damaged shard. A folder or record the store could
    not read now (a connection refused, a timeout, an I/O error) raises StoreUnreachable
    (a StorageError): a window never vanishes from the list without a word; the next
    call reads it again."""
    folder = flight_folder(trial_path)
    files = files or files_for(folder)
    out = []
    # empty when there is no folder; StoreUnreachable (not empty) when it cannot be
    # listed now
    for fname in sorted(files.list_now(folder)):
        m = _NAME_RE.match(fname)
        if not m:
            continue
        try:
            record = files.read_json(folder / fname)
        except (OSError, ValueError, StorageError) as e:
            if unreachable(e):
                raise StoreUnreachable(
                    f"the flight window {fname[:-len('.json')]} of {files.display(folder)} "
                    f"could not be read now ({type(e).__name__}: "
                    f"{' '.join(str(e).split())}); it is read again at the next call") from e
            continue  # damaged (or deleted since): skipped like a damaged shard
        if not isinstance(record, dict) or record.get("format_version", 0) > FLIGHT_FORMAT_VERSION:
            continue
        out.append(record)
    out.sort(key=lambda r: (r.get("rank", 0), r.get("seq", 0)))
    return out


def read_window_stats(trial_path: str | Path, name: str, files: Files | None = None) -> pa.Table:
    folder = flight_folder(trial_path)
    files = files or files_for(folder)
    return files.read_parquet(folder / f"{name}.stats.parquet")


def read_window_full(trial_path: str | Path, name: str, files: Files | None = None) -> pa.Table:
    folder = flight_folder(trial_path)
    files = files or files_for(folder)
    return files.read_parquet(folder / f"{name}.full.parquet")


def trial_flight_folder(group: Path, trial_id: str) -> Path:
    return flight_folder(TrialLayout.of(Path(group), trial_id).root)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
