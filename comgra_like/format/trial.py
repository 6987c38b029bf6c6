"""trial.json: the status changes a writer makes to a trial's description."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..vocabulary import ABORTED, RUNNING
from .files import LOCAL, Files
from .layout import TRIAL_JSON


def mark_trial_aborted(trial_dir: Path, reason: str, files: Files = LOCAL) -> bool:
    """Set ``status`` of a running trial's trial.json to ``aborted``, with ``abort_reason``
    and ``ended`` (unix time); every other field stays. Returns whether it did.

    Never raises: it runs while a recording ends abnormally, and the shards written
    matter more than the mark (the failure is printed to stderr).
    """
    path = Path(trial_dir) / TRIAL_JSON
    try:
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
