"""The shared-memory slots recorded steps are copied into (``shm.py``'s Slot and
Segment), and when training waits for one.

A slot is busy from ``acquire()`` until the writer has read it. There are two, and up to
``max_slots`` while they fit in ``budget_bytes`` (so training does not wait while the
writer writes a shard); beyond that a slow writer slows training down instead of growing
memory without limit.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
from collections.abc import Callable

from .. import protocol
from ..errors import StorageError
from .channel import WriterChannel
from .shm import ALIGN, MIN_SEGMENT, Segment, Slot

log = logging.getLogger("comgra_like")


class SlotPool:
    """The slots of one writer and their shared-memory segments.

    Public for tests and benchmarks: ``slots``, ``free`` (indices of the free ones),
    ``max_slots``, ``budget_bytes``, ``segment_prefix``, ``shm_dir``, and the counters
    ``segments_created``, ``waits``, ``waited_seconds``."""

    def __init__(self, slots: int = 2, max_slots: int = 8, budget_bytes: int = 128 * 2**20):
        self.slots = [Slot(i) for i in range(slots)]
        self.free = list(range(slots))
        self.max_slots = max_slots
        self.budget_bytes = budget_bytes
        self.channel: WriterChannel | None = None  # set once the writer runs
        self._warned_wait = False  # training has waited for a free slot (logged once)
        self.largest_need = 0  # elements: the most any step sent so far needed
        self._segment_seq = 0
        self.segments_created = 0  # shared-memory segments made so far (a counter)
        # Recorded steps that waited for a free slot, and the seconds they waited
        self.waits = 0
        self.waited_seconds = 0.0
        self.shm_dir = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self.segment_dirs = list(dict.fromkeys((self.shm_dir, tempfile.gettempdir())))
        # Unique to this writer (not id(self), which a later writer may reuse): its
        # writer process deletes whatever still carries the prefix when it exits.
        self.segment_prefix = f"comgra_like-{os.getpid()}-{secrets.token_hex(6)}-"

    def all_free(self) -> bool:
        return len(self.free) == len(self.slots)

    def acquire(self, wait_for: Callable[[Callable[[], bool]], None]) -> Slot:
        """A free slot for the next recorded step; waits (``wait_for``) while every slot
        is in flight."""
        channel = self.channel
        if not self.free:
            channel.receive(timeout=0)
        if not self.free and len(self.slots) < self.max_slots:
            # All in flight (the writer is busy, e.g. writing a shard): one more slot if
            # the memory budget allows, rather than making training wait.
            largest = 4 * max(slot.needed for slot in self.slots)
            if largest * (len(self.slots) + 1) <= self.budget_bytes:
                self.slots.append(Slot(len(self.slots)))
                self.free.append(len(self.slots) - 1)
        if not self.free:
            if not self._warned_wait:
                self._warned_wait = True
                log.warning(
                    "comgra_like: training waits for the writer, which needs more time per "
                    "recorded step than training gives it (%d steps in flight). Recording "
                    "slows training down from here on; record less often (e.g. "
                    "DecisionMakerForRecordingsFrequencyPerType with a larger "
                    "min_training_steps_difference) or register fewer tensors.",
                    len(self.slots))
            if not channel.in_thread:
                # Training waits for the writer from now on: it stops giving way to this
                # process's threads for the step it is reducing (scheduling.py).
                channel.write(protocol.HURRY.decode())
        if not self.free:
            self.waits += 1
            began = time.monotonic()
            wait_for(lambda: bool(self.free))
            self.waited_seconds += time.monotonic() - began
        slot = self.slots[self.free.pop()]
        # A slot that overflowed into more segments keeps them (allocate() grows the last
        # one twofold, so they stay few): merging them into one would mean fresh shared
        # memory again, ~0.6 ms of the training thread's time per MiB here.
        slot.reset()
        return slot

    def release(self, slot: Slot) -> None:
        """Give back a slot that was not sent (the step turned out not to be recorded)."""
        self.free.append(slot.index)

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
            size = max(nelems, MIN_SEGMENT, self.largest_need)
        self._add_segment(slot, size)
        slot.fill[-1] = -(-nelems // ALIGN) * ALIGN
        return len(slot.segments) - 1, 0

    def _add_segment(self, slot: Slot, nelems: int) -> None:
        index = len(slot.segments)
        self.segments_created += 1
        if self.channel.in_thread:
            seg = Segment(nelems, None)
            slot.segments.append(seg)
            slot.fill.append(0)
            self.channel.send(protocol.Segment(slot.index, index, nelems, buffer=seg.mm))
            return
        seg = None
        for folder in self.segment_dirs:
            self._segment_seq += 1
            path = os.path.join(folder, f"{self.segment_prefix}{self._segment_seq}")
            try:
                seg = Segment(nelems, path)
                break
            except OSError as e:
                last = e
        if seg is None:
            raise StorageError(
                f"cannot allocate {nelems * 4 / 2**20:.0f} MiB of shared memory for a "
                f"recorded step ({last}); free space in {self.shm_dir} or the temp folder, "
                "or record fewer tensors"
            )
        # Known to the slot before the writer hears of it: if the writer is gone,
        # unlink_segments() removes it with the others.
        slot.segments.append(seg)
        slot.fill.append(0)
        self.channel.send(protocol.Segment(slot.index, index, nelems, path=seg.path))

    def sent(self, slot: Slot) -> None:
        """``slot`` goes to the writer: the next slots start at the size it needed."""
        self.largest_need = max(self.largest_need, slot.needed)

    def unlink_segments(self) -> None:
        """The writer process is gone: remove the files it had no time to unlink."""
        for slot in self.slots:
            for seg in slot.segments:
                if seg.path is not None:
                    try:
                        os.unlink(seg.path)
                    except OSError:
                        pass

    def close(self) -> None:
        """The writer has ended: unmap every segment, removing whatever it did not."""
        for slot in self.slots:
            for seg in slot.segments:
                seg.close(unlink=True)
