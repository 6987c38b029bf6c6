"""One group recorded twice by the real recorder, to an S3-compatible server and to disk,
for the whole-group query tests (DuckDB and Spark, issue 19): two trials, each recorded
by two ranks of a job (RANK/WORLD_SIZE in the environment, as a launcher sets them; the
ranks train on different data), a shard per step and compacted at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TinyRun

GROUP = "g"
TRIALS = ("trial_a", "trial_b")
RANKS = (0, 1)
RECORD = [0, 1, 4, 5, 8, 9]
STEPS = 10

#: The issue's example: the largest gradient norm per node over all trials (per trial
#: and rank here, so that a rank or a trial read wrongly changes the answer).
LARGEST_GRADIENT_NORM = """
    SELECT trial_id, rank, node, max(norm) AS max_norm, count(*) AS n
    FROM tensors
    WHERE recording_type LIKE 'gradient:%' AND aggregation IN ('none', 'batch_abs_max')
    GROUP BY trial_id, rank, node ORDER BY trial_id, rank, node
"""


def record_group(root: str | Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Record the group under ``root`` (a folder or an s3:// root); its location."""
    for number, trial in enumerate(TRIALS):
        for rank in RANKS:
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(len(RANKS)))
            run = TinyRun(root, GROUP, trial, record_steps=RECORD, seed=10 * number + rank)
            for step in range(STEPS):
                run.step(step)
                run.recorder.flush()
            run.finalize()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    return f"{root}/{GROUP}"


def rows(frame) -> list[tuple]:
    """A frame's rows as plain Python values (numpy scalars compare as their values)."""
    return [tuple(v.item() if hasattr(v, "item") else v for v in row)
            for row in frame.itertuples(index=False)]
