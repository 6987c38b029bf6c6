"""Shard buffering and writing: the tables of a trial, buffered by kind and written as
``part-<seq>.parquet`` shards (used by the writer's ``Worker``)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..format.files import Files, files_for, parquet_bytes
from ..format.layout import STEPS, TrialLayout, part_name, shard_seqs
from ..format.schema import (
    FILE_SCHEMAS,
    SHARD_SCHEMAS,
    SORT_KEYS,
    mean_row_bytes,
    row_group_size,
    with_rank,
)
from .uploads import Uploader

RELEASE_SECONDS = 30.0  # how often unused Arrow memory goes back to the system
# The order a flush writes its shards in: steps last, so that a reader that sees a step
# row finds its tensors (and everything else) already on disk.
WRITE_ORDER = (*(kind for kind in SHARD_SCHEMAS if kind != STEPS), STEPS)


def sort_table(kind: str, table: pa.Table) -> pa.Table:
    """Rows in the order of SORT_KEYS (Arrow cannot sort dictionary columns directly)."""
    if table.num_rows < 2:
        return table
    keys = {}
    for name, _ in SORT_KEYS[kind]:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        keys[name] = col
    order = pc.sort_indices(pa.table(keys), sort_keys=SORT_KEYS[kind])
    return table.take(order)


def unify(kind: str, tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables of one kind; dictionaries are unified so the schema stays fixed."""
    table = pa.concat_tables(tables, promote_options="none") if len(tables) > 1 else tables[0]
    return table.unify_dictionaries().combine_chunks()


class ShardBuffer:
    """Buffers the tables of one trial by kind and writes them as shards.

    The writer's ``Worker`` owns one and calls ``add`` for every recorded
    step and ``write`` when ``must_flush`` says so or when ``seconds_to_flush`` has
    passed; with ``background=True`` the shards are written by a thread (one write at a
    time, in order) and ``wait`` waits for them. One shard per kind is written when
    enough rows are buffered or when the oldest buffered row is older than
    ``flush_seconds`` (so that a GUI watching the folder sees new data soon).

    ``rank``: the torch.distributed rank this writer records; its shards get the rank's
    names (``layout.part_name``) and ``rank`` column, so that the writers of several
    ranks share the trial's folders without ever writing one name.
    """

    def __init__(
        self,
        trial_dir: Path,
        *,
        flush_rows: int = 64 * 1024,
        flush_bytes: int = 32 * 2**20,
        flush_seconds: float = 1.0,
        background: bool = False,
        files: Files | None = None,
        rank: int = 0,
        uploads: Uploader | None = None,
    ):
        self.trial = TrialLayout(Path(trial_dir))
        self.rank = int(rank)
        self.files = files or files_for(trial_dir)
        self.flush_rows = flush_rows
        self.flush_bytes = flush_bytes
        self.flush_seconds = flush_seconds
        self._buffers: dict[str, list[pa.Table]] = {k: [] for k in WRITE_ORDER}
        self._buffered_rows = dict.fromkeys(WRITE_ORDER, 0)
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self._next_seq = {k: self._first_free_seq(k) for k in WRITE_ORDER}
        self._unsorted: set[str] = set()
        self.shards_written = 0
        self._last_release = time.monotonic()
        # Parquet encoding and compression release the GIL: in a thread they run on
        # another core while the next steps' statistics are computed.
        self.uploads = uploads or Uploader(self.files, self.files.display(self.trial.root),
                                           background=background)

    def _first_free_seq(self, kind: str) -> int:
        # One scan at the start, then counted here: only one writer ever writes a rank's
        # names in a trial folder (the lock of the trial's rank, docs/FORMAT.md), so no
        # other process takes a number.
        last = -1
        for name in self.files.list(self.trial.table(kind)):
            r = shard_seqs(name)
            if r is not None and r[0] == self.rank:
                last = max(last, r[2])
        return last + 1

    def add(self, tables: dict[str, pa.Table | None], presorted: tuple[str, ...] = ()) -> None:
        """Buffer tables; ``presorted`` kinds come sorted and after everything buffered
        before them in the sort order (one recorded step after the other), so their
        shard needs no sort."""
        for kind, table in tables.items():
            if table is None or table.num_rows == 0:
                continue
            if kind not in presorted:
                self._unsorted.add(kind)
            self._buffers[kind].append(table)
            self._buffered_rows[kind] += table.num_rows
            self._buffered_bytes += table.nbytes
        if self._oldest is None and any(self._buffers.values()):
            self._oldest = time.monotonic()

    def seconds_to_flush(self) -> float | None:
        """Seconds until the buffered rows are due (None: nothing buffered)."""
        if self._oldest is None:
            return None
        return max(0.0, self._oldest + self.flush_seconds - time.monotonic())

    def must_flush(self) -> bool:
        return (
            max(self._buffered_rows.values()) >= self.flush_rows
            or self._buffered_bytes >= self.flush_bytes
            or (self._oldest is not None and time.monotonic() - self._oldest >= self.flush_seconds)
        )

    def write(self) -> None:
        """Write every buffered kind as one shard each (in the background if so made;
        while an object store is away, queued: ``uploads.py``)."""
        self.uploads.raise_error()
        nbytes = self._buffered_bytes
        job = self._take()
        if job is not None:
            self.uploads.submit(self.tasks(job), nbytes)

    def wait(self) -> None:
        """Return once every shard handed to the background writer is written."""
        self.uploads.wait()

    def take_tasks(self) -> tuple[list, int]:
        """Everything buffered as writes for the uploader (after a failure), and its
        size; the buffer is empty after."""
        nbytes = self._buffered_bytes
        job = self._take()
        return (self.tasks(job) if job is not None else []), nbytes

    def _take(self) -> list[tuple[str, list[pa.Table], bool, int]] | None:
        job = []
        for kind in WRITE_ORDER:
            tables = self._buffers[kind]
            if not tables:
                continue
            job.append((kind, tables, kind in self._unsorted, self._next_seq[kind]))
            self._next_seq[kind] += 1
            self._buffers[kind] = []
            self._buffered_rows[kind] = 0
        self._buffered_bytes = 0
        self._oldest = None
        self._unsorted.clear()
        return job or None

    def tasks(self, job) -> list[tuple[_ShardWrite, str]]:
        """The writes of a job: one shard per kind, in WRITE_ORDER."""
        return [(_ShardWrite(self, kind, tables, unsorted, seq),
                 f"writing {self.files.display(self.trial.table(kind) / part_name(seq, self.rank))}")
                for kind, tables, unsorted, seq in job]

    def _release_memory(self) -> None:
        # Arrow's allocator keeps freed memory for reuse. Handing it back to the system
        # after every shard made the next shard fault it in again (~10 ms of the ~26 ms
        # a 20-step shard cost here), so it is handed back every RELEASE_SECONDS: the
        # memory kept meanwhile is what one flush needs, which flush_bytes bounds.
        now = time.monotonic()
        if now - self._last_release >= RELEASE_SECONDS:
            self._last_release = now
            pa.default_memory_pool().release_unused()


class _ShardWrite:
    """One shard's write: the table is made once; on an object store the file's bytes
    too, so that an upload tried again only sends them again."""

    def __init__(self, buffer: ShardBuffer, kind: str, tables: list[pa.Table], unsorted: bool,
                 seq: int):
        self.buffer, self.kind, self.tables, self.unsorted = buffer, kind, tables, unsorted
        self.path = buffer.trial.table(kind) / part_name(seq, buffer.rank)
        self.data: pa.Table | bytes | None = None

    def __call__(self) -> None:
        buffer, kind = self.buffer, self.kind
        files = buffer.files
        if self.data is None:
            table = unify(kind, self.tables)
            if self.unsorted:
                table = sort_table(kind, table)
            table = with_rank(table.cast(SHARD_SCHEMAS[kind]), buffer.rank)
            table = table.cast(FILE_SCHEMAS[kind])
            self.tables = []
            self.data = (parquet_bytes(table, row_group_size(kind, mean_row_bytes(table))) if files.remote
                         else table)
        if isinstance(self.data, pa.Table):
            files.write_parquet(self.path, self.data,
                                row_group_size=row_group_size(kind, mean_row_bytes(self.data)))
        else:
            files.write_bytes(self.path, self.data)
        self.data = None
        buffer.shards_written += 1
        buffer._release_memory()
