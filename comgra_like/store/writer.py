"""The shard writer: a background thread that turns recorded batches into parquet files.

The training thread hands over *jobs* (callables that build Arrow tables) through a
bounded queue, so a slow disk slows training down instead of growing memory without
limit. The thread buffers the tables of each kind and writes one shard per kind when
enough rows are buffered or when the oldest buffered row is older than
``flush_seconds`` (so that a GUI watching the folder sees new data soon).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import StorageError
from .files import atomic_write_json, atomic_write_parquet, shard_range
from .schema import SCHEMAS, SORT_KEYS, TABLES, part_name

log = logging.getLogger("comgra_like")

Job = Callable[[], dict[str, pa.Table]]

_STOP = object()
_FLUSH = "flush"

TENSOR_ROW_GROUP = 16 * 1024


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


class ShardWriter:
    """Writes the shards of one trial from a background thread."""

    def __init__(
        self,
        trial_dir: Path,
        *,
        max_queued_jobs: int = 2,
        flush_rows: int = 64 * 1024,
        flush_bytes: int = 32 * 2**20,
        flush_seconds: float = 1.0,
    ):
        self.trial_dir = Path(trial_dir)
        self.flush_rows = flush_rows
        self.flush_bytes = flush_bytes
        self.flush_seconds = flush_seconds
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued_jobs)
        self._buffers: dict[str, list[pa.Table]] = {k: [] for k in TABLES}
        self._buffered_rows = dict.fromkeys(TABLES, 0)
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self._next_seq = {k: self._first_free_seq(k) for k in TABLES}
        self._error: BaseException | None = None
        self._flushed = threading.Condition()
        self._flush_requests = 0
        self._flushes_done = 0
        self.shards_written = 0
        self._thread = threading.Thread(target=self._run, name="comgra_like-writer", daemon=True)
        self._thread.start()

    def _first_free_seq(self, kind: str) -> int:
        folder = self.trial_dir / kind
        if not folder.is_dir():
            return 0
        last = -1
        for p in folder.iterdir():
            r = shard_range(p.name)
            if r is not None:
                last = max(last, r[1])
        return last + 1

    # ----- called from the training thread -------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue a job; blocks while the queue is full (back-pressure)."""
        self._raise_if_failed()
        self._queue.put(job)

    def flush(self, timeout: float | None = None) -> None:
        """Block until every job submitted so far is written to disk."""
        self._raise_if_failed()
        with self._flushed:
            self._flush_requests += 1
            target = self._flush_requests
        self._queue.put(_FLUSH)
        with self._flushed:
            ok = self._flushed.wait_for(
                lambda: self._flushes_done >= target or self._error is not None, timeout
            )
        self._raise_if_failed()
        if not ok:
            raise StorageError(f"writing the shards of {self.trial_dir} timed out")

    def close(self) -> None:
        """Write what is buffered and stop the thread."""
        if not self._thread.is_alive():
            self._raise_if_failed()
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise StorageError(
                f"writing recordings to {self.trial_dir} failed: {self._error!r}. "
                "Check that the folder is writable and the disk is not full; the shards "
                "written before the failure are intact."
            ) from self._error

    # ----- the background thread -----------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                timeout = None
                if self._oldest is not None:
                    timeout = max(0.0, self._oldest + self.flush_seconds - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    self._write_buffers()
                    continue
                if item is _STOP:
                    self._write_buffers()
                    return
                if item is _FLUSH:
                    self._write_buffers()
                    with self._flushed:
                        self._flushes_done += 1
                        self._flushed.notify_all()
                    continue
                self._add(item())
                if self._must_flush():
                    self._write_buffers()
        except BaseException as e:  # reported to the training thread at its next call
            log.exception("comgra_like writer thread failed")
            self._error = e
            with self._flushed:
                self._flushed.notify_all()
            # Keep draining so that a blocked submit() can return and see the error.
            while True:
                try:
                    if self._queue.get(timeout=0.5) is _STOP:
                        return
                except queue.Empty:
                    if threading.main_thread().is_alive():
                        continue
                    return

    def _add(self, tables: dict[str, pa.Table]) -> None:
        for kind, table in tables.items():
            if table is None or table.num_rows == 0:
                continue
            self._buffers[kind].append(table)
            self._buffered_rows[kind] += table.num_rows
            self._buffered_bytes += table.nbytes
        if self._oldest is None and any(self._buffers.values()):
            self._oldest = time.monotonic()

    def _must_flush(self) -> bool:
        return (
            max(self._buffered_rows.values()) >= self.flush_rows
            or self._buffered_bytes >= self.flush_bytes
            or (self._oldest is not None and time.monotonic() - self._oldest >= self.flush_seconds)
        )

    def _write_buffers(self) -> None:
        # Steps last: a reader that sees a step row finds its tensors already on disk.
        for kind in ("tensors", "kpis", "steps"):
            tables = self._buffers[kind]
            if not tables:
                continue
            table = sort_table(kind, unify(kind, tables)).cast(SCHEMAS[kind])
            seq = self._next_seq[kind]
            atomic_write_parquet(
                self.trial_dir / kind / part_name(seq),
                table,
                row_group_size=TENSOR_ROW_GROUP if kind == "tensors" else None,
            )
            self._next_seq[kind] = seq + 1
            self.shards_written += 1
            self._buffers[kind] = []
            self._buffered_rows[kind] = 0
        self._buffered_bytes = 0
        self._oldest = None
        # Arrow's allocator keeps freed memory for reuse; a recorder that writes every
        # second would otherwise hold on to the high-water mark of every flush.
        pa.default_memory_pool().release_unused()


def append_jsonl(path: Path, obj: dict) -> None:
    """Append one JSON line and flush it, so a killed process loses at most that line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()


def write_json(path: Path, obj) -> None:
    atomic_write_json(path, obj)
