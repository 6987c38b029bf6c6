"""The writer's writes, in order, with retries while an object store cannot be reached.

Every write of a trial's files that can wait (shards, graphs, modules.json, the
watch report, the final mark) goes through one :class:`Uploader`: a queue of jobs run
one after the other by a thread (or at once, without one). On the local disk a failed
write fails the writer as it always did. On an object store a write that fails for a
reason that may pass (the store refuses connections, times out, is busy) is tried again
with a growing pause, for up to ``retry_seconds`` from the first failure of the outage
(default :data:`RETRY_SECONDS`, environment ``COMGRA_LIKE_STORE_RETRY_SECONDS``).

Meanwhile the writer keeps taking in recorded steps: their rows wait in the queue, up to
``buffer_bytes`` (default :data:`BUFFER_MB` MiB, ``COMGRA_LIKE_STORE_BUFFER_MB``). When
that is full, the writer stops taking in steps, so the training process waits for a free
slot: at most until the store is back or the retry time is up. Nothing is dropped: once
the store answers, the waiting shards are uploaded in the order they were made. When the
retry time is up the writer fails with a :class:`StoreOutage` that names the store, the
write and how long it tried; :meth:`Uploader.salvage` then gives the rows still waiting
and the mark ``aborted`` another ``retry_seconds`` to reach the store.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ..errors import ConfigurationError, StorageError
from ..format.files import Files

RETRY_SECONDS = 120.0
RETRY_SECONDS_ENV = "COMGRA_LIKE_STORE_RETRY_SECONDS"
BUFFER_MB = 256
BUFFER_MB_ENV = "COMGRA_LIKE_STORE_BUFFER_MB"
# The pause after the first failure, doubled after each one up to the longest.
FIRST_PAUSE, LONGEST_PAUSE = 0.25, 5.0

# Words of the AWS SDK's errors (as pyarrow passes them on) that no retry mends.
_PERMANENT = ("ACCESS_DENIED", "NO_SUCH_BUCKET", "INVALID_ACCESS_KEY_ID",
              "SIGNATURE_DOES_NOT_MATCH", "INVALID_SIGNATURE", "UNRECOGNIZED_CLIENT",
              "NOT_IMPLEMENTED", "MISSING_PARAMETER", "VALIDATION")


class StoreOutage(StorageError):
    """The object store could not be reached for longer than the writer retries."""


# A missing file or a refusal is the same on the next try; a StorageError of ObjectFiles
# ("cannot list ...") carries the store's error and is judged by its words.
_NOT_TRANSIENT = (StoreOutage, FileNotFoundError, PermissionError, IsADirectoryError,
                  NotADirectoryError, FileExistsError)


def _number_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigurationError(f"{name}={text!r}: give a number >= 0 (default {default:g})")
    return value


def retry_seconds_from_env() -> float:
    """How long writes to an object store are retried (``COMGRA_LIKE_STORE_RETRY_SECONDS``)."""
    return _number_from_env(RETRY_SECONDS_ENV, RETRY_SECONDS)


def buffer_bytes_from_env() -> int:
    """How much the writer keeps while the store is away (``COMGRA_LIKE_STORE_BUFFER_MB``)."""
    return int(_number_from_env(BUFFER_MB_ENV, BUFFER_MB) * 2**20)


def is_transient(e: BaseException) -> bool:
    """Whether an object store's error may pass if the write is tried again."""
    if not isinstance(e, (OSError, pa.ArrowException)) or isinstance(e, _NOT_TRANSIENT):
        return False
    text = str(e).upper()
    return not any(word in text for word in _PERMANENT)


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


@dataclass
class _Job:
    tasks: list[tuple[Callable[[], None], str]]
    nbytes: int
    done: int = field(default=0)


class Uploader:
    """One trial's writes, run in order (see the module docstring).

    ``submit`` hands over a job (a list of (write, description)); with ``background`` a
    thread runs them and ``submit`` waits only while the one before is still queued (as
    the writer always did) or, during an outage, while the jobs waiting exceed
    ``buffer_bytes``. ``wait`` waits for every job; both raise the error a job failed
    with, which stops the queue until :meth:`salvage`.
    """

    def __init__(self, files: Files, where: str, *, background: bool,
                 retry_seconds: float | None = None, buffer_bytes: int | None = None,
                 say: Callable[[str], None] | None = None):
        self.files = files
        self.where = where  # the store's name in messages (the trial's location)
        self.retry_seconds = retry_seconds_from_env() if retry_seconds is None else retry_seconds
        self.buffer_bytes = buffer_bytes_from_env() if buffer_bytes is None else buffer_bytes
        self._say = say or _say
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._bytes = 0
        self._error: BaseException | None = None
        self._outage_since: float | None = None
        self._salvage_until: float | None = None  # after a failure: salvage()'s deadline
        self.salvage_result: BaseException | None | bool = False  # False: not finished
        self._told_full = False
        self.outages: list[float] = []  # seconds of each outage the writes outlived
        self.retried_writes = 0
        self._background = background
        if background:
            threading.Thread(target=self._run_jobs, name="comgra_like-uploads",
                             daemon=True).start()

    # ----- the writer's side ------------------------------------------------------------

    def submit(self, tasks: list[tuple[Callable[[], None], str]], nbytes: int = 0) -> None:
        """Run ``tasks`` in order after every job submitted before (see the class)."""
        if not tasks:
            return
        if not self._background:
            self.raise_error()
            job = _Job(tasks, nbytes)
            try:
                self._run_job(job)
            except BaseException as e:
                self._error = e
                self._jobs.append(job)  # kept for salvage()
                raise
            return
        with self._cond:
            # appended even after a failure: salvage() writes it
            self._jobs.append(_Job(tasks, nbytes))
            self._bytes += nbytes
            self._cond.notify_all()
            while self._error is None and self._must_wait():
                self._cond.wait(1.0)
            if self._error is not None:
                raise self._error

    def _must_wait(self) -> bool:
        if len(self._jobs) <= 2:  # the one being written and the one after it
            return False
        if self._outage_since is None:
            return True
        if self._bytes <= self.buffer_bytes:
            return False
        if not self._told_full:
            self._told_full = True
            self._say(
                f"the {self.buffer_bytes / 2**20:.0f} MiB kept for the steps recorded while "
                f"{self.where} cannot be reached are full ({BUFFER_MB_ENV}): the writer takes "
                "in no more steps until the store answers, so training waits for it (at most "
                f"until the {self.retry_seconds:g} s of retries are up)")
        return True

    def wait(self) -> None:
        """Return once every job submitted is done; raises the error one failed with."""
        with self._cond:
            while self._jobs and self._error is None:
                self._cond.wait(1.0)
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    @property
    def pending(self) -> int:
        """Jobs not written yet."""
        return len(self._jobs)

    def salvage(self, tasks: list[tuple[Callable[[], None], str]], nbytes: int = 0) -> None:
        """After a failure: append ``tasks`` (what was still buffered, the mark aborted)
        and give the jobs waiting another ``retry_seconds`` to reach the store, in the
        background (``settle`` waits for them). Without a thread, before it returns."""
        with self._cond:
            if tasks:
                self._jobs.append(_Job(tasks, nbytes))
                self._bytes += nbytes
            self._salvage_until = time.monotonic() + self.retry_seconds
            self._outage_since = None
            self._error = None
            if not self._jobs:
                self.salvage_result = None
            self._cond.notify_all()
        if not self._background:
            try:
                while self._jobs:
                    self._run_job(self._jobs[0])
                    self._jobs.popleft()
                self.salvage_result = None
            except BaseException as e:  # noqa: BLE001 - the outcome is reported
                self.salvage_result = e

    def settle(self, timeout: float | None = None) -> BaseException | None | bool:
        """Wait for ``salvage`` to end (None: everything written; an exception: what
        stopped it; False: still running after ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.salvage_result is False and self._salvage_until is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(1.0 if left is None else min(left, 1.0))
        return self.salvage_result

    # ----- the thread -------------------------------------------------------------------

    def _run_jobs(self) -> None:
        while True:
            with self._cond:
                while not self._jobs or self._error is not None:
                    self._cond.wait()
                job = self._jobs[0]
            try:
                self._run_job(job)
            except BaseException as e:  # noqa: BLE001 - raised by the next submit() or wait()
                with self._cond:
                    self._error = e
                    if self._salvage_until is not None:
                        self.salvage_result = e
                    self._cond.notify_all()
                continue
            with self._cond:
                self._jobs.popleft()
                self._bytes -= job.nbytes
                if not self._jobs and self._salvage_until is not None:
                    self.salvage_result = None
                self._cond.notify_all()

    def _run_job(self, job: _Job) -> None:
        while job.done < len(job.tasks):
            self._attempt(*job.tasks[job.done])
            job.done += 1

    def _attempt(self, write: Callable[[], None], what: str) -> None:
        """``write()``, tried again while the store's errors may pass (see the module)."""
        pause = FIRST_PAUSE
        while True:
            try:
                write()
            except Exception as e:
                if not self.files.remote or not is_transient(e):
                    raise
                now = time.monotonic()
                with self._cond:
                    if self._outage_since is None:
                        self._outage_since = now
                        if self._salvage_until is None:
                            self._say(
                                f"{self.where} cannot be reached ({_short(e)}); the writer "
                                f"retries for up to {self.retry_seconds:g} s "
                                f"({RETRY_SECONDS_ENV}) and keeps the steps recorded "
                                "meanwhile")
                    since = self._outage_since
                    self._cond.notify_all()
                deadline = (self._salvage_until if self._salvage_until is not None
                            else since + self.retry_seconds)
                if now >= deadline:
                    raise StoreOutage(
                        f"the object store {self.where} could not be reached for "
                        f"{now - since:.0f} s: {what} failed ({_short(e)}); the writer "
                        f"retried for {self.retry_seconds:g} s ({RETRY_SECONDS_ENV})"
                    ) from None
                self.retried_writes += 1
                time.sleep(max(0.0, min(pause, deadline - now)))
                pause = min(2 * pause, LONGEST_PAUSE)
                continue
            if self._outage_since is not None:
                with self._cond:
                    seconds = time.monotonic() - self._outage_since
                    self._outage_since = None
                    self._told_full = False
                    self.outages.append(seconds)
                    self._cond.notify_all()
                if self._salvage_until is None:
                    self._say(f"{self.where} answers again after {seconds:.1f} s; the steps "
                              "recorded meanwhile are being written")
            return


def _say(text: str) -> None:
    # The writer's stderr is the training process's: the user sees it where training runs.
    print(f"comgra_like: {text}", file=sys.stderr, flush=True)
