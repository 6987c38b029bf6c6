"""Compaction: merge the closed shards of a trial into one sorted file per kind.

Reading costs about 1-2 ms per file regardless of its size, so a finished trial with
thousands of shards is merged into one file per kind. The merged file is written
first (atomically) and the sources are deleted afterwards, so a crash at any point
leaves a trial that reads the same data: readers ignore sources a ``compact`` file
covers (see :func:`comgra_like.store.files.live_shards`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import StorageError
from .files import atomic_write_parquet_stream, live_shards, shard_range
from .schema import MAX_ROWS_PER_ROW_GROUP, SCHEMAS, TABLES, compact_name
from .writer import TENSOR_ROW_GROUP

log = logging.getLogger("comgra_like")


def compact_trial(trial_dir: str | os.PathLike) -> dict[str, int]:
    """Merge the shards of one trial; returns how many files were merged per kind.

    Only call it on a trial no process is writing to (the recorder calls it in
    ``finalize``). Unreadable shards are left in place and reported in the log.
    """
    trial_dir = Path(trial_dir)
    if not (trial_dir / "trial.json").is_file():
        raise StorageError(f"{trial_dir} is not a trial folder (no trial.json in it)")
    merged = {}
    for kind in TABLES:
        folder = trial_dir / kind
        if not folder.is_dir():
            continue
        names = live_shards([p.name for p in folder.iterdir()])
        if len(names) <= 1:
            merged[kind] = 0
            continue
        used = []
        for name in names:
            try:
                pq.read_metadata(folder / name)
                used.append(name)
            except Exception as e:  # noqa: BLE001 - a damaged shard must not stop the rest
                log.warning("compaction skips unreadable shard %s: %s", folder / name, e)
        if len(used) != len(names):
            # An unreadable shard inside the range would be hidden by the compact file:
            # merge only the longest run of readable shards with none between them.
            used = _contiguous_run(names, set(used))
        if len(used) <= 1:
            merged[kind] = 0
            continue
        ranges = [shard_range(n) for n in used]
        first, last = min(r[0] for r in ranges), max(r[1] for r in ranges)
        # Shards hold strictly later steps than the ones before them and are sorted
        # inside, so writing them in sequence order keeps the merged file sorted.
        atomic_write_parquet_stream(
            folder / compact_name(first, last),
            SCHEMAS[kind],
            (pq.read_table(folder / name, schema=SCHEMAS[kind]) for name in used),
            row_group_size=TENSOR_ROW_GROUP if kind == "tensors" else MAX_ROWS_PER_ROW_GROUP,
        )
        for name in used:
            try:
                os.unlink(folder / name)
            except FileNotFoundError:
                pass
        merged[kind] = len(used)
    pa.default_memory_pool().release_unused()
    return merged


def _contiguous_run(names: list[str], readable: set[str]) -> list[str]:
    """The longest run of readable shards with no unreadable shard between them."""
    best: list[str] = []
    run: list[str] = []
    for name in names:
        if name in readable:
            run.append(name)
            if len(run) > len(best):
                best = list(run)
        else:
            run = []
    return best
