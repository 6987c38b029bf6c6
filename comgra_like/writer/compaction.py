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
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from ..errors import StorageError
from ..format.files import Files, files_for
from ..format.layout import TrialLayout, compact_name, live_shards, shard_seqs
from ..format.schema import (
    FILE_SCHEMAS,
    conform,
    current_names,
    row_group_size,
    with_rank,
)

log = logging.getLogger("comgra_like")


def compact_trial(trial_dir: str | os.PathLike, files: Files | None = None,
                  ranks: Iterable[int] | None = None) -> dict[str, int]:
    """Merge the shards of one trial, each rank's into files of its own; returns how
    many files were merged per kind.

    ``ranks``: only the shards of these ranks (a rank's writer compacts its own at
    ``finalize``, while other ranks may still be writing theirs); None: every rank. Only
    call it on ranks no process is writing to. Unreadable shards are left in place and
    reported in the log. With ``ranks`` given, trial.json is not required (the lowest
    recording rank writes it, maybe later than this rank finishes).
    """
    trial = TrialLayout(Path(trial_dir))
    files = files or files_for(trial_dir)
    if ranks is None and not files.is_file(trial.trial_json):
        raise StorageError(f"{trial.root} is not a trial folder (no trial.json in it)")
    wanted = None if ranks is None else {int(r) for r in ranks}
    merged = {}
    for kind, schema in FILE_SCHEMAS.items():
        folder = trial.table(kind)
        present = files.list(folder)
        if not present:
            continue
        by_rank: dict[int, list[str]] = {}
        for name in live_shards(present):
            rank = shard_seqs(name)[0]
            if wanted is None or rank in wanted:
                by_rank.setdefault(rank, []).append(name)
        merged[kind] = sum(_compact_rank(files, folder, kind, schema, rank, names)
                           for rank, names in sorted(by_rank.items()))
    pa.default_memory_pool().release_unused()
    return merged


def _compact_rank(files: Files, folder: Path, kind: str, schema: pa.Schema, rank: int,
                  names: list[str]) -> int:
    """Merge one rank's live shards of one table; how many files were merged."""
    if len(names) <= 1:
        return 0
    used = []
    row_bytes = 0.0  # the largest mean row of the shards: the merged file's row groups
    for name in names:
        try:
            meta = files.parquet_metadata(folder / name)
            used.append(name)
            if meta.num_rows:
                size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
                row_bytes = max(row_bytes, size / meta.num_rows)
        except Exception as e:  # noqa: BLE001 - a damaged shard must not stop the rest
            log.warning("compaction skips unreadable shard %s: %s", folder / name, e)
    if len(used) != len(names):
        # An unreadable shard inside the range would be hidden by the compact file:
        # merge only the longest run of readable shards with none between them.
        used = _contiguous_run(names, set(used))
    if len(used) <= 1:
        return 0
    seqs = [shard_seqs(n) for n in used]
    first, last = min(r[1] for r in seqs), max(r[2] for r in seqs)
    # Shards hold strictly later steps than the ones before them and are sorted inside,
    # so writing them in sequence order keeps the merged file sorted. Files written
    # before ranks existed get their rank column here.
    files.write_parquet_stream(
        folder / compact_name(first, last, rank),
        schema,
        # older files' column names read as the current ones (format/schema.py)
        (with_rank(conform(current_names(files.read_parquet(folder / name), kind), schema),
                   rank) for name in used),
        row_group_size=row_group_size(kind, row_bytes),
    )
    for name in used:
        files.remove(folder / name)
    return len(used)


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
