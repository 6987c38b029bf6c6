"""trial.json: the status changes a writer makes to a trial's description."""

from __future__ import annotations

import sys
import time
from pathlib import Path

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
