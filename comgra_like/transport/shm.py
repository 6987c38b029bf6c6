"""Shared memory between the training process and the writer: a *slot* holds the
tensors of one recorded step in flight, in one or more *segments* (float32 buffers).

In the process transport a segment is a file in ``/dev/shm`` (or the temp folder) that
both processes map; the writer unlinks it as soon as it has mapped it, so a crash leaks
nothing. In the thread transport it is anonymous memory.
"""

from __future__ import annotations

import mmap
import os

ALIGN = 16  # elements (64 bytes) between allocations
MIN_SEGMENT = 1 << 18  # elements (1 MiB)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux only


class Segment:
    """One shared float32 buffer of a slot."""

    def __init__(self, nelems: int, path: str | None):
        self.nelems = nelems
        self.path = path
        if path is None:
            self.mm = mmap.mmap(-1, nelems * 4)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if hasattr(os, "posix_fallocate"):
                    # Reserve the pages now: a full tmpfs fails here, cleanly, instead of
                    # with SIGBUS when the training process writes into the mapping.
                    os.posix_fallocate(fd, 0, nelems * 4)
                else:  # pragma: no cover - non-Linux
                    os.ftruncate(fd, nelems * 4)
                # Page tables filled now, in one system call: otherwise the training
                # thread takes a page fault per 4 KiB the first time it copies into
                # the segment (measured: recorded steps of 2-5 ms longer than usual
                # until every segment had been written once).
                self.mm = mmap.mmap(fd, nelems * 4, flags=mmap.MAP_SHARED | _POPULATE)
            except BaseException:
                os.close(fd)
                os.unlink(path)
                raise
            os.close(fd)
        self.view = None  # the recorder's tensor over this buffer, made on first use

    def close(self, unlink: bool = False) -> None:
        """Unmap; ``unlink`` only once the writer has mapped it (it unlinks it itself)."""
        self.view = None
        try:
            self.mm.close()
        except BufferError:  # a tensor over it is still alive; the GC unmaps it
            pass
        if unlink and self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class Slot:
    """The shared memory of one recorded step in flight: segments, filled front to back."""

    def __init__(self, index: int):
        self.index = index
        self.segments: list[Segment] = []
        self.fill: list[int] = []
        self.needed = 0  # elements the last use of this slot needed
        self.plans: dict = {}  # the recorder's cached copy plans (views into the segments)

    def reset(self) -> None:
        self.fill = [0] * len(self.segments)
        self.needed = 0
