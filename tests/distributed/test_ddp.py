"""Per-rank recording under torch.distributed, with real processes (issue 19).

Two ranks on CPU with the gloo backend train a DistributedDataParallel model on different
shards of one dataset; each records into the same trial with its own writer process. The
statistics of the concatenated batch are computed here with torch from the activations
the ranks saved, independently of the recorder and the writer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from comgra_like.query import open_group
from comgra_like.writer.compaction import compact_trial

CHILD = Path(__file__).with_name("ddp_child.py")
STEPS = 4
PER_SAMPLE = {
    "mean": lambda h: h.mean(1), "abs_mean": lambda h: h.abs().mean(1),
    "std": lambda h: h.std(1), "abs_max": lambda h: h.abs().amax(1),
    "min": lambda h: h.amin(1), "max": lambda h: h.amax(1), "norm": lambda h: h.norm(dim=1),
}


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def start(root: Path, rank: int, port: str, mode: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return subprocess.Popen([sys.executable, str(CHILD), str(root), str(rank), "2", port, mode],
                            env=env, text=True, stdout=subprocess.PIPE, **kwargs)


def run_job(root: Path, mode: str) -> None:
    port = free_port()
    procs = [start(root, rank, port, mode, stderr=subprocess.PIPE) for rank in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip().endswith("finished")


def raw(root: Path, name: str, rank: int, step: int) -> torch.Tensor:
    return torch.from_numpy(np.load(root / "raw" / f"{name}-{rank}-{step}.npy",
                                    allow_pickle=False)).double()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    run_job(root, "ddp")
    return root


def test_both_ranks_record_their_own_shards_into_one_trial(ddp_run):
    g = open_group(ddp_run / "g")
    assert [t.trial_id for t in g.list_trials()] == ["t"]
    assert g.list_ranks("t") == [0, 1]
    trial = ddp_run / "g" / "trials" / "t"
    # each rank's own files, compacted per rank at finalize (one file per rank here)
    names = sorted(p.name for p in (trial / "tensors").iterdir())
    assert any("-r0001-" in n for n in names) and any("-r" not in n for n in names)
    info = json.loads((trial / "trial.json").read_text())
    assert info["status"] == "finished"
    assert info["settings"]["world_size"] == 2 and info["settings"]["ranks"] == [0, 1]
    for rank in (0, 1):
        assert g.list_steps("t", rank=rank)["training_step"].tolist() == list(range(STEPS))
    # the rank is a column of the files themselves (for DuckDB, Spark, ...)
    import pyarrow.parquet as pq
    for name in names:
        ranks = set(pq.read_table(trial / "tensors" / name).column("rank").to_pylist())
        assert ranks == {1 if "-r0001-" in name else 0}


def test_activations_differ_between_ranks_and_match_what_each_rank_computed(ddp_run):
    g = open_group(ddp_run / "g")
    for step in range(STEPS):
        per_rank = [g.read_tensor("t", step, 0, "hidden", "hidden", "forward", "batch_mean",
                                  rank=r).values for r in (0, 1)]
        assert not np.allclose(per_rank[0], per_rank[1])  # different data shards
        for r in (0, 1):
            expected = raw(ddp_run, "hidden", r, step).mean(0).numpy()
            np.testing.assert_allclose(per_rank[r], expected, rtol=1e-5, atol=1e-6)
    side = g.read_ranks_side_by_side("t", "hidden", "hidden", "forward", "batch_mean", "mean")
    assert list(side.columns[:4]) == ["training_step", "iteration", 0, 1]
    assert len(side) == STEPS and (side["spread"] > 0).all()


def test_parameter_gradients_are_equal_on_both_ranks_after_ddp_all_reduce(ddp_run):
    g = open_group(ddp_run / "g")
    grads = g.read_statistics("t", ranks="all", recording_types="gradient:loss",
                              aggregations="none")
    grads = grads[grads["kind"] == "parameter"]
    assert set(grads["node"]) == {"net.first.weight", "net.first.bias", "net.second.weight",
                                  "net.second.bias"}
    r0 = grads[grads["rank"] == 0].drop(columns="rank").reset_index(drop=True)
    r1 = grads[grads["rank"] == 1].drop(columns="rank").reset_index(drop=True)
    assert len(r0) == 4 * STEPS
    assert r0.equals(r1)
    merged = g.read_merged_statistics("t", recording_types="gradient:loss", aggregations="none")
    merged = merged[merged["kind"] == "parameter"]
    assert (merged["merge"] == "same").all() and (merged["ranks"] == 2).all()
    # the losses of the two ranks differ: their merge is refused, not averaged
    losses = g.read_merged_statistics("t", nodes="loss", aggregations="none",
                                      recording_types="forward")
    assert (losses["merge"] == "differs").all() and losses["mean"].isna().all()


def test_merged_batch_statistics_are_those_of_the_concatenated_batch(ddp_run):
    g = open_group(ddp_run / "g")
    merged = g.read_merged_statistics("t", nodes=["hidden", "out"], recording_types="forward")
    assert set(merged["aggregation"]) == {"batch_mean", "batch_std", "batch_abs_max"}
    assert (merged["batch_size"] == 10).all() and (merged["ranks"] == 2).all()  # 6 + 4
    checked = 0
    for node in ("hidden", "out"):
        for step in range(STEPS):
            whole = torch.cat([raw(ddp_run, node, r, step) for r in (0, 1)])
            rows = merged[(merged["node"] == node) & (merged["training_step"] == step)]
            rows = rows.set_index("aggregation")
            for stat, fn in PER_SAMPLE.items():
                per_sample = fn(whole)
                expected = {"batch_mean": per_sample.mean(), "batch_std": per_sample.std(),
                            "batch_abs_max": per_sample.abs().max()}
                for agg, value in expected.items():
                    assert rows.loc[agg, stat] == pytest.approx(float(value), rel=1e-4,
                                                                abs=1e-5), (node, step, stat, agg)
                    checked += 1
            # per neuron: the values of the merged rows
            for agg, expected in (("batch_mean", whole.mean(0)), ("batch_std", whole.std(0)),
                                  ("batch_abs_max", whole.abs().amax(0))):
                record = g.read_merged_tensor("t", step, 0, node, node, "forward", agg)
                np.testing.assert_allclose(record.values, expected.numpy(), rtol=1e-4,
                                           atol=1e-5)
                assert record.stats["mean"] == pytest.approx(
                    float(rows.loc[agg, "mean"]), rel=1e-6, abs=1e-7)
    assert checked == 2 * STEPS * len(PER_SAMPLE) * 3
    # one rank's statistics alone are not the batch's: the merge did something
    alone = g.read_statistics("t", nodes="hidden", recording_types="forward",
                              aggregations="batch_std", ranks=0)
    both = merged[(merged["node"] == "hidden") & (merged["aggregation"] == "batch_std")]
    assert not np.allclose(alone["mean"].to_numpy(), both["mean"].to_numpy())


def test_sample_rows_are_not_merged(ddp_run):
    from comgra_like.errors import ConfigurationError

    g = open_group(ddp_run / "g")
    with pytest.raises(ConfigurationError, match="cannot be merged"):
        g.read_merged_tensor("t", 0, 0, "hidden", "hidden", "forward", "sample")
    merged = g.read_merged_statistics("t", nodes="hidden")
    assert "sample" not in set(merged["aggregation"])


def test_rank_0_only_records_rank_0_only_and_replaces_a_recording_of_both(tmp_path, ddp_run):
    # recorded again over the recording of both ranks: the lead deletes the shards of the
    # rank that does not record this time, each rank its own earlier shards
    root = Path(shutil.copytree(ddp_run / "g", tmp_path / "g")).parent
    run_job(root, "ddp-rank0")
    trial = root / "g" / "trials" / "t"
    shards = [p.name for p in trial.rglob("*.parquet")]
    assert shards and not [n for n in shards if "r0001" in n]
    g = open_group(root / "g")
    assert g.list_ranks("t") == [0]
    assert g.list_steps("t")["training_step"].tolist() == list(range(STEPS))
    assert len(g.read_kpis("t")) == STEPS  # not twice: the earlier shards are gone
    assert json.loads((trial / "trial.json").read_text())["settings"]["ranks"] == [0]


def test_a_killed_rank_leaves_the_other_ranks_data_intact(tmp_path):
    port = free_port()
    first = start(tmp_path, 0, port, "env", stderr=subprocess.PIPE)
    second = start(tmp_path, 1, port, "env", stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        for step in range(2):
            assert second.stdout.readline().strip() == f"step {step}"
        os.kill(second.pid, signal.SIGKILL)  # held after its step 1, flushed
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        for p in (first, second):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
    trial = tmp_path / "g" / "trials" / "t"
    g = open_group(tmp_path / "g")
    deadline = time.monotonic() + 30
    while g.list_ranks("t") != [0, 1] and time.monotonic() < deadline:
        time.sleep(0.2)
        g.refresh()
    assert g.list_ranks("t") == [0, 1]
    assert g.list_steps("t", rank=0)["training_step"].tolist() == list(range(STEPS))
    assert g.list_steps("t", rank=1)["training_step"].tolist() == [0, 1]
    # the lead (rank 0) finished the trial; rank 1's end did not touch trial.json
    assert json.loads((trial / "trial.json").read_text())["status"] == "finished"
    tensors = sorted(p.name for p in (trial / "tensors").iterdir())
    assert [n for n in tensors if n.startswith("compact-")] == ["compact-00000000-00000003.parquet"]
    assert [n for n in tensors if "-r0001-" in n] == ["part-r0001-00000000.parquet",
                                                      "part-r0001-00000001.parquet"]
    before = {r: g.read_statistics("t", ranks=r) for r in (0, 1)}
    for step in range(STEPS):
        np.testing.assert_allclose(
            g.read_tensor("t", step, 0, "hidden", "hidden", "forward", "batch_mean").values,
            raw(tmp_path, "hidden", 0, step).mean(0).numpy(), rtol=1e-5, atol=1e-6)
    # compacting the whole trial afterwards merges rank 1's shards into a file of its own
    compact_trial(trial)
    tensors = sorted(p.name for p in (trial / "tensors").iterdir())
    assert "compact-r0001-00000000-00000001.parquet" in tensors
    assert not [n for n in tensors if n.startswith("part-")]
    g = open_group(tmp_path / "g")
    for r in (0, 1):
        assert g.read_statistics("t", ranks=r).equals(before[r])


@pytest.mark.browser
def test_the_tensors_page_shows_all_ranks_merged_or_one_rank(dash_duo, ddp_run):
    from comgra_like.app import create_app, ids
    from comgra_like.app.figures import statistics_rows
    from comgra_like.app.selectors import RANK_BOX, RANK_SELECT

    def stat(name: str) -> str:
        return dash_duo.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
            f"#{ids.STATS_TABLE} tr[data-statistic='{name}'] td")

    def shown(record) -> str:
        return next(v for n, _, v in statistics_rows(record.stats) if n == "std")

    def wait_for(expected: str) -> None:
        end = time.time() + 15
        while time.time() < end and stat("std") != expected:
            time.sleep(0.05)
        assert stat("std") == expected, dash_duo.find_element(f"#{ids.VALUE_HEADER}").text

    g = open_group(ddp_run / "g")
    # what the page selects first: step 0, node hidden, forward, mean over batch
    merged = g.read_merged_tensor("t", 0, 0, "hidden", "hidden", "forward", "batch_mean")
    ranks = [g.read_tensor("t", 0, 0, "hidden", "hidden", "forward", "batch_mean", rank=r)
             for r in (0, 1)]
    assert len({shown(merged), shown(ranks[0]), shown(ranks[1])}) == 3
    dash_duo.start_server(create_app(ddp_run / "g", refresh_seconds=0.5))
    dash_duo.wait_for_element(f"#{RANK_BOX}", timeout=20)
    dash_duo.wait_for_style_to_equal(f"#{RANK_BOX}", "display", "flex", timeout=20)
    wait_for(shown(merged))  # the default: the combined batch of both ranks
    for rank in (0, 1, "merged"):
        label = "all ranks merged" if rank == "merged" else f"rank {rank}"
        dash_duo.select_dcc_dropdown(f"#{RANK_SELECT}", value=label)
        wait_for(shown(merged if rank == "merged" else ranks[rank]))
