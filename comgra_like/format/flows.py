"""Files of gradient flows and probes (issue 18): the folder layout and the atomic writes.

Two folders inside a trial folder, next to what the writer process writes::

    <group>/trials/<trial_id>/
        flows/<record_id>/            one flow between two nodes, one sample and step
            record.json               what the arrays are (written last: the commit mark)
            flow.npy                  float32; target shape + source shape, or (k,) +
                                      source shape when only the rows in rows.npy are there
            rows.npy                  int64 flat indices into the target (partial flows)
            grad_source.npy, grad_target.npy, value_source.npy, value_target.npy
                                      the sample's gradient and value at both ends
        probes/<probe_id>/            one edited input and what became of it
            input.npy                 the array handed to the served function as it is
            request.json              id, the step and sample it edits (written last)
            result.json               written by the serving process: done or failed

Why not through the writer process: its protocol carries one JSON line per message and
shared-memory slots sized for a step's tensors when the recorder starts; a flow matrix
is megabytes, computed on demand, also after the trial's writer has ended (a probe
served the next day) and by the vnittest importer, which has no writer at all. So these
folders are written directly, through the filesystem seam (:mod:`.files`): every file
under a hidden temporary name and renamed, the JSON that makes a record or request
visible last. A reader takes a record or request only once its JSON is there, so it
never sees a part. The writer process never touches these folders, and nothing here
touches the writer's files. Only numpy's ``.npy`` and JSON: loading never runs code
(``allow_pickle=False``).
"""

from __future__ import annotations

import io
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, NotFoundError, StorageError

# files_for stays importable from here: probe/loop.py reads through ff.files_for
from .files import Files, files_for
from .layout import TrialLayout, is_hidden

FLOWS_DIR = "flows"
PROBES_DIR = "probes"
RECORD_JSON = "record.json"
REQUEST_JSON = "request.json"
RESULT_JSON = "result.json"
INPUT_NPY = "input.npy"
FLOW_NPY = "flow.npy"
ROWS_NPY = "rows.npy"
#: The per-sample arrays stored with a flow, beside ``flow.npy``.
SIDE_ARRAYS = ("grad_source", "grad_target", "value_source", "value_target")

#: Bumped when a field changes meaning; readers refuse newer records.
FLOWS_FORMAT_VERSION = 1

#: Flow status values in record.json (missing: an imported pair without a matrix).
COMPLETE, PARTIAL, TOO_LARGE, MISSING = "complete", "partial", "too_large", "missing"
#: Probe status values (request.json without result.json is pending).
PENDING, DONE, FAILED = "pending", "done", "failed"

_ID_RE = re.compile(r"^[A-Za-z0-9._-]+\Z")


_last_ms = 0
_id_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A unique name that sorts by creation time (milliseconds, then random).

    Within one process the millisecond part strictly increases, so ids made in the same
    millisecond (three edits saved at once) still sort in the order they were made: the
    probe loop serves them, and the history lists them, in that order."""
    global _last_ms
    with _id_lock:
        ms = max(time.time_ns() // 1_000_000, _last_ms + 1)
        _last_ms = ms
    return f"{prefix}{ms:013d}-{secrets.token_hex(4)}"


def check_id(value: str, what: str) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value) or value in (".", ".."):
        raise ConfigurationError(
            f"{what} {value!r} is not usable as a folder name: use letters, digits, '.', "
            "'_' and '-' only")
    return value


def trial_root(group: str | os.PathLike, trial_id: str) -> Path:
    return TrialLayout.of(Path(group), check_id(trial_id, "trial_id")).root


def flows_dir(group: str | os.PathLike, trial_id: str) -> Path:
    return trial_root(group, trial_id) / FLOWS_DIR


def probes_dir(group: str | os.PathLike, trial_id: str) -> Path:
    return trial_root(group, trial_id) / PROBES_DIR


def require_trial(group: str | os.PathLike, trial_id: str, files: Files | None = None) -> Path:
    """The trial's folder; a clear error when the group has no such trial."""
    files = files or files_for(group)
    root = trial_root(group, trial_id)
    if not files.is_file(root / "trial.json"):
        raise NotFoundError(
            f"the group {group} has no trial {trial_id!r} (no {root / 'trial.json'}): "
            "record the trial first, or pass the trial_id the recorder was given")
    return root


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` file of a numeric array (object arrays refused: they need pickle)."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise ConfigurationError(
            f"an array of dtype {array.dtype} cannot be stored without pickle: pass numbers")
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    """Read a stored array; memory-mapped by default, so a page can read one row of a
    large flow without loading all of it."""
    files = files_for(path)
    try:
        if files.remote:  # an object is read whole: no memory map of a remote file
            return np.load(io.BytesIO(files.read_bytes(path)), allow_pickle=False)
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e


def write_record(folder: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                 marker: str, files: Files | None = None) -> None:
    """Write ``arrays`` as ``<name>.npy`` into ``folder``, then ``marker`` (JSON): readers
    take the folder as complete once the marker exists."""
    files = files or files_for(folder)
    files.make_folder(folder)
    for name, array in arrays.items():
        files.write_bytes(folder / f"{name}.npy", npy_bytes(array))
    files.write_json(folder / marker, dict(meta))


def committed(folder: Path, marker: str, files: Files | None = None) -> list[str]:
    """Names of the sub-folders of ``folder`` whose ``marker`` exists, sorted (= by time)."""
    files = files or files_for(folder)
    return sorted(name for name in files.list(folder)
                  if not is_hidden(name) and files.is_file(folder / name / marker))


def write_flow(group: str | os.PathLike, trial_id: str, meta: Mapping[str, Any],
               arrays: Mapping[str, np.ndarray], files: Files | None = None) -> str:
    """Store one flow record; returns its id. ``meta`` holds the fields of record.json
    (docs/FORMAT.md, "flows"); id, trial and format version are added here."""
    files = files or files_for(group)
    require_trial(group, trial_id, files)
    record_id = new_id("f")
    full = {**meta, "record_id": record_id, "trial_id": trial_id,
            "format_version": FLOWS_FORMAT_VERSION, "created": time.time()}
    write_record(flows_dir(group, trial_id) / record_id, full, arrays, RECORD_JSON, files)
    return record_id


# ----- probes: the GUI's side (no torch) ----------------------------------------------


#: What :func:`submit_input` keeps per trial (the Flow page's Save writes through it): at
#: most this many saved inputs, holding at most this many bytes of input arrays together.
#: A Save beyond either is refused with a StorageError saying so; delete old folders
#: under ``trials/<trial>/probes/`` to make room.
MAX_PROBES_PER_TRIAL = 500
MAX_PROBE_BYTES_PER_TRIAL = 256 * 2**20
#: A note longer than this is refused; rows: at most this many units per probe.
MAX_NOTE_CHARS = 1000
MAX_ROWS_PER_PROBE = 4096

_submit_lock = threading.Lock()  # the bound's check and the write, one Save at a time


def submit_input(group: str | os.PathLike, trial_id: str, array: np.ndarray, *,
                 training_step: int | None = None, sample: int = 0,
                 rows: Mapping[str, list[int]] | None = None, note: str = "",
                 like: str | None = None, files: Files | None = None) -> str:
    """Save an edited input for the process serving probes of ``trial_id``; returns the
    probe id.

    ``array`` is handed to the served function as it is (with the batch dimension the
    function expects); ``sample`` is the sample of that batch whose flows are computed,
    ``training_step`` the recorded step the edit starts from (stored for the page).
    ``rows`` asks for single units where a full flow is too large: target node name ->
    flat indices of its units (per sample). ``like``: the id of a stored flow record
    whose source is the node edited (the first pair of a chain); the array must then be
    a batch of that record's input: its sample shape and dtype (float32, as recorded),
    with ``sample`` inside the batch. Written atomically: the serving process sees the
    request whole or not at all.

    Bounded per trial (:data:`MAX_PROBES_PER_TRIAL` inputs, :data:`MAX_PROBE_BYTES_PER_TRIAL`
    bytes of inputs): beyond, nothing is written and a StorageError says which bound.
    """
    files = files or files_for(group)
    root = require_trial(group, trial_id, files)
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise ConfigurationError(
            f"the edited input has dtype {array.dtype}; pass an array of numbers")
    if not isinstance(sample, (int, np.integer)) or sample < 0:
        raise ConfigurationError(f"sample must be an integer >= 0, not {sample!r}")
    if like is not None:
        _check_like(group, trial_id, like, array, int(sample), files)
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise ConfigurationError(
            f"the note must be a text of at most {MAX_NOTE_CHARS} characters")
    clean_rows = None
    if rows is not None:
        clean_rows = {}
        for name, indices in rows.items():
            flat = np.asarray(indices).ravel()
            if flat.size > MAX_ROWS_PER_PROBE or (flat.size and flat.dtype.kind not in "iu"):
                raise ConfigurationError(
                    f"rows for {name!r} must be at most {MAX_ROWS_PER_PROBE} integer unit "
                    "indices")
            values = [int(i) for i in flat]
            if any(i < 0 for i in values):
                raise ConfigurationError(f"rows for {name!r} must be flat indices >= 0")
            clean_rows[str(name)] = values
    with _submit_lock:
        _check_room(root / PROBES_DIR, trial_id, array.nbytes, files)
        probe_id = new_id("p")
        meta = {"probe_id": probe_id, "trial_id": trial_id,
                "format_version": FLOWS_FORMAT_VERSION, "created": time.time(),
                "training_step": None if training_step is None else int(training_step),
                "sample": int(sample), "rows": clean_rows, "note": note,
                "shape": list(array.shape), "dtype": str(array.dtype)}
        write_record(root / PROBES_DIR / probe_id, meta, {"input": array}, REQUEST_JSON,
                     files)
    return probe_id


def _check_like(group: str | os.PathLike, trial_id: str, record_id: str, array: np.ndarray,
                sample: int, files: Files) -> None:
    """Refuse ``array`` unless it is a batch of the input of flow record ``record_id``."""
    path = flows_dir(group, trial_id) / check_id(record_id, "record_id") / RECORD_JSON
    if not files.is_file(path):
        raise NotFoundError(f"trial {trial_id!r} has no flow record {record_id!r}: no "
                            "recorded input to check the edited one against")
    try:
        meta = files.read_json(path)
        source, shape = str(meta["source"]), tuple(int(s) for s in meta["source_shape"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e
    if array.ndim != len(shape) + 1 or tuple(array.shape[1:]) != shape:
        batch = f"(batch, {', '.join(map(str, shape))})" if shape else "(batch,)"
        raise ConfigurationError(
            f"the edited input has shape {tuple(array.shape)}; the chain's input "
            f"{source!r} is recorded with shape {shape} per sample, so a batch of it has "
            f"shape {batch}")
    if array.dtype != np.float32:
        raise ConfigurationError(
            f"the edited input has dtype {array.dtype}; the chain's input {source!r} is "
            "recorded as float32")
    if sample >= array.shape[0]:
        raise ConfigurationError(
            f"sample {sample} is not in the edited batch of {array.shape[0]}")


def _check_room(folder: Path, trial_id: str, nbytes: int, files: Files) -> None:
    """Refuse a new input beyond the trial's bounds on saved inputs (count and bytes)."""
    names = [n for n in files.list(folder) if not is_hidden(n)]
    if len(names) >= MAX_PROBES_PER_TRIAL:
        raise StorageError(
            f"not saved: trial {trial_id!r} holds {len(names)} saved inputs, the most "
            f"comgra keeps per trial (MAX_PROBES_PER_TRIAL = {MAX_PROBES_PER_TRIAL}); "
            f"delete old ones (folders in {folder}) to make room")
    used = 0
    for name in names:
        try:
            meta = files.read_json(folder / name / REQUEST_JSON)
            used += int(np.prod(meta["shape"], dtype=np.int64)) * np.dtype(
                meta["dtype"]).itemsize
        except (OSError, ValueError, KeyError, TypeError):
            signature = files.signature(folder / name / INPUT_NPY)  # no request.json yet
            used += signature[1] if signature else 0
    if used + nbytes > MAX_PROBE_BYTES_PER_TRIAL:
        mib = 2**20
        raise StorageError(
            f"not saved: trial {trial_id!r} holds {used / mib:.1f} MiB of saved inputs; "
            f"this one ({nbytes / mib:.1f} MiB) would pass the bound of "
            f"{MAX_PROBE_BYTES_PER_TRIAL / mib:.0f} MiB per trial "
            f"(MAX_PROBE_BYTES_PER_TRIAL); delete old ones (folders in {folder}) to make "
            "room")


def pending_probes(group: str | os.PathLike, trial_id: str,
                   files: Files | None = None) -> list[str]:
    """Probe ids with a request and no result yet, oldest first."""
    files = files or files_for(group)
    folder = probes_dir(group, trial_id)
    return [p for p in committed(folder, REQUEST_JSON, files)
            if not files.exists(folder / p / RESULT_JSON)]


def write_probe_result(group: str | os.PathLike, trial_id: str, probe_id: str,
                       result: Mapping[str, Any], files: Files | None = None) -> None:
    files = files or files_for(group)
    files.write_json(probes_dir(group, trial_id) / probe_id / RESULT_JSON, dict(result))
