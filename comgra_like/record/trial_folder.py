"""Making room for a recording: lock its trial (or one rank of it) and delete what an
earlier recording of the same trial left (docs/FORMAT.md, "Recording ranks").

One process records a trial, or one process per recording rank of a distributed job.
A trial another recorder holds is refused before anything is deleted. Replacing deletes
nothing but that trial's own files: the folder must sit directly in the group's
``trials`` folder, and a symbolic link is refused rather than followed. Folders that
cannot be made give a StorageError that names them. On an object store there are no
folders and no lock files: one job per trial is the user's part there.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..errors import StorageError
from ..format.files import files_for, is_object_store
from ..format.layout import NOTES_DIR, TABLES, TrialLayout, shard_rank, trial_lock
from ..format.trial import replace_object_trial
from ..transport.lock import TrialLock

log = logging.getLogger("comgra_like")


def prepare_trial(trial_path: Path, rank: int | None = None, lead: bool = True,
                  recording: tuple[int, ...] = (0,)) -> TrialLock:
    """Lock the trial and delete an earlier recording of it; returns the lock.

    ``rank=None``: one process records the trial and replaces its whole folder. A rank
    of a distributed job (``rank=r``) deletes only its own shards, so the ranks need not
    wait for each other; the lead (the lowest recording rank, ``lead=True``) also deletes
    the files it writes alone (trial.json, modules.json, watch.json) and the shards of
    ranks that do not record this time (not in ``recording``). Graph files are
    content-addressed (every rank writes the same bytes under the same name) and stay.
    """
    group = trial_path.parent.parent
    if is_object_store(trial_path):
        if rank is None:
            replace_object_trial(trial_path)
            return TrialLock(None, trial_lock(group, trial_path.name))
        lock = TrialLock(None, trial_lock(group, trial_path.name, rank))
    else:
        _make_trials_folder(trial_path.parent)
        lock = (TrialLock.take(group, trial_path.name) if rank is None
                else TrialLock.take(group, trial_path.name, rank))
    try:
        if rank is None:
            _replace_folder(trial_path)
        else:
            _replace_rank_files(trial_path, rank, lead, recording)
    except BaseException:
        lock.release()
        raise
    return lock


def _make_trials_folder(trials: Path) -> None:
    try:
        trials.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(
            f"cannot create the folder {trials} for the recording ({type(e).__name__}: "
            f"{e.strerror or e}); check that comgra_root_path is a folder (not a file) you can "
            "write to"
        ) from None


def _refuse_links(trial_path: Path) -> None:
    if trial_path.is_symlink():
        raise StorageError(
            f"{trial_path} is a symbolic link; a recording replaces its trial folder and "
            "will not delete what a link points to. Remove the link or choose another "
            "trial_id"
        )
    if trial_path.exists() and (not trial_path.is_dir()
                                or trial_path.resolve().parent != trial_path.parent.resolve()):
        raise StorageError(
            f"{trial_path} exists and is not a trial folder inside {trial_path.parent}; "
            "remove it or choose another trial_id"
        )


def _replace_folder(trial_path: Path) -> None:
    _refuse_links(trial_path)
    if not trial_path.exists():
        return
    log.warning("comgra_like: replacing the existing recording %s", trial_path)
    try:
        shutil.rmtree(trial_path)
    except OSError as e:
        raise StorageError(
            f"cannot delete the earlier recording {trial_path} to replace it ({e}); "
            "delete it by hand or choose another trial_id"
        ) from None


def _replace_rank_files(trial_path: Path, rank: int, lead: bool,
                        recording: tuple[int, ...]) -> None:
    if not is_object_store(trial_path):
        _refuse_links(trial_path)
    files = files_for(trial_path)
    layout = TrialLayout(trial_path)
    stale = []
    for table in (*TABLES, NOTES_DIR):
        folder = layout.table(table)
        for name in files.list(folder):
            owner = shard_rank(name)
            if owner == rank or (lead and owner is not None and owner not in recording):
                stale.append(folder / name)
    if lead:
        stale += [p for p in (layout.trial_json, layout.modules_json, layout.watch_json,
                              layout.legacy_notes) if files.exists(p)]
    if stale:
        log.warning("comgra_like: rank %d replaces its files of the existing recording %s",
                    rank, trial_path)
    for path in stale:
        try:
            files.remove(path)
        except OSError as e:
            raise StorageError(
                f"cannot delete {path} of an earlier recording to replace it ({e}); "
                "delete the trial folder by hand or choose another trial_id") from None
