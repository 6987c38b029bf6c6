"""The connection to one trial's writer: starts it (a child process, or a thread of this
process), sends it messages, reads its replies and says how it failed or died.

``WriterClient`` (``client.py``) is the recorder's door; this module is the pipe behind
it. Replies change the channel's state (``error``, ``ready``, ``flushed_id``,
``closed_reply``); a freed slot is handed to ``on_free``.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .. import protocol
from ..errors import StorageError
from ..format.files import is_object_store
from ..format.trial import mark_trial_aborted
from .lock import TrialLock

log = logging.getLogger("comgra_like")


class WriterChannel:
    """The writer of one trial and the messages to and from it.

    ``mode`` is ``process`` or ``thread``; a process that cannot be started at all (no
    usable interpreter) falls back to a thread, said in the log. ``on_free(slot)`` is
    called for each slot the writer has read; ``on_death()`` when the writer process is
    gone (the shared memory it had no time to unlink is then this process's to remove).
    """

    def __init__(self, start: protocol.Start, mode: str, *,
                 on_free: Callable[[int], None], on_death: Callable[[], None],
                 lock: TrialLock | None = None):
        self.start = start
        self.trial_dir = Path(start.trial_dir)
        self.on_free = on_free
        self.on_death = on_death
        self.lock = lock
        self.error: str | None = None  # the writer's failure (raised by raise_if_failed)
        self.closing = False  # no more messages: Close was sent, or given up on
        self.eof = False  # the writer process's replies have ended
        self.closed_reply = False  # the writer answered Close
        self.ready = False  # the writer answered Start
        self.flushed_id = 0  # the last Flush the writer answered
        self._dying = False  # fail_dead() is reading the last replies
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None
        self.mode = mode
        if mode == "process":
            try:
                self._start_process()
            except StorageError:  # the writer started and said why it cannot write
                raise
            except OSError as e:  # no usable interpreter (embedded python, ...)
                log.warning("comgra_like: cannot start the writer process (%s); writing from "
                            "a thread of this process instead", e)
                self.mode = mode = "thread"
        if mode == "thread":
            self._start_thread()

    # ----- starting -------------------------------------------------------------------

    def _start_process(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.insert(0, {package_parent!r}); "
                "from comgra_like.writer.process import main; sys.exit(main())")
        env = dict(os.environ)
        # One thread: the writer must leave the other cores to training (BLAS thread
        # pools spin between calls and took a whole core from the training process).
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
            env[var] = "1"
        # Large temporaries from the heap and kept there: with glibc's defaults every
        # block of a recorded step would be a fresh mmap, paying a page fault per 4 KiB.
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20))
        env.setdefault("MALLOC_TRIM_THRESHOLD_", str(256 * 2**20))
        if not sys.executable:
            raise OSError("sys.executable is empty")
        held = (self.lock.fd,) if self.lock is not None and self.lock.fd is not None else ()
        # A session of its own: where the kernel groups a session's processes for CPU
        # shares (Linux's autogroup), the writer's work would otherwise come out of the
        # training process's share on a busy machine (measured: wall time x1.30 for CPU
        # time x1.12 at log_freq 10, load 15 on 2 cores). It ignores the signals a
        # terminal sends and ends after the training process anyway (process.py).
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            close_fds=True, pass_fds=held, bufsize=0, env=env,
            start_new_session=os.name == "posix",
        )
        self.send(self.start)
        self._in_fd = self.proc.stdout.fileno()
        # Replies are read without a select() first: a read that finds nothing returns.
        os.set_blocking(self._in_fd, False)
        self._pending = b""
        # Wait until it runs: a writer that cannot start fails here, with its reason on
        # stderr, and no recorded step ever waits for its start-up.
        deadline = time.monotonic() + 120
        while not self.ready:
            if self.receive(timeout=1.0):
                continue
            if self.proc.poll() is not None:
                self.fail_dead()
            if time.monotonic() > deadline:
                self.proc.kill()
                raise StorageError("the writer process did not start within 120 s")

    def _start_thread(self) -> None:
        from ..writer.worker import Worker

        self.proc = None
        self._to_worker: queue.Queue = queue.Queue()
        self._from_worker: queue.Queue = queue.Queue()
        worker = Worker(self.start)
        worker.open_trial()
        if worker.failed is not None:
            self.error = worker.failed
            self.raise_if_failed()

        def run():
            while True:
                wait = worker.seconds_to_flush()
                # woken at least twice a second: a background write's failure is
                # reported then (tick), not only with the next message
                wait = 0.5 if wait is None else min(wait, 0.5)
                try:
                    msg = self._to_worker.get(timeout=wait)
                except queue.Empty:
                    worker.tick()
                    worker.report_failure(self._from_worker.put)
                    continue
                if isinstance(msg, _Abandon):
                    worker.end_abnormally(msg.reason)
                    worker.settle()
                    return
                if not worker.handle(msg, self._from_worker.put):
                    return

        self.thread = threading.Thread(target=run, name="comgra_like-writer", daemon=True)
        self.thread.start()
        # A daemon thread dies with the interpreter: without this, a training script that
        # ends without finalize() would lose what the thread had not written yet.
        atexit.register(self._abandon)

    def _abandon(self) -> None:
        if not self.closing and self.thread.is_alive():
            self.closing = True
            self._to_worker.put(_Abandon("the training process ended without finalize()"))
            self.thread.join(timeout=60)

    @property
    def in_thread(self) -> bool:
        """The writer is a thread of this process (messages are handed over as objects)."""
        return self.proc is None

    # ----- sending --------------------------------------------------------------------

    def send(self, msg: protocol.Message) -> None:
        if self.proc is None:
            self._to_worker.put(msg)
            return
        self.write(msg.encode())

    def write(self, text: str) -> None:
        """One line to the writer process (a message's encoding, or ``protocol.HURRY``)."""
        if self.closing:
            raise StorageError(f"the writer of {self.trial_dir} is closed already")
        view = memoryview((text + "\n").encode())
        try:
            while view:  # an unbuffered pipe write may be partial (e.g. after a signal)
                view = view[self.proc.stdin.write(view):]
        except OSError:  # BrokenPipeError among them: the writer is gone
            self.fail_dead()

    # ----- replies --------------------------------------------------------------------

    def receive(self, timeout: float | None) -> bool:
        """Handle the writer's replies; waits up to ``timeout`` for one. True if any came."""
        if self.proc is None:
            try:
                msgs = [self._from_worker.get(timeout=timeout) if timeout != 0
                        else self._from_worker.get_nowait()]
            except queue.Empty:
                return False
            while True:
                try:
                    msgs.append(self._from_worker.get_nowait())
                except queue.Empty:
                    break
        else:
            if timeout != 0:
                ready, _, _ = select.select([self._in_fd], [], [], timeout)
                if not ready:
                    return False
            try:
                chunk = os.read(self._in_fd, 1 << 16)
            except BlockingIOError:  # nothing there (yet)
                return False
            if not chunk:
                self.eof = True
                if not self.closing and not self._dying:
                    self.fail_dead()
                return False
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            msgs = []
            for line in lines:
                if line[:1] == b"f":  # "f<slot>": a slot was freed (protocol.free_line)
                    self.on_free(int(line[1:]))
                else:
                    msgs.append(protocol.decode(line))
        for msg in msgs:
            error = getattr(msg, "error", None)
            if error and (self.error is None or isinstance(msg, protocol.Closed)):
                self.error = error  # a Closed's error is the writer's last word on it
            if isinstance(msg, protocol.Free):
                self.on_free(msg.slot)
            elif isinstance(msg, protocol.Flushed):
                self.flushed_id = max(self.flushed_id, msg.id)
            elif isinstance(msg, protocol.Failed):
                self.error = msg.message
            elif isinstance(msg, protocol.Closed):
                self.closed_reply = True
            elif isinstance(msg, protocol.Ready):
                self.ready = True
        return True

    def raise_if_failed(self) -> None:
        if self.error is not None:
            where = (f"s3://{str(self.trial_dir).split(':', 1)[1].lstrip('/')}"
                     if is_object_store(self.trial_dir) else self.trial_dir)
            raise StorageError(f"writing recordings to {where} failed: {self.error}")

    # ----- failure and death ----------------------------------------------------------

    def exited(self) -> bool:
        """The writer process has exited (never for a thread)."""
        return self.proc is not None and self.proc.poll() is not None

    def fail_dead(self) -> None:
        """The writer process is gone: read its last replies, say how it ended, mark the
        trial aborted (unless it said why itself) and raise."""
        # A writer that failed said why before it exited: its last replies are still in
        # the pipe.
        self._dying = True
        while not self.eof and self.receive(timeout=0.5):
            pass
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.on_death()  # segments the writer had no time to unlink
        if self.error is None:
            self.error = self.death(code)
            self.mark_aborted()
        self.raise_if_failed()

    def mark_aborted(self) -> None:
        # Only the lead rank's trial.json status is the trial's; another rank's end shows
        # in its own files (docs/FORMAT.md, "Recording ranks").
        if self.start.lead:
            mark_trial_aborted(self.trial_dir, self.error)

    def death(self, code: int | None) -> str:
        """How the writer process ended, when it could not say so itself."""
        pid = self.proc.pid
        lost = ("the steps it had not written yet are lost (about the last second of "
                "recording at most, see docs/FORMAT.md); the shards on disk are intact")
        if code is None:
            return f"the writer process (pid {pid}) closed its pipes but has not exited; {lost}"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = ""
            if -code == signal.SIGKILL:
                why = (" (the kernel's out-of-memory killer sends SIGKILL when memory runs out: "
                       "see `dmesg`; otherwise a user or a job scheduler killed it)")
            return f"the writer process (pid {pid}) was killed by {name}{why}; {lost}"
        return (f"the writer process (pid {pid}) exited with code {code} without reporting an "
                f"error (its output, if any, is on this process's stderr); {lost}")

    def give_up(self, error: str) -> None:
        """The writer is stuck: fail with ``error`` for good, mark the trial aborted and let
        the writer finish on its own (its input ends)."""
        self.error = error
        self.mark_aborted()
        if self.proc is not None:
            self.closing = True
            try:  # the writer sees its input end once it goes on, and finishes
                self.proc.stdin.close()
            except OSError:
                pass
        self.raise_if_failed()

    def describe(self) -> str:
        return (f"the writer process (pid {self.proc.pid})" if self.proc is not None
                else "the writer thread")

    def activity(self) -> tuple[str, int | None, int | None]:
        """The writer's state letter, CPU ticks and bytes written so far (Linux's /proc;
        None where unknown: then only its replies count as progress)."""
        if self.proc is not None:
            base = f"/proc/{self.proc.pid}"
        elif self.thread.native_id is not None:
            base = f"/proc/self/task/{self.thread.native_id}"
        else:  # pragma: no cover - platforms without thread ids
            return "", None, None
        try:
            with open(base + "/stat", "rb") as f:
                stat = f.read()
            # after "pid (name) ": state, then utime and stime are the 12th and 13th
            fields = stat[stat.rindex(b")") + 2:].split()
            state, cpu = fields[0].decode(), int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            return "", None, None
        written = None
        try:
            with open(base + "/io", "rb") as f:
                for line in f:
                    if line.startswith(b"wchar:"):
                        written = int(line.split()[1])
        except (OSError, ValueError):
            pass
        return state, cpu, written

    # ----- closing --------------------------------------------------------------------

    def close(self, finish: bool, stall_check: Callable[[bool], None]) -> None:
        """Send Close and wait until the writer has ended (``stall_check(replied)`` is
        called while waiting for a process; it raises if the writer is stuck)."""
        self.send(protocol.Close(finish))
        self.closing = True
        if self.proc is None:
            self.thread.join()
            self.receive(timeout=0)
            atexit.unregister(self._abandon)  # it would keep this channel's memory alive
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        while not self.closed_reply and not self.eof:
            stall_check(self.receive(timeout=1.0))
        self.proc.wait()
        self.proc.stdout.close()
        if not self.closed_reply and self.error is None:
            self.error = self.death(self.proc.returncode)
            self.mark_aborted()


class _Abandon:
    """Thread transport only: the interpreter exits without finalize()."""

    def __init__(self, reason: str):
        self.reason = reason
