"""The renovation changed no recording: the tutorial (comgra API) and a watch()ed loop
with per-module metrics, run with fixed seeds on one torch thread, read back through the
public query API exactly as the code before the renovation (commit eb52376) wrote them.

tests/fixtures/recording_digest.json holds the digest of those reads, made by running
``python tests/test_recordings_unchanged.py OUT.json`` with that commit's code. A change
that alters what is recorded (a statistic, a row, a step) changes a digest here; a
deliberate change regenerates the fixture with the new code and says why in its commit.
Wall-clock columns are left out (they differ between runs). ``read_histograms``' column
``module`` was ``node`` then (docs/FORMAT.md, "Vocabulary"): it is digested under that name.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "recording_digest.json"
TUTORIAL_STEPS = 40
WATCH_STEPS = 12


def _frame_digest(df: pd.DataFrame) -> str:
    df = df.copy()
    df = df[[c for c in df.columns if "time" not in str(c)]]
    df = df[sorted(df.columns, key=str)]
    order = hashlib.sha256()
    # rows in a canonical order: by every column's text
    keys = ["|".join(map(str, row)) for row in df.itertuples(index=False)]
    df = df.iloc[sorted(range(len(keys)), key=keys.__getitem__)]
    for c in df.columns:
        values = df[c].to_numpy()
        order.update(str(c).encode())
        if values.dtype.kind == "f":
            order.update(np.asarray(values, np.float64).tobytes())
        else:
            order.update(json.dumps([str(v) for v in values]).encode())
    return f"{len(df)}:{order.hexdigest()[:16]}"


def record(root: Path) -> dict:
    """Record the tutorial and a watched loop under ``root``; the digest of their reads."""
    import torch
    from comgra_like.scripts.tutorial import run_tutorial

    import comgra_like
    from comgra_like.query import open_group

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        group_dir = run_tutorial(root / "tutorial", steps=TUTORIAL_STEPS, seed=0)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        handle = comgra_like.watch(
            model, log_freq=4, standalone_dir=root / "watched", trial_id="w", verbose=False,
            metrics={"0": ["InputSndNorm", "WeightGradNorm"], "2": ["OutputGradSndNorm"]})
        data = torch.Generator().manual_seed(1)
        for _ in range(WATCH_STEPS):
            x = torch.randn(16, 6, generator=data)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        handle.unwatch()
        handle.recorder.finalize()
    finally:
        torch.set_num_threads(before)
    out: dict = {}
    group = open_group(group_dir)
    for trial in sorted(t.trial_id for t in group.list_trials()):
        out[f"tutorial/{trial}/statistics"] = _frame_digest(group.read_statistics(trial))
        out[f"tutorial/{trial}/kpis"] = _frame_digest(group.read_kpis(trial))
        out[f"tutorial/{trial}/steps"] = _frame_digest(group.list_steps(trial))
    watched = open_group(root / "watched")
    out["watched/w/statistics"] = _frame_digest(watched.read_statistics("w"))
    histograms = watched.read_histograms("w")
    # the read's module column was named node when the fixture was made (the same values)
    out["watched/w/histograms"] = _frame_digest(histograms.rename(columns={"module": "node"}))
    out["watched/w/metrics"] = _frame_digest(watched.read_metrics("w"))
    return out


def test_the_recordings_read_back_as_before_the_renovation(tmp_path):
    expected = json.loads(FIXTURE.read_text())
    assert record(tmp_path) == expected


def test_the_digest_sees_a_changed_value():
    df = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"], "wall_time": [1.0, 2.0]})
    same = df.iloc[::-1].assign(wall_time=[5.0, 6.0])  # row order and wall time ignored
    assert _frame_digest(df) == _frame_digest(same)
    changed = df.assign(a=[1.0, 2.0000001])
    assert _frame_digest(df) != _frame_digest(changed)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        digest = record(Path(work))
    Path(sys.argv[1]).write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")
    print(json.dumps(digest, indent=1, sort_keys=True))
