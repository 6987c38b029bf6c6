"""The rank filter of watch()'s tables, the metrics and the notes (issue 19), on a real
2-rank gloo job: a DistributedDataParallel model under ``watch(model, metrics=...)`` on
each rank (tests/distributed/watch_child.py), each rank training on its own part of each
batch. The expected values come from what each rank saved of its own tensors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.query import open_group

from .test_ddp import free_port

CHILD = Path(__file__).with_name("watch_child.py")
STEPS = 3
BINS = 10
NODE = "model.module.first"  # watch's root is the DDP wrapper; Net is its .module


def run_job(root: Path, *mode: str) -> str:
    """Both ranks of watch_child.py; the trial id they agreed on."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(CHILD), str(root), str(r), "2", port, *mode],
                              env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for r in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert out.strip().endswith("finished")
    trial_ids = {(root / "raw" / f"trial-{r}.txt").read_text() for r in (0, 1)}
    assert len(trial_ids) == 1, f"the ranks chose different default trial ids: {trial_ids}"
    return trial_ids.pop()


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("watch_ddp")
    return root, run_job(root)


def raw(root: Path, name: str, rank: int, step: int) -> np.ndarray:
    return np.load(root / "raw" / f"{name}-{rank}-{step}.npy", allow_pickle=False)


def test_both_ranks_record_into_one_trial_and_the_module_graph_is_written_once(job):
    root, trial = job
    g = open_group(root / "g")
    assert [t.trial_id for t in g.list_trials()] == [trial]
    assert g.list_ranks(trial) == [0, 1]
    folder = root / "g" / "trials" / trial
    for table in ("histograms", "module_steps", "metrics"):
        names = sorted(p.name for p in (folder / table).iterdir())
        assert any("-r0001-" in n for n in names) and any("-r" not in n for n in names), names
    # the graph is the same on both ranks: one file, named by both ranks' rows
    assert len(list((folder / "module_graphs").iterdir())) == 1
    steps = g.list_module_graph_steps(trial, ranks="all")
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert steps["graph_hash"].nunique() == 1
    assert g.list_module_graph_steps(trial)["training_step"].tolist() == list(range(STEPS))
    for rank in (0, 1):
        graph = g.read_module_graph(trial, 1, rank=rank)
        assert NODE in {inv["id"] for inv in graph["invocations"]}
    assert json.loads((folder / "modules.json").read_text())["modules"]


def test_histograms_per_rank_are_what_each_rank_computed(job):
    root, trial = job
    g = open_group(root / "g")
    for step in range(STEPS):
        per_rank = {}
        for rank in (0, 1):
            h = g.read_histograms(trial, modules=NODE, roles="output 0", what="io",
                                  steps=step, rank=rank)
            assert len(h) == 1 and "rank" not in h.columns
            out = raw(root, "out", rank, step).astype(np.float64)
            counts, edges = np.histogram(out, bins=BINS, range=(out.min(), out.max()))
            row = h.iloc[0]
            assert row["n"] == out.size == (6 if rank == 0 else 4) * 8
            assert row["lo"] == pytest.approx(edges[0], rel=1e-6)
            assert row["hi"] == pytest.approx(edges[-1], rel=1e-6)
            np.testing.assert_array_equal(row["counts"], counts)
            per_rank[rank] = row
        assert per_rank[0]["n"] != per_rank[1]["n"]  # different data shards
    default = g.read_histograms(trial, modules=NODE, what="io")
    assert default.equals(g.read_histograms(trial, modules=NODE, what="io", rank=0))
    both = g.read_histograms(trial, modules=NODE, what="io", ranks="all")
    assert sorted(both["rank"].unique()) == [0, 1]
    assert len(both) == 2 * len(default)


def test_merged_histograms_add_counts_exactly_where_edges_agree(job):
    root, trial = job
    g = open_group(root / "g")
    # DDP: the same weights and (all-reduced) weight gradients on both ranks
    for what in ("params", "params_grad"):
        both = g.read_histograms(trial, modules=NODE, what=what, ranks="all")
        merged = g.read_merged_histograms(trial, modules=NODE, what=what)
        assert len(merged) == len(both) // 2 == 2 * STEPS  # weight, bias per step
        assert (merged["merge"] == "exact").all() and (merged["ranks"] == 2).all()
        for _, row in merged.iterrows():
            parts = both[(both["training_step"] == row["training_step"])
                         & (both["role"] == row["role"])]
            np.testing.assert_array_equal(row["counts"], np.sum(list(parts["counts"]), axis=0))
            assert row["n"] == parts["n"].sum()
    # activations: each rank binned its own range; refused, or re-binned on request
    with pytest.raises(ConfigurationError, match="different bin edges.*rebin=True"):
        g.read_merged_histograms(trial, modules=NODE, what="io")
    rebinned = g.read_merged_histograms(trial, modules=NODE, roles="output 0", what="io",
                                        rebin=True)
    assert (rebinned["merge"] == "rebinned").all()
    for _, row in rebinned.iterrows():
        step = row["training_step"]
        outs = [raw(root, "out", r, step) for r in (0, 1)]
        assert row["lo"] == pytest.approx(min(o.min() for o in outs), rel=1e-6)
        assert row["hi"] == pytest.approx(max(o.max() for o in outs), rel=1e-6)
        assert row["counts"].sum() == pytest.approx(sum(o.size for o in outs))
        assert row["n"] == sum(o.size for o in outs)


def test_gradients_are_recorded_after_ddp_averaged_them(job):
    """watch() records parameter gradients when the backward pass ends: after DDP's
    all-reduce (its own end-of-backward callback), so both ranks record the same."""
    root, trial = job
    g = open_group(root / "g")
    both = g.read_histograms(trial, modules=NODE, what="params_grad", roles="weight",
                             ranks="all")
    for step in range(STEPS):
        grad = raw(root, "wgrad", 0, step).astype(np.float64)
        np.testing.assert_array_equal(grad, raw(root, "wgrad", 1, step))
        counts, edges = np.histogram(grad, bins=BINS, range=(grad.min(), grad.max()))
        for rank in (0, 1):
            row = both[(both["training_step"] == step) & (both["rank"] == rank)].iloc[0]
            assert row["lo"] == pytest.approx(edges[0], rel=1e-6)
            np.testing.assert_array_equal(row["counts"], counts)
        norms = g.read_metrics(trial, module=NODE, metric="WeightGradNorm", steps=step,
                               ranks="all")["value"].to_numpy()
        np.testing.assert_allclose(norms, [np.linalg.norm(grad)] * 2, rtol=1e-6)
    # the flight recorder too: each backward's gradients once DDP averaged them
    for rank in (0, 1):
        flight = np.load(root / "raw" / f"flightgrad-{rank}.npy", allow_pickle=False)
        want = [np.linalg.norm(raw(root, "wgrad", 0, s).astype(np.float64))
                for s in range(STEPS)]
        np.testing.assert_allclose(flight, want, rtol=1e-5)


def test_metrics_per_rank_are_distinct_and_equal_each_ranks_values(job):
    root, trial = job
    g = open_group(root / "g")
    for rank in (0, 1):
        m = g.read_metrics(trial, module=NODE, rank=rank)
        assert "rank" not in m.columns
        for step in range(STEPS):
            x = raw(root, "in", rank, step).astype(np.float64)
            y = raw(root, "out", rank, step).astype(np.float64)
            row = m[m["training_step"] == step].set_index("metric")["value"]
            assert row["InputSndNorm"] == pytest.approx(np.linalg.norm(x), rel=1e-6)
            assert row["OutputNorm"] == pytest.approx(np.linalg.norm(y, axis=1).mean(),
                                                      rel=1e-6)
        losses = g.read_metrics(trial, metric="loss", rank=rank)
        np.testing.assert_allclose(losses["value"], [float(raw(root, "loss", rank, s))
                                                     for s in range(STEPS)], rtol=1e-6)
    both = g.read_metrics(trial, module=NODE, metric="InputSndNorm", ranks="all")
    wide = both.pivot(index="training_step", columns="rank", values="value")
    assert list(wide.columns) == [0, 1] and (wide[0] != wide[1]).all()
    assert g.read_metrics(trial).equals(g.read_metrics(trial, rank=0))
    listed = g.list_metrics(trial, ranks="all")
    assert set(listed["rank"]) == {0, 1}
    assert g.list_metrics(trial, rank=1)["n_points"].sum() == len(g.read_metrics(trial, rank=1))


def test_notes_say_their_rank_and_filter_by_it(job):
    root, trial = job
    g = open_group(root / "g")
    notes = g.read_notes(trial)
    assert sorted(n.rank for n in notes) == [0, 1]
    for rank in (0, 1):
        (only,) = g.read_notes(trial, rank=rank)
        assert only.rank == rank and only.text.startswith(f"rank {rank} saw loss")
        assert only.training_step == 1


def test_rank_arguments_are_checked(job):
    root, trial = job
    g = open_group(root / "g")
    with pytest.raises(NotFoundError, match=r"rank 5 .*\[0, 1\]"):
        g.read_metrics(trial, rank=5)
    with pytest.raises(ConfigurationError, match="pass one of them"):
        g.read_histograms(trial, rank=0, ranks="all")
    with pytest.raises(ConfigurationError, match="one rank"):
        g.list_metrics(trial, rank="1")


def test_monitor_get_output_gives_each_rank_its_own_values(tmp_path):
    """Taiyi's Monitor on a DDP model: one trial for the job (rank 0's time as the
    default id), and get_output() on each rank reads that rank's rows."""
    trial = run_job(tmp_path, "monitor")
    g = open_group(tmp_path / "m")
    assert [t.trial_id for t in g.list_trials()] == [trial]
    assert g.list_ranks(trial) == [0, 1]
    for rank in (0, 1):
        output = json.loads((tmp_path / "raw" / f"output-{rank}.json").read_text())
        got = output["first"]["InputSndNorm"]
        expected = {str(s): float(np.linalg.norm(raw(tmp_path, "in", rank, s).astype(
            np.float64))) for s in range(STEPS)}
        assert got == pytest.approx(expected, rel=1e-6)
