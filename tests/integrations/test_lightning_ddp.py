"""The Lightning callback under ``strategy="ddp"`` on CPU: two gloo processes started by
Lightning's own launcher record into one trial, each rank its own part of the batch
(as plain DDP does, docs/DISTRIBUTED.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from comgra_like.query import open_group

CHILD = Path(__file__).with_name("lightning_ddp_child.py")


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_two_ranks_record_into_one_trial(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(CHILD), str(tmp_path)], check=False, env=env,
                          text=True, capture_output=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = {(tmp_path / f"trial-{r}.txt").read_text() for r in (0, 1)}
    assert len(said) == 1, f"the ranks recorded into different trials: {said}"
    trial, group = said.pop().split("\n")
    assert Path(group) == tmp_path / "lightning_logs" / "version_0" / "comgra"
    g = open_group(group)
    assert {t.trial_id for t in g.list_trials()} == {trial, f"{trial}.validation"}
    assert g.list_ranks(trial) == [0, 1]
    stats = g.read_statistics(trial, ranks="all")
    assert sorted(stats["rank"].unique()) == [0, 1]
    assert sorted(stats["training_step"].unique()) == [0, 1, 2]
    key = ["training_step", "recording_type", "aggregation", "role"]
    # each rank saw its own samples: the first layer's output differs between the ranks
    out = stats[(stats["node"] == "model.module.first") & (stats["role"] == "output 0")]
    r0, r1 = (out[out["rank"] == r].sort_values(key) for r in (0, 1))
    assert len(r0) == len(r1) > 0
    assert not (r0["mean"].to_numpy() == r1["mean"].to_numpy()).all()
    # the parameters' gradients are DDP's all-reduced ones: the same on both ranks
    grads = stats[(stats["node"] == "model.module.first.weight")
                  & stats["recording_type"].str.startswith("gradient")]
    g0, g1 = (grads[grads["rank"] == r].sort_values(key) for r in (0, 1))
    assert len(g0) == 3
    assert (g0["norm"].to_numpy() == g1["norm"].to_numpy()).all()
    val = g.read_statistics(f"{trial}.validation", ranks="all")
    assert sorted(val["rank"].unique()) == [0, 1]
