"""The training process's side of the writer: ``WriterClient``, the recorder's only door
to the disk.

A recorded step is copied into one of a few *slots* of shared memory (``slots.py``);
everything else goes to the writer as one JSON line per message (``protocol``). No
pickle anywhere. The parts:

* ``channel.py``: the writer itself (a process or a thread), the pipe, the replies, how
  it failed or died;
* ``slots.py``: the slots and their shared-memory segments, and training's wait for one;
* ``stall.py``: when training stops waiting for a writer that makes no progress at all
  for ``STALL_SECONDS`` (a ``StorageError``);
* this module: the messages of the recorder, ``flush``/``drain``/``close``.

Two transports run the same ``Worker``:

* ``process`` (default on POSIX): a child ``python`` running ``writer.process.main``; slots are
  files in ``/dev/shm`` (or the temp folder) mapped by both processes and unlinked by the
  writer as soon as it has mapped them, so a crash leaks nothing.
* ``thread`` (Windows, or ``COMGRA_LIKE_WRITER=thread``): the worker in a thread of the
  training process, slots in anonymous memory. Simpler, but the writer's Python code then
  competes with training for the GIL.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import protocol
from ..errors import ConfigurationError, StorageError
from ..format.trial import json_safe
from ..writer.uploads import buffer_bytes_from_env, retry_seconds_from_env
from .channel import WriterChannel
from .lock import TrialLock
from .shm import Slot
from .slots import SlotPool
from .stall import STALL_SECONDS, stall_watch

__all__ = ["STALL_SECONDS", "WriterClient", "trigger_message"]

log = logging.getLogger("comgra_like")


class WriterClient:
    """Sends recorded steps to the writer; the recorder's only door to the disk.

    Public for users, tests and benchmarks (``ComgraRecorder.writer``): ``mode``, ``pid``,
    ``flush_seconds``, ``stall_seconds``, ``flush()``, ``drain()``, ``close()``,
    ``flight_trigger()``; ``slots`` (the shared memory, ``slots.SlotPool``) and
    ``channel`` (the writer, ``channel.WriterChannel``). The ``submit_*``, slot and
    layout methods are the recorder's.
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
        self._warned_trigger = False  # a flight trigger could not be sent (logged once)
        self._closed = False
        self._flush_id = 0
        self.layout_ids: dict[tuple, int] = {}
        self.layout_generation = 0  # changes when layout ids are handed out anew
        self._last_receive = 0.0
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
        self.slots = pool = SlotPool(slots, max_slots, slot_budget_bytes)
        # The writer's configuration: the first message it gets.
        start = protocol.Start(protocol.PROTOCOL_VERSION, str(self.trial_dir), trial_id,
                               bool(calculate_svd), pool.segment_prefix, pool.segment_dirs,
                               self._flush_seconds, trial, rank=int(rank), lead=bool(lead))
        self.channel = WriterChannel(start, mode, on_free=pool.free.append,
                                     on_death=pool.unlink_segments, lock=lock)
        pool.channel = self.channel

    @property
    def mode(self) -> str:
        """``process`` or ``thread`` (see the module)."""
        return self.channel.mode

    @property
    def pid(self) -> int | None:
        """The writer process's pid (None: the writer is a thread of this process)."""
        proc = self.channel.proc
        return None if proc is None else proc.pid

    # counters of the slots, for benchmarks
    @property
    def segments_created(self) -> int:
        return self.slots.segments_created

    @property
    def waits(self) -> int:
        """Recorded steps that waited for a free slot."""
        return self.slots.waits

    @property
    def waited_seconds(self) -> float:
        return self.slots.waited_seconds

    # ----- slots ----------------------------------------------------------------------

    def acquire(self) -> Slot:
        """A free slot for the next recorded step; waits while every slot is in flight."""
        self.channel.raise_if_failed()
        return self.slots.acquire(self._wait_for)

    def release(self, slot: Slot) -> None:
        """Give back a slot that was not sent (the step turned out not to be recorded)."""
        self.slots.release(slot)

    def allocate(self, slot: Slot, nelems: int) -> tuple[int, int]:
        """Room for ``nelems`` float32 values in ``slot``: (segment index, offset)."""
        return self.slots.allocate(slot, nelems)

    # ----- messages -------------------------------------------------------------------

    def layout_id(self, layout: tuple) -> tuple[int, bool]:
        """A small id for a capture layout, and whether the writer has not seen it yet."""
        lid = self.layout_ids.get(layout)
        if lid is not None:
            return lid, False
        if len(self.layout_ids) >= 256:
            # Layouts that change every step (shapes that vary): start over. Ids are
            # reused, and a reused id always travels with its layout, which the writer
            # stores over the old one, so both sides stay bounded and in agreement.
            # Callers that remember ids check ``layout_generation``.
            self.layout_ids.clear()
            self.layout_generation += 1
        lid = self.layout_ids[layout] = len(self.layout_ids)
        return lid, True

    def submit_batch(self, slot: Slot, body: str) -> None:
        """Send a filled slot; the writer frees it once it has read it.

        ``body`` is ``protocol.step_body(...)`` of the step: the recorder keeps the parts
        that repeat from step to step encoded.
        """
        channel = self.channel
        channel.raise_if_failed()
        self.slots.sent(slot)
        text = protocol.step_line(slot.index, body)
        if channel.in_thread:
            channel.send(protocol.decode(text))
            return
        channel.write(text)
        # Replies (slots freed, errors) are read when a slot is needed, and at least every
        # quarter second: reading them on every step would cost the training thread
        # ~35 us each time (a system call and a JSON parse, cold after a stretch of
        # training).
        now = time.monotonic()
        if now - self._last_receive > 0.25:
            self._last_receive = now
            channel.receive(timeout=0)

    def submit_kpis(self, rows: list) -> None:
        self.submit(protocol.Kpis(rows))

    def submit_note(self, text: str, wall_time: float, training_step: int | None) -> None:
        self.submit(protocol.Note(text, wall_time, training_step))

    def submit_modules(self, modules: list) -> None:
        """The module tree (modules.json), all of it."""
        self.submit(protocol.Modules(modules))

    def submit_graph(self, digest: str, structure: dict) -> None:
        """A graph structure not sent before; the writer stores it before any step that
        names it reaches the disk."""
        self.submit(protocol.Graph(digest, structure))

    def submit(self, msg: protocol.Message) -> None:
        """Any other message of the training process (watch(): its configuration, module
        graphs, report), in order with the recorded steps."""
        self.channel.raise_if_failed()
        self.channel.send(msg)

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
            channel = self.channel
            if channel.error is not None or channel.closing:
                raise StorageError(channel.error or "the writer is closed")
            channel.send(trigger_message(trigger, channel.start.rank))
            return True
        except Exception as e:  # noqa: BLE001 - called from inside training: never raise
            if not self._warned_trigger:
                self._warned_trigger = True
                log.warning("comgra_like: a flight-recorder trigger could not be named in "
                            "%s/trial.json (%s: %s); later ones that fail are dropped "
                            "silently", self.trial_dir, type(e).__name__, e)
            return False

    @property
    def flush_seconds(self) -> float:
        return self._flush_seconds

    @flush_seconds.setter
    def flush_seconds(self, value: float) -> None:
        self._flush_seconds = float(value)
        self.channel.send(protocol.Config(self._flush_seconds))

    # ----- waiting --------------------------------------------------------------------

    def drain(self) -> None:
        """Block until the writer has taken in every recorded step sent so far.

        All slots are free then; the rows may still wait in the writer's buffers for
        their shard (``flush`` writes them). Between steps only.
        """
        self.channel.raise_if_failed()
        self._wait_for(self.slots.all_free)

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything sent so far is written to disk."""
        channel = self.channel
        channel.raise_if_failed()
        self._flush_id += 1
        target = self._flush_id
        channel.send(protocol.Flush(target))
        self._wait_for(lambda: channel.flushed_id >= target, timeout,
                       f"writing the shards of {self.trial_dir} timed out")
        channel.raise_if_failed()

    def _wait_for(self, done: Callable[[], bool], timeout: float | None = None,
                  timeout_message: str = "") -> None:
        """Handle the writer's replies until ``done()``; raises if the writer fails or
        dies meanwhile, if it shows no progress for ``stall_seconds``, or (with
        ``timeout``) when that many seconds have passed."""
        channel = self.channel
        deadline = None if timeout is None else time.monotonic() + timeout
        stalled = None
        while not done():
            if stalled is None:  # made only once there is a wait: acquire() mostly has none
                stalled = stall_watch(channel, self.stall_seconds)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise StorageError(timeout_message)
            replied = channel.receive(timeout=1.0 if left is None else min(left, 1.0))
            channel.raise_if_failed()
            if channel.exited() and not done():
                channel.receive(timeout=0)
                if not done():
                    channel.fail_dead()
            if not done():
                stalled(replied)

    def close(self, finish: bool = False) -> None:
        """Write everything and stop the writer; ``finish``: the recording is complete,
        the writer compacts the trial and marks it finished."""
        channel = self.channel
        if self._closed:
            channel.raise_if_failed()
            return
        if channel.closing:  # given up on already (stall.py): it finishes on its own
            self._closed = True
            channel.raise_if_failed()
        channel.close(finish, stall_watch(channel, self.stall_seconds))
        self._closed = True
        if self._lock is not None:
            self._lock.release()  # the writer has ended: nobody writes the trial any more
        self.slots.close()  # the writer is gone: whatever it did not unlink
        channel.raise_if_failed()


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
