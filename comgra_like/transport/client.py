"""The training process's side of the writer: shared-memory slots and the writer process.

A recorded step is copied into one of a few *slots* of shared memory; a slot is busy from
``acquire()`` until the writer has read it. There are two slots, and up to eight while
they fit in 128 MiB (so training does not wait while the writer writes a shard); beyond
that a slow writer or disk slows training down instead of growing memory without limit;
a writer that makes no progress at all for ``STALL_SECONDS`` while training waits for it
ends the wait with a ``StorageError``.
Everything else goes to the writer as one JSON line per message (``writer/process.py``
documents the protocol). No pickle anywhere.

Two transports run the same ``Worker``:

* ``process`` (default on POSIX): a child ``python`` running ``writer.process.main``; slots are
  files in ``/dev/shm`` (or the temp folder) mapped by both processes and unlinked by the
  writer as soon as it has mapped them, so a crash leaks nothing.
* ``thread`` (Windows, or ``COMGRA_LIKE_WRITER=thread``): the worker in a thread of the
  training process, slots in anonymous memory. Simpler, but the writer's Python code then
  competes with training for the GIL.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import protocol
from ..errors import ConfigurationError, StorageError
from ..format.files import is_object_store
from ..format.trial import json_safe, mark_trial_aborted
from ..writer.uploads import buffer_bytes_from_env, retry_seconds_from_env
from .lock import TrialLock
from .shm import ALIGN, MIN_SEGMENT, Segment, Slot

log = logging.getLogger("comgra_like")

# Training that waits for the writer gives up after this many seconds in which the writer
# took in nothing and showed no sign of work (no CPU time, no bytes written): generous,
# so that a slow disk, on which the writer still makes progress, never trips it.
STALL_SECONDS = 300.0


class WriterClient:
    """Sends recorded steps to the writer; the recorder's only door to the disk.

    Public for users, tests and benchmarks (``ComgraRecorder.writer``): ``mode``, ``pid``,
    ``flush_seconds``, ``stall_seconds``, ``flush()``, ``drain()``, ``close()``. The
    ``submit_*``, slot and layout methods are the recorder's.
    """

    def __init__(self, trial_dir: Path, trial_id: str, calculate_svd: bool, *,
                 trial: dict | None = None, lock: TrialLock | None = None, slots: int = 2,
                 rank: int = 0, lead: bool = True,
                 max_slots: int = 8, slot_budget_bytes: int = 128 * 2**20,
                 mode: str | None = None):
        self.trial_dir = Path(trial_dir)
        # Held here and, inherited, by the writer process: released when both have ended.
        self._lock = lock
        mode = mode or os.environ.get("COMGRA_LIKE_WRITER") or (
            "process" if os.name == "posix" else "thread")
        if mode not in ("process", "thread"):
            raise ConfigurationError(
                f"COMGRA_LIKE_WRITER={mode!r}: use 'process' (default) or 'thread'")
        self.mode = mode
        self._slots = [Slot(i) for i in range(slots)]
        self._free = list(range(slots))
        self._warned_wait = False  # training has waited for a free slot (logged once)
        self._warned_trigger = False  # a flight trigger could not be sent (logged once)
        self._max_slots = max_slots
        self._slot_budget = slot_budget_bytes
        self._error: str | None = None
        self._closed = False
        self._flush_id = 0
        self._flushed_id = 0
        self._layout_ids: dict[tuple, int] = {}
        self.layout_generation = 0  # changes when layout ids are handed out anew
        self._last_receive = 0.0
        self._largest_need = 0  # elements: the most any step sent so far needed
        self._segment_seq = 0
        self.segments_created = 0  # shared-memory segments made so far (a counter)
        # Recorded steps that waited for a free slot, and the seconds they waited
        self.waits = 0
        self.waited_seconds = 0.0
        self._shm_dir = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self._segment_dirs = list(dict.fromkeys((self._shm_dir, tempfile.gettempdir())))
        # Unique to this writer (not id(self), which a later writer may reuse): its
        # writer process deletes whatever still carries the prefix when it exits.
        self._segment_prefix = f"comgra_like-{os.getpid()}-{secrets.token_hex(6)}-"
        self._flush_seconds = 1.0
        stall = os.environ.get("COMGRA_LIKE_WRITER_STALL_SECONDS")
        try:
            self.stall_seconds = STALL_SECONDS if stall is None else float(stall)
        except ValueError:
            raise ConfigurationError(
                f"COMGRA_LIKE_WRITER_STALL_SECONDS={stall!r}: give a number of seconds "
                f"(default {STALL_SECONDS:.0f})") from None
        # The writer reads these too; a bad value is refused here, before training.
        retry_seconds_from_env()
        buffer_bytes_from_env()
        self._closing = False
        self._eof = False
        self._closed_reply = False
        self._ready = False
        self._dying = False  # _fail_dead() is reading the last replies
        # The writer's configuration: the first message it gets.
        self._start = protocol.Start(protocol.PROTOCOL_VERSION, str(self.trial_dir), trial_id,
                                     bool(calculate_svd), self._segment_prefix,
                                     self._segment_dirs, self._flush_seconds, trial,
                                     rank=int(rank), lead=bool(lead))
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

    # ----- transports -------------------------------------------------------------------

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
        held = (self._lock.fd,) if self._lock is not None and self._lock.fd is not None else ()
        # A session of its own: where the kernel groups a session's processes for CPU
        # shares (Linux's autogroup), the writer's work would otherwise come out of the
        # training process's share on a busy machine (measured: wall time x1.30 for CPU
        # time x1.12 at log_freq 10, load 15 on 2 cores). It ignores the signals a
        # terminal sends and ends after the training process anyway (process.py).
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            close_fds=True, pass_fds=held, bufsize=0, env=env,
            start_new_session=os.name == "posix",
        )
        self._send(self._start)
        self._in_fd = self._proc.stdout.fileno()
        # Replies are read without a select() first: a read that finds nothing returns.
        os.set_blocking(self._in_fd, False)
        self._pending = b""
        # Wait until it runs: a writer that cannot start fails here, with its reason on
        # stderr, and no recorded step ever waits for its start-up.
        deadline = time.monotonic() + 120
        while not self._ready:
            if self._receive(timeout=1.0):
                continue
            if self._proc.poll() is not None:
                self._fail_dead()
            if time.monotonic() > deadline:
                self._proc.kill()
                raise StorageError("the writer process did not start within 120 s")

    def _start_thread(self) -> None:
        from ..writer.worker import Worker

        self._proc = None
        self._to_worker: queue.Queue = queue.Queue()
        self._from_worker: queue.Queue = queue.Queue()
        worker = Worker(self._start)
        worker.open_trial()
        if worker.failed is not None:
            self._error = worker.failed
            self._raise_if_failed()

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

        self._thread = threading.Thread(target=run, name="comgra_like-writer", daemon=True)
        self._thread.start()
        # A daemon thread dies with the interpreter: without this, a training script that
        # ends without finalize() would lose what the thread had not written yet.
        atexit.register(self._abandon)

    def _abandon(self) -> None:
        if not self._closed and not self._closing and self._thread.is_alive():
            self._closing = True
            self._to_worker.put(_Abandon("the training process ended without finalize()"))
            self._thread.join(timeout=60)

    def _send(self, msg: protocol.Message) -> None:
        if self._proc is None:
            self._to_worker.put(msg)
            return
        self._write(msg.encode())

    def _write(self, text: str) -> None:
        if self._closing:
            raise StorageError(f"the writer of {self.trial_dir} is closed already")
        view = memoryview((text + "\n").encode())
        try:
            while view:  # an unbuffered pipe write may be partial (e.g. after a signal)
                view = view[self._proc.stdin.write(view):]
        except OSError:  # BrokenPipeError among them: the writer is gone
            self._fail_dead()

    def _fail_dead(self) -> None:
        # A writer that failed said why before it exited: its last replies are still in
        # the pipe.
        self._dying = True
        while not self._eof and self._receive(timeout=0.5):
            pass
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for slot in self._slots:  # segments the writer had no time to unlink
            for seg in slot.segments:
                if seg.path is not None:
                    try:
                        os.unlink(seg.path)
                    except OSError:
                        pass
        if self._error is None:
            self._error = self._death(code)
            self._mark_aborted()
        self._raise_if_failed()

    def _mark_aborted(self) -> None:
        # Only the lead rank's trial.json status is the trial's; another rank's end shows
        # in its own files (docs/FORMAT.md, "Recording ranks").
        if self._start.lead:
            mark_trial_aborted(self.trial_dir, self._error)

    def _death(self, code: int | None) -> str:
        """How the writer process ended, when it could not say so itself."""
        pid = self._proc.pid
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

    def _receive(self, timeout: float | None) -> bool:
        """Handle the writer's replies; waits up to ``timeout`` for one. True if any came."""
        if self._proc is None:
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
                self._eof = True
                if not self._closing and not self._dying:
                    self._fail_dead()
                return False
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            msgs = []
            for line in lines:
                if line[:1] == b"f":  # "f<slot>": a slot was freed (protocol.free_line)
                    self._free.append(int(line[1:]))
                else:
                    msgs.append(protocol.decode(line))
        for msg in msgs:
            error = getattr(msg, "error", None)
            if error and (self._error is None or isinstance(msg, protocol.Closed)):
                self._error = error  # a Closed's error is the writer's last word on it
            if isinstance(msg, protocol.Free):
                self._free.append(msg.slot)
            elif isinstance(msg, protocol.Flushed):
                self._flushed_id = max(self._flushed_id, msg.id)
            elif isinstance(msg, protocol.Failed):
                self._error = msg.message
            elif isinstance(msg, protocol.Closed):
                self._closed_reply = True
            elif isinstance(msg, protocol.Ready):
                self._ready = True
        return True

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            where = (f"s3://{str(self.trial_dir).split(':', 1)[1].lstrip('/')}"
                     if is_object_store(self.trial_dir) else self.trial_dir)
            raise StorageError(f"writing recordings to {where} failed: {self._error}")

    # ----- slots --------------------------------------------------------------------------

    def acquire(self) -> Slot:
        """A free slot for the next recorded step; waits while every slot is in flight."""
        self._raise_if_failed()
        if not self._free:
            self._receive(timeout=0)
        if not self._free and len(self._slots) < self._max_slots:
            # All in flight (the writer is busy, e.g. writing a shard): one more slot if
            # the memory budget allows, rather than making training wait.
            largest = 4 * max(slot.needed for slot in self._slots)
            if largest * (len(self._slots) + 1) <= self._slot_budget:
                self._slots.append(Slot(len(self._slots)))
                self._free.append(len(self._slots) - 1)
        if not self._free:
            if not self._warned_wait:
                self._warned_wait = True
                log.warning(
                    "comgra_like: training waits for the writer, which needs more time per "
                    "recorded step than training gives it (%d steps in flight). Recording "
                    "slows training down from here on; record less often (e.g. "
                    "DecisionMakerForRecordingsFrequencyPerType with a larger "
                    "min_training_steps_difference) or register fewer tensors.",
                    len(self._slots))
            if self._proc is not None:
                # Training waits for the writer from now on: it stops giving way to this
                # process's threads for the step it is reducing (scheduling.py).
                self._write(protocol.HURRY.decode())
        if not self._free:
            self.waits += 1
            began = time.monotonic()
            self._wait_for(lambda: bool(self._free))
            self.waited_seconds += time.monotonic() - began
        slot = self._slots[self._free.pop()]
        # A slot that overflowed into more segments keeps them (allocate() grows the last
        # one twofold, so they stay few): merging them into one would mean fresh shared
        # memory again, ~0.6 ms of the training thread's time per MiB here.
        slot.reset()
        return slot

    def release(self, slot: Slot) -> None:
        """Give back a slot that was not sent (the step turned out not to be recorded)."""
        self._free.append(slot.index)

    def allocate(self, slot: Slot, nelems: int) -> tuple[int, int]:
        """Room for ``nelems`` float32 values in ``slot``: (segment index, offset)."""
        slot.needed += -(-nelems // ALIGN) * ALIGN
        for i, seg in enumerate(slot.segments):
            if seg.nelems - slot.fill[i] >= nelems:
                off = slot.fill[i]
                slot.fill[i] = off + -(-nelems // ALIGN) * ALIGN
                return i, off
        if slot.segments:
            size = max(nelems, MIN_SEGMENT, 2 * slot.segments[-1].nelems)
        else:
            # A slot's first segment: as large as the largest step sent so far, so that
            # only the very first recorded step overflows into more segments (new shared
            # memory costs the training thread ~0.6 ms per MiB here).
            size = max(nelems, MIN_SEGMENT, self._largest_need)
        self._add_segment(slot, size)
        slot.fill[-1] = -(-nelems // ALIGN) * ALIGN
        return len(slot.segments) - 1, 0

    def _add_segment(self, slot: Slot, nelems: int) -> None:
        index = len(slot.segments)
        self.segments_created += 1
        if self._proc is None:
            seg = Segment(nelems, None)
            slot.segments.append(seg)
            slot.fill.append(0)
            self._send(protocol.Segment(slot.index, index, nelems, buffer=seg.mm))
        else:
            seg = None
            for folder in self._segment_dirs:
                self._segment_seq += 1
                path = os.path.join(folder, f"{self._segment_prefix}{self._segment_seq}")
                try:
                    seg = Segment(nelems, path)
                    break
                except OSError as e:
                    last = e
            if seg is None:
                raise StorageError(
                    f"cannot allocate {nelems * 4 / 2**20:.0f} MiB of shared memory for a "
                    f"recorded step ({last}); free space in {self._shm_dir} or the temp folder, "
                    "or record fewer tensors"
                )
            # Known to the slot before the writer hears of it: if the writer is gone,
            # _fail_dead() unlinks it with the others.
            slot.segments.append(seg)
            slot.fill.append(0)
            self._send(protocol.Segment(slot.index, index, nelems, path=seg.path))

    # ----- messages -------------------------------------------------------------------------

    def layout_id(self, layout: tuple) -> tuple[int, bool]:
        """A small id for a capture layout, and whether the writer has not seen it yet."""
        lid = self._layout_ids.get(layout)
        if lid is not None:
            return lid, False
        if len(self._layout_ids) >= 256:
            # Layouts that change every step (shapes that vary): start over. Ids are
            # reused, and a reused id always travels with its layout, which the writer
            # stores over the old one, so both sides stay bounded and in agreement.
            # Callers that remember ids check ``layout_generation``.
            self._layout_ids.clear()
            self.layout_generation += 1
        lid = self._layout_ids[layout] = len(self._layout_ids)
        return lid, True

    def submit_batch(self, slot: Slot, body: str) -> None:
        """Send a filled slot; the writer frees it once it has read it.

        ``body`` is ``protocol.step_body(...)`` of the step: the recorder keeps the parts
        that repeat from step to step encoded.
        """
        self._raise_if_failed()
        self._largest_need = max(self._largest_need, slot.needed)
        text = protocol.step_line(slot.index, body)
        if self._proc is None:
            self._to_worker.put(protocol.decode(text))
            return
        self._write(text)
        # Replies (slots freed, errors) are read when a slot is needed, and at least every
        # quarter second: reading them on every step would cost the training thread
        # ~35 us each time (a system call and a JSON parse, cold after a stretch of
        # training).
        now = time.monotonic()
        if now - self._last_receive > 0.25:
            self._last_receive = now
            self._receive(timeout=0)

    def submit_kpis(self, rows: list) -> None:
        self._raise_if_failed()
        self._send(protocol.Kpis(rows))

    def submit_note(self, text: str, wall_time: float, training_step: int | None) -> None:
        self._raise_if_failed()
        self._send(protocol.Note(text, wall_time, training_step))

    def submit_modules(self, modules: list) -> None:
        """The module tree (modules.json), all of it."""
        self._raise_if_failed()
        self._send(protocol.Modules(modules))

    def submit_graph(self, digest: str, structure: dict) -> None:
        """A graph structure not sent before; the writer stores it before any step that
        names it reaches the disk."""
        self._raise_if_failed()
        self._send(protocol.Graph(digest, structure))

    def submit(self, msg: protocol.Message) -> None:
        """Any other message of the training process (watch(): its configuration, module
        graphs, report), in order with the recorded steps."""
        self._raise_if_failed()
        self._send(msg)

    def flight_trigger(self, trigger: Mapping[str, Any]) -> bool:
        """Name a flight-recorder trigger in the trial's trial.json (``flight_triggers``).

        ``trigger``: ``kind`` (str) and ``training_step`` (int), optional ``tensor``
        (str), ``value`` (a number; NaN and infinities kept), ``window_steps`` (the
        training steps of the window written for it), ``detail`` (a mapping of JSON
        values), ``wall_time`` (default now); other keys join ``detail``. Non-blocking
        like every send, in order with the recorded steps. Never raises: a trigger that
        cannot be sent (bad fields, a writer that failed or is closed) is dropped and
        said once in the log. Returns whether it was sent.
        """
        try:
            if self._error is not None or self._closing:
                raise StorageError(self._error or "the writer is closed")
            msg = trigger_message(trigger, self._start.rank)
            self._send(msg)
            return True
        except Exception as e:  # noqa: BLE001 - called from inside training: never raise
            if not self._warned_trigger:
                self._warned_trigger = True
                log.warning("comgra_like: a flight-recorder trigger could not be named in "
                            "%s/trial.json (%s: %s); later ones that fail are dropped "
                            "silently", self.trial_dir, type(e).__name__, e)
            return False

    @property
    def pid(self) -> int | None:
        """The writer process's pid (None: the writer is a thread of this process)."""
        return None if self._proc is None else self._proc.pid

    @property
    def flush_seconds(self) -> float:
        return self._flush_seconds

    @flush_seconds.setter
    def flush_seconds(self, value: float) -> None:
        self._flush_seconds = float(value)
        self._send(protocol.Config(self._flush_seconds))

    def drain(self) -> None:
        """Block until the writer has taken in every recorded step sent so far.

        All slots are free then; the rows may still wait in the writer's buffers for
        their shard (``flush`` writes them). Between steps only.
        """
        self._raise_if_failed()
        self._wait_for(lambda: len(self._free) == len(self._slots))

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything sent so far is written to disk."""
        self._raise_if_failed()
        self._flush_id += 1
        target = self._flush_id
        self._send(protocol.Flush(target))
        self._wait_for(lambda: self._flushed_id >= target, timeout,
                       f"writing the shards of {self.trial_dir} timed out")
        self._raise_if_failed()

    def _wait_for(self, done, timeout: float | None = None, timeout_message: str = "") -> None:
        """Handle the writer's replies until ``done()``; raises if the writer fails or
        dies meanwhile, if it shows no progress for ``stall_seconds``, or (with
        ``timeout``) when that many seconds have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stalled = None
        while not done():
            if stalled is None:  # made only once there is a wait: acquire() mostly has none
                stalled = self._stall_watch()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise StorageError(timeout_message)
            replied = self._receive(timeout=1.0 if left is None else min(left, 1.0))
            self._raise_if_failed()
            if self._proc is not None and self._proc.poll() is not None and not done():
                self._receive(timeout=0)
                if not done():
                    self._fail_dead()
            if not done():
                stalled(replied)

    def _stall_watch(self):
        """A check, called while training waits, that raises once the writer has neither
        replied nor shown activity for ``stall_seconds``."""
        mark = None
        since = time.monotonic()
        limit = self.stall_seconds
        if is_object_store(self.trial_dir):
            # a writer waiting for an object store that is away is not stuck: it retries
            # for retry_seconds, then once more as long for what it kept (uploads.py)
            limit = max(limit, 2 * retry_seconds_from_env() + 60)

        def check(replied: bool) -> None:
            nonlocal mark, since
            now = time.monotonic()
            if replied:
                mark, since = None, now
                return
            activity = self._activity()
            if mark is None or activity[1:] != mark[1:]:
                mark, since = activity, now
            elif now - since > limit:
                self._give_up(activity[0], now - since)

        return check

    def _activity(self) -> tuple[str, int | None, int | None]:
        """The writer's state letter, CPU ticks and bytes written so far (Linux's /proc;
        None where unknown: then only its replies count as progress)."""
        if self._proc is not None:
            base = f"/proc/{self._proc.pid}"
        elif self._thread.native_id is not None:
            base = f"/proc/self/task/{self._thread.native_id}"
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

    def _give_up(self, state: str, seconds: float) -> None:
        """The writer is stuck: say so, once and for good, and let it finish on its own."""
        where = (f"the writer process (pid {self._proc.pid})" if self._proc is not None
                 else "the writer thread")
        why = {
            "T": "it is stopped (SIGSTOP, Ctrl-Z or a debugger; `kill -CONT <pid>` resumes "
                 "it)",
            "t": "it is stopped by a debugger",
            "D": "it waits for the disk (a hung network file system?)",
        }.get(state, "it neither uses CPU nor writes (a bug in comgra_like's writer: please "
                     "report it)" if state else "it sends no replies")
        self._error = (
            f"{where} has taken in no recorded step for {seconds:.0f} s while training "
            f"waited for it: {why}. Training is not held any longer; whatever the writer had "
            "received it writes when it goes on, and the trial is marked aborted. If the disk "
            "is merely this slow, allow more time with the environment variable "
            f"COMGRA_LIKE_WRITER_STALL_SECONDS (now {self.stall_seconds:g})")
        self._mark_aborted()
        if self._proc is not None:
            self._closing = True
            try:  # the writer sees its input end once it goes on, and finishes
                self._proc.stdin.close()
            except OSError:
                pass
        self._raise_if_failed()

    def close(self, finish: bool = False) -> None:
        """Write everything and stop the writer; ``finish``: the recording is complete,
        the writer compacts the trial and marks it finished."""
        if self._closed:
            self._raise_if_failed()
            return
        if self._closing:  # given up on already (_give_up): it finishes on its own
            self._closed = True
            self._raise_if_failed()
        self._send(protocol.Close(finish))
        self._closing = True
        if self._proc is None:
            self._thread.join()
            self._receive(timeout=0)
        else:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            stalled = self._stall_watch()
            while not self._closed_reply and not self._eof:
                stalled(self._receive(timeout=1.0))
            self._proc.wait()
            self._proc.stdout.close()
            if not self._closed_reply and self._error is None:
                self._error = self._death(self._proc.returncode)
                self._mark_aborted()
        self._closed = True
        if self._lock is not None:
            self._lock.release()  # the writer has ended: nobody writes the trial any more
        if self._proc is None:
            atexit.unregister(self._abandon)  # it would keep this client's memory alive
        for slot in self._slots:
            for seg in slot.segments:
                seg.close(unlink=True)  # the writer is gone: whatever it did not unlink
        self._raise_if_failed()


_TRIGGER_FIELDS = ("kind", "training_step", "tensor", "value", "window_steps", "detail",
                   "wall_time")


def trigger_message(trigger: Mapping[str, Any], rank: int = 0) -> protocol.FlightTrigger:
    """The message of a trigger given as a mapping (``WriterClient.flight_trigger``);
    a ``ConfigurationError`` names a field that is missing or of the wrong type."""
    if not isinstance(trigger, Mapping):
        raise ConfigurationError(f"a flight trigger is a mapping, not {type(trigger).__name__}")
    for name in ("kind", "training_step"):
        if trigger.get(name) is None:
            raise ConfigurationError(f"a flight trigger needs {name!r}: {dict(trigger)!r:.200}")
    try:
        step = int(trigger["training_step"])
        value = trigger.get("value")
        value = None if value is None else float(value)
        window = [int(s) for s in trigger.get("window_steps") or ()]
        wall = float(trigger.get("wall_time") or time.time())
    except (TypeError, ValueError) as e:
        raise ConfigurationError(f"a flight trigger's training_step, value, window_steps "
                                 f"or wall_time is no number ({e})") from None
    detail = trigger.get("detail") or {}
    detail = dict(detail) if isinstance(detail, Mapping) else {"detail": detail}
    detail.update((k, v) for k, v in trigger.items() if k not in _TRIGGER_FIELDS)
    tensor = trigger.get("tensor")
    return protocol.FlightTrigger(str(trigger["kind"]), step,
                                  None if tensor is None else str(tensor), value, window,
                                  json_safe(detail), wall, int(rank))


class _Abandon:
    """Thread transport only: the interpreter exits without finalize()."""

    def __init__(self, reason: str):
        self.reason = reason
