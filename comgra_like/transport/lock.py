"""One recorder per trial and rank: an advisory lock on ``trials/.<trial_id>.lock`` (rank 0,
and every single-process recording), ``trials/.<trial_id>.lock.r<rank>`` for the other
ranks of a distributed job. The ranks of one trial never wait for each other: each writes
names of its own (docs/FORMAT.md, "Recording ranks").

A recorder takes the lock before it replaces an earlier recording of its trial, and its
writer process inherits it (the same open file), so the trial stays locked until both
have ended: a training process that was killed leaves the lock to its writer, which
releases it when it exits, and nothing is left that could go stale (the kernel drops a
lock with the last process that holds it). The file itself stays; its name starts with
``.``, so readers skip it, and it holds the pid of the last process that took it.

The lock is ``flock``: advisory, per open file, on the local machine (and on network file
systems that support it). Where there is no ``fcntl`` (Windows) no lock is taken.
"""

from __future__ import annotations

import errno
import logging
import os
import weakref
from pathlib import Path

from ..errors import StorageError
from ..format.layout import trial_lock

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

log = logging.getLogger("comgra_like")


class TrialLock:
    """The lock of one trial, held while ``fd`` is open (in this process or the writer)."""

    def __init__(self, fd: int | None, path: Path):
        self.fd = fd
        self.path = path
        # A recorder dropped without finalize() must not keep its trial locked for as
        # long as this process lives.
        self._closer = weakref.finalize(self, os.close, fd) if fd is not None else None

    @classmethod
    def take(cls, group: Path, trial_id: str, rank: int = 0) -> TrialLock:
        """Lock the trial's rank, or raise a StorageError that names it and what to do.

        The group's ``trials`` folder must exist.
        """
        path = trial_lock(group, trial_id, rank)
        what = f"trial {trial_id!r}" + (f" rank {rank}" if rank else "")
        if fcntl is None:  # pragma: no cover - Windows
            return cls(None, path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(
                f"cannot create the lock file {path} of trial {trial_id!r} "
                f"({type(e).__name__}: {e.strerror or e}); check that the folder is writable"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                # e.g. a network file system without locks: record, but say so
                log.warning("comgra_like: cannot lock %s (%s); a second recorder of %s "
                            "would not be refused", path, e, what)
                return cls(fd, path)
            holder = _holder(fd)
            os.close(fd)
            raise StorageError(
                f"{what} in {group} is being recorded by another recorder "
                f"({holder}, or its writer process, which finishes writing after it); two "
                "recorders of one trial and rank would destroy each other's data. Give this "
                "recorder another trial_id; processes of one torch.distributed job record "
                "one trial together when each has its own rank (torch.distributed "
                "initialized, or the RANK and WORLD_SIZE environment variables set). If that "
                "recording is over, call its finalize() or wait until its writer process "
                "has ended"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # only the error message of a second recorder uses the pid
        return cls(fd, path)

    def release(self) -> None:
        """Close this process's handle (a writer process that inherited it keeps the lock
        until it exits)."""
        if self._closer is not None:
            self.fd = None
            self._closer()


def _holder(fd: int) -> str:
    try:
        pid = int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return "another process"
    return f"process {pid}"
