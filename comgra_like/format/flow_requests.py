"""Requests for single rows of a flow too large to store whole (issue 18), and the
heartbeat of the process serving probes.

When a flow has more entries than ``max_entries`` its record is ``too_large`` (no
matrix). The GUI, which has no torch and no network, asks for the row of one unit of
the flow's target: it writes a request here; the process running
``comgra_like.probe.serve`` (which has the network) picks it up, runs its function on
the input the flow was computed for (the probe's input, or the recorded sample stored
with the chain), computes that unit's Jacobian row with one backward pass, weights it
by the upstream gradient stored with the record (so the row is the stored flow's even
when the served loss differs from the run's) and stores it as a
``partial`` flow record in ``flows/`` whose ``chain_id`` is :func:`rows_chain_id` of
the asked record, so a reader joins the rows to the record they complete. Files::

    <group>/trials/<trial_id>/flow_requests/
        q<time>-<random>.json          one request (written whole, under a unique name)
        q<time>-<random>.result.json   the serving process's answer: done or failed
        serving.json                   heartbeat of the process serving the trial

The serving process rewrites ``serving.json`` every :data:`HEARTBEAT_SECONDS` while it
runs (from a thread of its own, so a long computation does not stop it) and marks it
stopped when it ends; a page reads it to say whether anyone will answer a request, and
how to start a serving process when nobody will, instead of waiting forever.

No torch here: the GUI writes requests and reads their state; ``probe/loop.py`` serves.
Every file is read and written through the filesystem seam of the group
(:func:`~comgra_like.format.files.files_for`: a local folder or ``s3://``), atomically:
a reader sees a request whole or not at all (locally a hidden name renamed; on S3 one
upload under the final name).

Nothing claims a request (S3 has no rename to claim with): one serving process per
trial is the rule. ``serve`` refuses to start while another process's heartbeat for the
trial is fresh (:func:`serving`). Two started within the same heartbeat interval would
both answer each request: its rows stored twice (equal records; a reader takes either)
and the later result file wins; nothing is lost.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, NotFoundError, StorageError
from . import flows as ff
from .files import Files, files_for
from .layout import is_hidden

REQUESTS_DIR = "flow_requests"
RESULT_SUFFIX = ".result.json"
HEARTBEAT_JSON = "serving.json"
#: How often the serving process rewrites its heartbeat.
HEARTBEAT_SECONDS = 1.0
#: A heartbeat older than this is a process that died (or hangs) without saying so.
STALE_SECONDS = 5.0
#: ``chain_id`` prefix of the partial records that answer row requests.
ROWS_CHAIN_PREFIX = "rows-"
REQUEST_FORMAT_VERSION = 1
#: Bounds on row requests (the Flow page writes one per click of its button): units per
#: request, requests not yet answered, and requests kept per trial. Beyond, nothing is
#: written and a StorageError / ConfigurationError names the bound.
MAX_UNITS_PER_REQUEST = 1024
MAX_PENDING_REQUESTS = 64
MAX_REQUESTS_PER_TRIAL = 5000


def requests_dir(group: str | os.PathLike, trial_id: str) -> Path:
    return ff.trial_root(group, trial_id) / REQUESTS_DIR


def rows_chain_id(record_id: str) -> str:
    """The ``chain_id`` of the row records answering requests for ``record_id``."""
    return ROWS_CHAIN_PREFIX + record_id


def is_rows_chain(chain_id: str | None) -> bool:
    """True for the records that answer row requests (not a chain of their own)."""
    return bool(chain_id) and str(chain_id).startswith(ROWS_CHAIN_PREFIX)


@dataclass(frozen=True)
class RowRequest:
    """A request for the rows of ``units`` of the flow record ``record_id``, and its state."""

    request_id: str
    trial_id: str
    record_id: str
    source: str
    target: str
    units: tuple[int, ...]  # flat indices into one sample of the target
    sample: int
    training_step: int | None
    iteration: int
    probe_id: str | None  # the origin of the asked record: None is the recorded run
    chain_id: str
    position: int
    weighting: str
    created: float
    status: str  # pending | done | failed
    record_ids: tuple[str, ...]  # the row records written (done)
    error: str | None
    seconds: float | None  # the serving process's time for it
    note: str | None = None  # e.g. the served network's values differ from the record's


def _record_meta(group: str | os.PathLike, trial_id: str, record_id: str,
                 files: Files) -> dict:
    path = ff.flows_dir(group, trial_id) / ff.check_id(record_id, "record_id") / ff.RECORD_JSON
    if not files.is_file(path):
        raise NotFoundError(f"trial {trial_id!r} has no flow record {record_id!r} (no {path})")
    try:
        meta = files.read_json(path)
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e
    if not isinstance(meta, dict):
        raise StorageError(f"{path} holds no JSON object")
    return meta


def request_rows(group: str | os.PathLike, trial_id: str, record_id: str,
                 units: Iterable[int], files: Files | None = None) -> str:
    """Ask the serving process for the rows of ``units`` (flat indices into one sample of
    the target node) of the stored flow ``record_id``; returns the request id.

    Refused with a clear error when the record is stored whole (its rows are there) or a
    unit is outside the target. The request is one JSON file, written whole.
    """
    files = files or files_for(group)
    ff.require_trial(group, trial_id, files)
    meta = _record_meta(group, trial_id, record_id, files)
    if meta.get("status") == ff.COMPLETE:
        raise ConfigurationError(
            f"the flow {meta.get('source')} -> {meta.get('target')} ({record_id}) is stored "
            "whole: every unit's row is there already")
    n_target = 1
    for s in meta.get("target_shape", ()):
        n_target *= int(s)
    try:
        wanted = sorted({int(u) for u in units})
    except (TypeError, ValueError) as e:
        raise ConfigurationError(f"units must be integers (flat unit indices): {e}") from e
    if not wanted:
        raise ConfigurationError("ask for at least one unit")
    if len(wanted) > MAX_UNITS_PER_REQUEST:
        raise ConfigurationError(
            f"ask for at most {MAX_UNITS_PER_REQUEST} units per request, not {len(wanted)}")
    if wanted[0] < 0 or wanted[-1] >= n_target:
        raise ConfigurationError(
            f"units of {meta.get('target')!r} are flat indices in [0, {n_target}) (one "
            f"sample of shape {tuple(meta.get('target_shape', ()))}), not {wanted}")
    folder = requests_dir(group, trial_id)
    _check_room(folder, trial_id, files)
    request_id = ff.new_id("q")
    request = {
        "request_id": request_id, "trial_id": trial_id, "record_id": record_id,
        "format_version": REQUEST_FORMAT_VERSION, "created": time.time(), "units": wanted,
        **{k: meta.get(k) for k in ("source", "target", "sample", "training_step",
                                    "iteration", "probe_id", "chain_id", "position",
                                    "weighting")}}
    files.make_folder(folder)
    files.write_json(folder / f"{request_id}.json", request)
    return request_id


def _check_room(folder: Path, trial_id: str, files: Files) -> None:
    """Refuse a new request beyond the trial's bounds (all requests, unanswered ones)."""
    names = set(files.list(folder))
    asked = [n for n in names if n.startswith("q") and n.endswith(".json")
             and not is_hidden(n) and not n.endswith(RESULT_SUFFIX)]
    if len(asked) >= MAX_REQUESTS_PER_TRIAL:
        raise StorageError(
            f"not asked: trial {trial_id!r} holds {len(asked)} row requests, the most comgra "
            f"keeps per trial (MAX_REQUESTS_PER_TRIAL = {MAX_REQUESTS_PER_TRIAL}); delete "
            f"old ones (q*.json in {folder}) to make room")
    pending = sum(1 for n in asked if f"{n[:-len('.json')]}{RESULT_SUFFIX}" not in names)
    if pending >= MAX_PENDING_REQUESTS:
        raise StorageError(
            f"not asked: trial {trial_id!r} has {pending} row requests waiting for the "
            f"serving process (MAX_PENDING_REQUESTS = {MAX_PENDING_REQUESTS}); ask again when "
            "it has answered them")


def _request_ids(folder: Path, files: Files) -> list[str]:
    names = set(files.list(folder))
    return sorted(n[:-len(".json")] for n in names
                  if n.startswith("q") and n.endswith(".json") and not is_hidden(n)
                  and not n.endswith(RESULT_SUFFIX))


def pending_requests(group: str | os.PathLike, trial_id: str,
                     files: Files | None = None) -> list[str]:
    """Request ids without a result yet, oldest first."""
    files = files or files_for(group)
    folder = requests_dir(group, trial_id)
    return [r for r in _request_ids(folder, files)
            if not files.exists(folder / f"{r}{RESULT_SUFFIX}")]


def read_request(group: str | os.PathLike, trial_id: str, request_id: str,
                 files: Files | None = None) -> RowRequest:
    files = files or files_for(group)
    folder = requests_dir(group, trial_id)
    path = folder / f"{ff.check_id(request_id, 'request_id')}.json"
    if not files.is_file(path):
        raise NotFoundError(f"trial {trial_id!r} has no row request {request_id!r}")
    result_path = folder / f"{request_id}{RESULT_SUFFIX}"
    try:
        q = files.read_json(path)
        r = files.read_json(result_path) if files.is_file(result_path) else {}
        if int(q.get("format_version", 1)) > REQUEST_FORMAT_VERSION:
            raise StorageError(f"{path} was written by a newer comgra_like: upgrade it")
        return RowRequest(
            request_id=str(q["request_id"]), trial_id=str(q["trial_id"]),
            record_id=str(q["record_id"]), source=str(q["source"]), target=str(q["target"]),
            units=tuple(int(u) for u in q["units"]), sample=int(q.get("sample") or 0),
            training_step=None if q.get("training_step") is None else int(q["training_step"]),
            iteration=int(q.get("iteration") or 0), probe_id=q.get("probe_id"),
            chain_id=str(q.get("chain_id") or ""), position=int(q.get("position") or 0),
            weighting=str(q.get("weighting") or "gradient"), created=float(q["created"]),
            status=str(r.get("status", ff.PENDING)),
            record_ids=tuple(str(x) for x in r.get("record_ids", ())),
            error=r.get("error"), seconds=r.get("seconds"), note=r.get("note"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StorageError(f"{path} is not a row request ({type(e).__name__}: {e})") from e


def list_requests(group: str | os.PathLike, trial_id: str,
                  files: Files | None = None) -> list[RowRequest]:
    """Every row request of the trial with its state, oldest first."""
    files = files or files_for(group)
    folder = requests_dir(group, trial_id)
    return [read_request(group, trial_id, r, files) for r in _request_ids(folder, files)]


def write_request_result(group: str | os.PathLike, trial_id: str, request_id: str,
                         result: dict, files: Files | None = None) -> None:
    files = files or files_for(group)
    files.write_json(requests_dir(group, trial_id) / f"{request_id}{RESULT_SUFFIX}",
                     dict(result))


# ----- heartbeat ----------------------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    """Whether a process serves the trial, as its heartbeat says."""

    alive: bool
    pid: int | None
    host: str | None
    started: float | None
    beat: float | None  # time of the last heartbeat
    stopped: float | None  # set when the process ended cleanly


def write_heartbeat(group: str | os.PathLike, trial_id: str, *, started: float,
                    stopped: float | None = None, files: Files | None = None) -> None:
    files = files or files_for(group)
    folder = requests_dir(group, trial_id)
    files.make_folder(folder)
    files.write_json(folder / HEARTBEAT_JSON, {
        "pid": os.getpid(), "host": socket.gethostname(), "started": started,
        "beat": time.time(), "stopped": stopped, "interval": HEARTBEAT_SECONDS})


def serving(group: str | os.PathLike, trial_id: str, *, now: float | None = None,
            files: Files | None = None) -> Serving:
    """The trial's serving process: alive when its heartbeat is fresher than
    :data:`STALE_SECONDS` at ``now`` (default: the clock) and it has not stopped."""
    files = files or files_for(group)
    path = requests_dir(group, trial_id) / HEARTBEAT_JSON
    try:
        beat: dict[str, Any] = files.read_json(path) if files.is_file(path) else {}
    except (OSError, ValueError):
        beat = {}  # being replaced on a file system without atomic rename: next tick
    if not isinstance(beat, dict) or not beat:
        return Serving(False, None, None, None, None, None)
    now = time.time() if now is None else now
    last = float(beat.get("beat") or 0.0)
    stopped = beat.get("stopped")
    alive = stopped is None and now - last <= STALE_SECONDS
    return Serving(alive, beat.get("pid"), beat.get("host"), beat.get("started"), last,
                   stopped)


def how_to_serve(group: str | os.PathLike, trial_id: str) -> str:
    """What to run so that requests and edits of ``trial_id`` are answered."""
    return (f"run comgra_like.probe.serve(fn, group={str(group)!r}, trial_id={trial_id!r}) in "
            "the process that has the network (fn(x) runs forward and backward and returns "
            "its FlowChain)")
