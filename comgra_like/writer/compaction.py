"""Compaction: merge the closed shards of a trial into one sorted file per kind.

Reading costs about 1-2 ms per file regardless of its size, so a finished trial with
thousands of shards is merged into one file per kind. The merged file is written
first (atomically) and the sources are deleted afterwards, so a crash at any point
leaves a trial that reads the same data: readers ignore sources a ``compact`` file
covers (see :func:`comgra_like.format.layout.live_shards`). On object storage the same
order holds: the merged object is uploaded whole, then the sources are deleted.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa

from ..errors import StorageError
from ..format.files import Files, files_for
from ..format.layout import TrialLayout, compact_name, live_shards, shard_range
from ..format.schema import SHARD_SCHEMAS, row_group_size

log = logging.getLogger("comgra_like")


def compact_trial(trial_dir: str | os.PathLike, files: Files | None = None) -> dict[str, int]:
    """Merge the shards of one trial; returns how many files were merged per kind.

    Only call it on a trial no process is writing to (the writer calls it when the
    recorder's ``finalize`` closes it). Unreadable shards are left in place and reported
    in the log.
    """
    trial = TrialLayout(Path(trial_dir))
    files = files or files_for(trial_dir)
    if not files.is_file(trial.trial_json):
        raise StorageError(f"{trial.root} is not a trial folder (no trial.json in it)")
    merged = {}
    for kind, schema in SHARD_SCHEMAS.items():
        folder = trial.table(kind)
        present = files.list(folder)
        if not present:
            continue
        names = live_shards(present)
        if len(names) <= 1:
            merged[kind] = 0
            continue
        used = []
        for name in names:
            try:
                files.parquet_metadata(folder / name)
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
        files.write_parquet_stream(
            folder / compact_name(first, last),
            schema,
            (files.read_parquet(folder / name, schema=schema) for name in used),
            row_group_size=row_group_size(kind),
        )
        for name in used:
            files.remove(folder / name)
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
