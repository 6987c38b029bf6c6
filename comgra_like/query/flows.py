"""Reading gradient flows and probes (issue 18), and grouping units for drawing.

The files are described in :mod:`comgra_like.format.flows` and docs/FORMAT.md
("flows", "probes"). Records and probe requests are immutable once their JSON exists,
so each call lists the folder (cheap: one directory per trial) and parses a record's
JSON once (cached by path and file signature). Flow arrays are memory-mapped: a page that
shows one unit's row reads only that row from disk.

The pure functions :func:`pool_sum`, :func:`blocks_for` and :func:`group_units` turn a
flow with too many units to draw into one between blocks of units; they sum, so the
total flow, every block's outgoing and incoming flow, and the conservation identity
(sum over targets = the source's gradient) hold for the grouped matrix too.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, NotFoundError, StorageError
from ..format import flows as ff
from ..format.files import files_for
from ..format.layout import TrialLayout

#: ``probe_id`` filter value: flows of every origin (the recorded run and all probes).
ANY = "*"


@dataclass(frozen=True)
class FlowInfo:
    """What record.json says about one stored flow (no arrays)."""

    record_id: str
    trial_id: str
    source: str
    target: str
    sample: int
    training_step: int | None
    iteration: int
    status: str  # complete | partial | too_large
    weighting: str  # gradient | none
    source_shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    rows: tuple[int, ...] | None  # flat target indices of a partial flow
    full_entries: int
    probe_id: str | None  # None: recorded by the run itself (or imported)
    chain_id: str
    position: int  # index of the pair in its chain
    origin: str  # comgra_like | vnittest
    created: float
    path: Path


@dataclass
class FlowData:
    """A flow with its arrays (memory-mapped, read-only)."""

    info: FlowInfo
    flow: np.ndarray | None  # target_shape + source_shape, or (k,) + source_shape
    grad_source: np.ndarray | None
    grad_target: np.ndarray | None
    value_source: np.ndarray | None
    value_target: np.ndarray | None


@dataclass(frozen=True)
class ProbeInfo:
    """One edited input and its state: pending, done or failed."""

    probe_id: str
    trial_id: str
    status: str
    created: float
    training_step: int | None
    sample: int
    rows: dict[str, tuple[int, ...]] | None
    note: str
    shape: tuple[int, ...]
    dtype: str
    finished: float | None
    seconds: float | None  # time the served function and the flows took
    error: str | None
    record_ids: tuple[str, ...]  # its flows (read them with read_flow)
    path: Path


def _trial_root(group: Path, trial_id: str) -> Path:
    root = TrialLayout.of(group, ff.check_id(trial_id, "trial_id")).root
    if not files_for(root).is_dir(root):
        raise NotFoundError(f"the group {group} has no trial {trial_id!r}")
    return root


@functools.lru_cache(maxsize=4096)
def _json(path: str, signature: tuple[int, int]) -> Any:
    try:
        return files_for(path).read_json(Path(path))
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e


def _read_json(path: Path) -> Any:
    sig = files_for(path).signature(path)  # records are immutable: read once per version
    if sig is None:
        raise StorageError(f"cannot read {path}: it is gone or cannot be looked at")
    data = _json(str(path), sig)
    if not isinstance(data, dict):
        raise StorageError(f"{path} holds no JSON object")
    if int(data.get("format_version", 1)) > ff.FLOWS_FORMAT_VERSION:
        raise StorageError(f"{path} was written by a newer comgra_like (flows format "
                           f"{data['format_version']}): upgrade comgra_like")
    return data


def _flow_info(path: Path, m: dict) -> FlowInfo:
    try:
        return FlowInfo(
            record_id=str(m["record_id"]), trial_id=str(m["trial_id"]), source=str(m["source"]),
            target=str(m["target"]), sample=int(m.get("sample", 0)),
            training_step=None if m.get("training_step") is None else int(m["training_step"]),
            iteration=int(m.get("iteration", 0)), status=str(m["status"]),
            weighting=str(m.get("weighting", "gradient")),
            source_shape=tuple(int(s) for s in m["source_shape"]),
            target_shape=tuple(int(s) for s in m["target_shape"]),
            rows=None if m.get("rows") is None else tuple(int(r) for r in m["rows"]),
            full_entries=int(m.get("full_entries", 0)), probe_id=m.get("probe_id"),
            chain_id=str(m.get("chain_id", "")), position=int(m.get("position", 0)),
            origin=str(m.get("origin", "comgra_like")), created=float(m.get("created", 0.0)),
            path=path.parent)
    except (KeyError, TypeError, ValueError) as e:
        raise StorageError(f"{path} is not a flow record ({type(e).__name__}: {e})") from e


def list_flows(group: str | os.PathLike, trial_id: str, *, training_step: int | None = None,
               probe_id: str | None = ANY, source: str | None = None,
               target: str | None = None) -> list[FlowInfo]:
    """The stored flows of a trial, oldest first, filtered by step, origin (``probe_id``:
    :data:`ANY`, ``None`` for the run's own flows, or one probe id) and node names."""
    folder = _trial_root(Path(group), trial_id) / ff.FLOWS_DIR
    out = []
    for rid in ff.committed(folder, ff.RECORD_JSON):
        path = folder / rid / ff.RECORD_JSON
        info = _flow_info(path, _read_json(path))
        if training_step is not None and info.training_step != training_step:
            continue
        if probe_id != ANY and info.probe_id != probe_id:
            continue
        if (source is not None and info.source != source) or (
                target is not None and info.target != target):
            continue
        out.append(info)
    return out


def read_flow(group: str | os.PathLike, trial_id: str, record_id: str) -> FlowData:
    """One flow with its arrays; arrays a record does not have are None."""
    folder = _trial_root(Path(group), trial_id) / ff.FLOWS_DIR / ff.check_id(record_id,
                                                                             "record_id")
    path = folder / ff.RECORD_JSON
    if not files_for(path).is_file(path):
        raise NotFoundError(f"trial {trial_id!r} has no flow record {record_id!r}")
    info = _flow_info(path, _read_json(path))

    def load(name: str) -> np.ndarray | None:
        p = folder / f"{name}.npy"
        return ff.load_npy(p) if files_for(p).is_file(p) else None

    return FlowData(info, load("flow"), *(load(n) for n in ff.SIDE_ARRAYS))


def list_probes(group: str | os.PathLike, trial_id: str) -> list[ProbeInfo]:
    """Every probe of a trial, oldest first (the history of edits)."""
    folder = _trial_root(Path(group), trial_id) / ff.PROBES_DIR
    out = []
    for pid in ff.committed(folder, ff.REQUEST_JSON):
        req = _read_json(folder / pid / ff.REQUEST_JSON)
        result_path = folder / pid / ff.RESULT_JSON
        res = _read_json(result_path) if files_for(result_path).is_file(result_path) else {}
        rows = req.get("rows")
        out.append(ProbeInfo(
            probe_id=pid, trial_id=trial_id, status=str(res.get("status", ff.PENDING)),
            created=float(req.get("created", 0.0)),
            training_step=None if req.get("training_step") is None
            else int(req["training_step"]),
            sample=int(req.get("sample", 0)),
            rows=None if rows is None else {k: tuple(v) for k, v in rows.items()},
            note=str(req.get("note", "")), shape=tuple(req.get("shape", ())),
            dtype=str(req.get("dtype", "")), finished=res.get("finished"),
            seconds=res.get("seconds"), error=res.get("error"),
            record_ids=tuple(res.get("record_ids", ())), path=folder / pid))
    return out


def read_probe_input(group: str | os.PathLike, trial_id: str, probe_id: str) -> np.ndarray:
    """The edited input of a probe, as it was submitted."""
    folder = _trial_root(Path(group), trial_id) / ff.PROBES_DIR / ff.check_id(probe_id,
                                                                              "probe_id")
    if not files_for(folder).is_file(folder / ff.REQUEST_JSON):
        raise NotFoundError(f"trial {trial_id!r} has no probe {probe_id!r}")
    return np.array(ff.load_npy(folder / ff.INPUT_NPY, mmap=False))


# ----- grouping units (pure) -------------------------------------------------------------


def pool_sum(array: np.ndarray, blocks: tuple[int, ...]) -> np.ndarray:
    """Sum ``array`` over blocks of ``blocks[k]`` consecutive indices along axis ``k``
    (the last block of an axis may be shorter). Sums are kept: ``pool_sum(x).sum() ==
    x.sum()``, and so is every sum over whole blocks."""
    array = np.asarray(array)
    if len(blocks) != array.ndim:
        raise ConfigurationError(f"one block size per axis: the array has {array.ndim} axes, "
                                 f"{len(blocks)} block sizes were given")
    out = array.astype(np.float64) if array.dtype.kind != "f" else array
    for axis, b in enumerate(blocks):
        if int(b) < 1:
            raise ConfigurationError(f"block sizes must be >= 1, not {b}")
        if b > 1:
            out = np.add.reduceat(out, np.arange(0, out.shape[axis], int(b)), axis=axis)
    return out


def blocks_for(shape: tuple[int, ...], max_units: int) -> tuple[int, ...]:
    """Block sizes for ``shape`` that leave at most ``max_units`` groups: the axis with
    the most groups has its block doubled until the count fits (2-D maps stay maps of
    square-ish blocks)."""
    if max_units < 1:
        raise ConfigurationError(f"max_units must be >= 1, not {max_units}")
    blocks = [1] * len(shape)

    def groups() -> list[int]:
        return [math.ceil(s / b) for s, b in zip(shape, blocks)]

    while math.prod(groups()) > max_units:
        g = groups()
        axis = max(range(len(shape)), key=lambda k: g[k])
        blocks[axis] = min(shape[axis], blocks[axis] * 2)
    return tuple(blocks)


def group_units(flow: np.ndarray, target_shape: tuple[int, ...], source_shape: tuple[int, ...],
                target_blocks: tuple[int, ...], source_blocks: tuple[int, ...]) -> np.ndarray:
    """The flow between blocks of units: shape ``ceil(target_shape / target_blocks) +
    ceil(source_shape / source_blocks)``, each entry the sum of the flows between the
    units of the two blocks. For a partial flow pass ``target_shape=(k,)`` and
    ``target_blocks=(1,)``."""
    flow = np.asarray(flow)
    expected = tuple(target_shape) + tuple(source_shape)
    if flow.shape != expected:
        raise ConfigurationError(f"the flow has shape {flow.shape}, not target + source shape "
                                 f"{expected}")
    return pool_sum(flow, tuple(target_blocks) + tuple(source_blocks))


def flow_links(flow: np.ndarray, source_shape: tuple[int, ...], *,
               rows: tuple[int, ...] | np.ndarray | None = None, min_abs: float = 0.0,
               max_links: int | None = None) -> dict[str, np.ndarray]:
    """The links of a Sankey diagram: ``target``, ``source`` (flat unit indices of one
    sample; a partial flow's targets are its ``rows``) and ``value`` of every entry with
    ``|value| >= min_abs`` (zero entries never), largest ``|value|`` first, at most
    ``max_links`` of them. Works on grouped flows too (then indices are of blocks)."""
    flow = np.asarray(flow)
    n_source = math.prod(source_shape)
    if flow.ndim < len(source_shape) or flow.shape[flow.ndim - len(source_shape):] != tuple(
            source_shape):
        raise ConfigurationError(f"the flow's shape {flow.shape} does not end with the source "
                                 f"shape {tuple(source_shape)}")
    matrix = flow.reshape(-1, n_source)
    if rows is not None and len(rows) != matrix.shape[0]:
        raise ConfigurationError(f"{len(rows)} rows given for a flow of {matrix.shape[0]}")
    magnitude = np.abs(matrix)
    t, s = np.nonzero((magnitude >= min_abs) & (magnitude > 0))
    order = np.argsort(-magnitude[t, s], kind="stable")
    if max_links is not None:
        order = order[:max_links]
    t, s = t[order], s[order]
    target = np.asarray(rows, dtype=np.int64)[t] if rows is not None else t.astype(np.int64)
    return {"target": target, "source": s.astype(np.int64),
            "value": matrix[t, s].astype(np.float64)}
