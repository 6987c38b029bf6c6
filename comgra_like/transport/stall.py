"""When training stops waiting for its writer: no reply and no sign of work (CPU time,
bytes written) for ``stall_seconds`` ends the wait with a ``StorageError`` that says why
the writer does not go on, and marks the trial aborted."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..format.files import is_object_store
from ..writer.uploads import retry_seconds_from_env
from .channel import WriterChannel

#: Training that waits for the writer gives up after this many seconds in which the
#: writer took in nothing and showed no sign of work: generous, so that a slow disk, on
#: which the writer still makes progress, never trips it.
STALL_SECONDS = 300.0

_STATES = {
    "T": "it is stopped (SIGSTOP, Ctrl-Z or a debugger; `kill -CONT <pid>` resumes it)",
    "t": "it is stopped by a debugger",
    "D": "it waits for the disk (a hung network file system?)",
}


def stall_watch(channel: WriterChannel, stall_seconds: float) -> Callable[[bool], None]:
    """A check, called while training waits with whether a reply came, that gives up on
    the writer (``channel.give_up``, which raises) once it has neither replied nor shown
    activity for ``stall_seconds``."""
    mark = None
    since = time.monotonic()
    limit = stall_seconds
    if is_object_store(channel.trial_dir):
        # a writer waiting for an object store that is away is not stuck: it retries
        # for retry_seconds, then once more as long for what it kept (uploads.py)
        limit = max(limit, 2 * retry_seconds_from_env() + 60)

    def check(replied: bool) -> None:
        nonlocal mark, since
        now = time.monotonic()
        if replied:
            mark, since = None, now
            return
        activity = channel.activity()
        if mark is None or activity[1:] != mark[1:]:
            mark, since = activity, now
        elif now - since > limit:
            channel.give_up(_stuck(channel, activity[0], now - since, stall_seconds))

    return check


def _stuck(channel: WriterChannel, state: str, seconds: float, stall_seconds: float) -> str:
    why = _STATES.get(state, "it neither uses CPU nor writes (a bug in comgra_like's writer: "
                             "please report it)" if state else "it sends no replies")
    return (
        f"{channel.describe()} has taken in no recorded step for {seconds:.0f} s while "
        f"training waited for it: {why}. Training is not held any longer; whatever the "
        "writer had received it writes when it goes on, and the trial is marked aborted. If "
        "the disk is merely this slow, allow more time with the environment variable "
        f"COMGRA_LIKE_WRITER_STALL_SECONDS (now {stall_seconds:g})")
