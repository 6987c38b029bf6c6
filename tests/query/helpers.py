"""Trials for the query tests, written by the real recorder (tests/conftest.py TinyRun)
and then arranged on disk the way a running or a two-writer recording leaves them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from comgra_like.format.layout import TrialLayout, part_name

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


def notes_only_trial(group: Path, trial_id: str) -> TrialLayout:
    """A trial folder with a trial.json and nothing else yet."""
    layout = TrialLayout.of(group, trial_id)
    layout.root.mkdir(parents=True)
    layout.trial_json.write_text(json.dumps(
        {"schema_version": 1, "trial_id": trial_id, "status": "running", "created": 0.0}))
    return layout


def write_notes_shard(layout: TrialLayout, seq: int, notes: list[tuple[str, float, int | None]],
                      name: str | None = None) -> Path:
    """A notes shard as the writer writes them (docs/FORMAT.md), with pyarrow directly."""
    from comgra_like.format.notes import NOTES_SCHEMA

    texts, times, steps = zip(*notes) if notes else ((), (), ())
    table = pa.table({
        "trial_id": pa.array([layout.trial_id] * len(notes)).dictionary_encode(),
        "text": pa.array(texts, pa.string()),
        "wall_time": pa.array(times, pa.float64()),
        "training_step": pa.array(steps, pa.int64()),
    }).cast(NOTES_SCHEMA)
    path = layout.notes / (name or part_name(seq))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
