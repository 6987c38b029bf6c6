"""Notes of a trial: append-only parquet shards in ``notes/`` (``layout.NOTES_DIR``).

Object stores cannot append to a file, so notes are written like every other table: one
``part-<seq>.parquet`` per flush, never modified afterwards, in the order they were
taken. Recordings made before this (schema_version 1 groups such as ``example_runs/``)
have ``notes.jsonl`` (``layout.LEGACY_NOTES_JSONL``), one ``{"text", "wall_time",
"training_step"}`` object per line; readers read both, the JSON lines first.
"""

from __future__ import annotations

import pyarrow as pa

NOTES_SCHEMA = pa.schema(
    [
        ("trial_id", pa.dictionary(pa.int32(), pa.string())),
        ("text", pa.string()),
        ("wall_time", pa.float64()),  # unix time the note was taken
        ("training_step", pa.int64()),  # null: a note that belongs to no step
    ]
)
