"""trial.json: the changes a writer makes to a trial's description (its status, the
flight recorder's triggers)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..vocabulary import ABORTED, RUNNING
from .files import Files, files_for
from .layout import TRIAL_JSON


def mark_trial_aborted(trial_dir: Path, reason: str, files: Files | None = None) -> bool:
    """Set ``status`` of a running trial's trial.json to ``aborted``, with ``abort_reason``
    and ``ended`` (unix time); every other field stays. Returns whether it did.

    On object storage the rewrite is a whole-object overwrite, which S3 makes atomic like
    the rename on disk. Never raises: it runs while a recording ends abnormally, and the shards written
    matter more than the mark (the failure is printed to stderr).
    """
    path = Path(trial_dir) / TRIAL_JSON
    try:
        files = files or files_for(trial_dir)
        info = files.read_json(path)
        if not isinstance(info, dict) or info.get("status") != RUNNING:
            return False  # finished, or marked already: the first reason is the one kept
        info["status"] = ABORTED
        info["abort_reason"] = reason
        info["ended"] = time.time()
        files.write_json(path, info)
        return True
    except Exception as e:  # noqa: BLE001 - see above
        print(f"comgra_like: could not mark {path} as aborted ({type(e).__name__}: {e})",
              file=sys.stderr)
        return False


def replace_object_trial(trial_dir: Path) -> None:
    """Make room for a recording in an object store: delete an earlier recording of the
    same trial (every object under its prefix), and check that the store can be reached.

    An object store has no lock files: one recorder per trial is the user's part there
    (docs/FORMAT.md, "Object storage").
    """
    files = files_for(trial_dir)
    try:
        if files.exists(Path(trial_dir) / TRIAL_JSON) or files.list(trial_dir):
            print(f"comgra_like: replacing the existing recording {files.display(trial_dir)}",
                  file=sys.stderr)
            files.remove_tree(trial_dir)
    except OSError as e:
        raise StorageError(
            f"cannot reach {files.display(trial_dir)} to record there ({type(e).__name__}: "
            f"{' '.join(str(e).split())}); check the bucket's name, the AWS_* environment "
            "variables (credentials, AWS_ENDPOINT_URL for an S3-compatible server) and that "
            "the bucket exists") from None


# ----- the flight recorder's triggers ---------------------------------------------------

#: trial.json's list of the flight recorder's triggers, in the order they came
FLIGHT_TRIGGERS = "flight_triggers"
#: trial.json's count of the triggers beyond the first FLIGHT_TRIGGERS_KEPT (not listed)
FLIGHT_TRIGGERS_DROPPED = "flight_triggers_dropped"
#: how many triggers trial.json lists: the first ones (the first names the cause)
FLIGHT_TRIGGERS_KEPT = 100

# JSON has no NaN or infinity: trial.json spells them as Python's float() reads them.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def json_number(value: float | None) -> float | str | None:
    """A number as trial.json stores it: finite as itself, else "NaN", "Infinity" or
    "-Infinity" (``float()`` reads them back)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else _NON_FINITE[repr(value)]


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON: mappings with string keys, lists, strings, booleans,
    None and numbers (non-finite ones as strings, :func:`json_number`); anything else as
    its ``str()``. Nesting beyond 8 levels is cut to a string too."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return json_number(value)
    if depth < 8:
        if isinstance(value, Mapping):
            return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [json_safe(v, depth + 1) for v in value]
    try:  # numpy and torch scalars (a 0-d tensor's item())
        item = value.item()
    except Exception:  # noqa: BLE001 - whatever it is, it is shown as text
        return str(value)
    if isinstance(item, (bool, int, float)):
        return json_safe(item, depth + 1)
    return str(value)


def add_flight_trigger(info: dict, trigger: Mapping[str, Any],
                       keep: int = FLIGHT_TRIGGERS_KEPT) -> bool:
    """Add one trigger (already plain JSON, see :func:`json_safe`) to a trial.json's
    ``info``, in place: listed under :data:`FLIGHT_TRIGGERS` while fewer than ``keep``
    are, else counted in :data:`FLIGHT_TRIGGERS_DROPPED`. Returns whether it is listed."""
    listed = info.setdefault(FLIGHT_TRIGGERS, [])
    if len(listed) < keep:
        listed.append(dict(trigger))
        return True
    info[FLIGHT_TRIGGERS_DROPPED] = int(info.get(FLIGHT_TRIGGERS_DROPPED, 0)) + 1
    return False


def write_flight_triggers(trial_dir: Path, info: Mapping[str, Any],
                          files: Files | None = None) -> None:
    """Write the triggers of ``info`` (the writer's trial.json, :func:`add_flight_trigger`)
    into the trial's trial.json, atomically (a rename on disk, a whole object on a store).

    The file is read first and every other field kept as it is there: the status may
    have changed meanwhile (marked aborted by the training process)."""
    path = Path(trial_dir) / TRIAL_JSON
    files = files or files_for(trial_dir)
    try:
        current = files.read_json(path)
    except (FileNotFoundError, ValueError):  # others (a store away) raise: retried
        current = None
    if not isinstance(current, dict):
        current = dict(info)
    current[FLIGHT_TRIGGERS] = [dict(t) for t in info.get(FLIGHT_TRIGGERS) or []]
    if info.get(FLIGHT_TRIGGERS_DROPPED):
        current[FLIGHT_TRIGGERS_DROPPED] = int(info[FLIGHT_TRIGGERS_DROPPED])
    files.write_json(path, current)


def flight_triggers(info: Mapping[str, Any]) -> tuple[list[dict], int]:
    """The triggers a trial.json lists (their ``value`` a float again, NaN and infinities
    included) and how many more were not listed."""
    listed = []
    for entry in info.get(FLIGHT_TRIGGERS) or []:
        if not isinstance(entry, Mapping):
            continue
        entry = dict(entry)
        value = entry.get("value")
        if isinstance(value, str):
            try:
                entry["value"] = float(value)
            except ValueError:
                pass
        listed.append(entry)
    dropped = info.get(FLIGHT_TRIGGERS_DROPPED, 0)
    return listed, int(dropped) if isinstance(dropped, (int, float)) else 0
