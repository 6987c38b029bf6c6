"""Trials for the query tests, written by the real recorder (tests/conftest.py TinyRun)
and then arranged on disk the way a running or a two-writer recording leaves them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from comgra_like.format.layout import part_name

TABLE_FOLDERS = ("steps", "tensors")


def one_shard_per_step(trial: Path) -> dict[int, dict[str, Path]]:
    """Rewrite a trial's steps and tensors as one part per recorded step, as a recorder
    that flushes every step leaves them; step -> table -> its part."""
    parts: dict[int, dict[str, Path]] = {}
    for kind in TABLE_FOLDERS:
        folder = trial / kind
        sources = sorted(folder.glob("*.parquet"))
        table = pq.read_table(sources)
        for source in sources:
            source.unlink()
        for seq, step in enumerate(sorted(set(table["training_step"].to_pylist()))):
            path = folder / part_name(seq)
            pq.write_table(table.filter(pc.equal(table["training_step"], step)), path)
            parts.setdefault(step, {})[kind] = path
    return parts


def copy_group(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
