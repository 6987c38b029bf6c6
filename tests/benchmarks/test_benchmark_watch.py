"""The watch benchmark (benchmarks/benchmark_watch.py) runs end to end on tiny models and
prints a ratio table that parses; its lower bound copies what watching must copy and
changes no training result. Nothing here is timed."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load_workloads():
    spec = importlib.util.spec_from_file_location(
        "watch_workloads_under_test", BENCHMARKS / "watch_workloads.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "benchmark_watch.py"), "--scale", "0.1",
         "--steps", "20", "--slow-steps", "20", "--repeats", "1", "--log-freqs", "10",
         "--out", str(tmp_path / "out"), *extra],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )


def _ratio_rows(stdout: str, marker: str) -> dict[tuple[str, int], dict[str, float | None]]:
    lines = [ln.split() for ln in stdout.splitlines() if ln.startswith(marker + " ")]
    header, rows = lines[0], lines[1:]
    assert header[:4] == [marker, "model", "log_freq", "bare_ms"]
    table = {}
    for row in rows:
        assert len(row) == len(header), row
        values = {h: None if v == "-" else float(v) for h, v in zip(header[3:], row[3:])}
        table[(row[1], int(row[2]))] = values
    return table


def test_the_benchmark_prints_ratios_for_every_model_and_skips_contenders_it_lacks(tmp_path):
    done = _run(tmp_path, "--contenders", "bare,floor,torchexplorer_none,tensorboard",
                "--torchexplorer-python", str(tmp_path / "no-such-venv" / "python"))
    assert done.returncode == 0, done.stderr
    for marker in ("ratio", "cpu"):  # wall time, CPU time
        table = _ratio_rows(done.stdout, marker)
        assert set(table) == {("mlp", 10), ("cnn", 10), ("transformer", 10)}
        for values in table.values():
            assert values["bare_ms"] > 0
            assert values["bare"] > 0 and values["floor"] > 0  # both ran
            assert values["torchexplorer_none"] is None and values["tensorboard"] is None
    # the skipped ones say why and what to pass
    assert "skipped: tensorboard (no interpreter given: pass --tensorboard-python)" in done.stdout
    assert "skipped: torchexplorer_none does not import under" in done.stdout
    assert "Targets (issue 15)" in done.stdout
    results = json.loads((tmp_path / "out" / "benchmark_watch_results.json").read_text())
    floor = results["runs"]["mlp/10/floor"][0]
    assert floor["steps"] == 20 and floor["n_logged"] == 2


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_the_bound_copies_every_io_gradient_and_parameter_on_logged_steps_only(model):
    W = _load_workloads()
    torch.manual_seed(0)
    work = W.build(model)
    twin = copy.deepcopy(work.model)
    opt = torch.optim.SGD(work.model.parameters(), lr=work.lr)
    opt_twin = torch.optim.SGD(twin.parameters(), lr=work.lr)
    gen, gen_twin = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    floor = W.FloorWatch(work.model, log_freq=3)

    # What a logged step must copy, counted independently with plain hooks.
    n_params = sum(p.numel() for p in work.model.parameters())
    io = []
    handles = [m.register_forward_hook(
        lambda _m, i, o: io.extend(W._tensors(i) + W._tensors(o))) for m in twin.modules()]
    W.train_step(twin, opt_twin, work, gen_twin)
    for h in handles:
        h.remove()
    n_io = sum(t.numel() for t in io)
    n_io_grad = sum(t.numel() for t in io if t.requires_grad)

    W.train_step(work.model, opt, work, gen)  # step 0: logged
    assert floor.copied == 2 * n_params + n_io + n_io_grad
    for _ in range(2):  # steps 1 and 2 copy nothing
        W.train_step(work.model, opt, work, gen)
        W.train_step(twin, opt_twin, work, gen_twin)
    assert floor.copied == 2 * n_params + n_io + n_io_grad
    W.train_step(work.model, opt, work, gen)  # step 3: logged again
    assert floor.copied == 2 * (2 * n_params + n_io + n_io_grad)
    floor.remove()
    W.train_step(twin, opt_twin, work, gen_twin)
    # watching changes no result
    for p, q in zip(work.model.parameters(), twin.parameters()):
        assert torch.equal(p, q)
    W.train_step(work.model, opt, work, gen)  # unhooked: nothing more copied
    assert floor.copied == 2 * (2 * n_params + n_io + n_io_grad)


def test_the_benchmark_reports_watch_counters(tmp_path):
    done = _run(tmp_path, "--contenders", "bare,watch", "--models", "mlp")
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "out" / "benchmark_watch_results.json").read_text())
    c = results["runs"]["mlp/10/watch"][0]["counters"]
    # steps 0 (warm-up), 10 and 20 (timed) at log_freq 10; the last one sent at close
    assert c["steps_recorded"] == 3
    assert c["graphs_hashed"] == 1  # one structure, hashed once
    assert 1 <= c["segments"] and 1 <= c["slots"] <= 8
    assert c["plans_made"] <= c["captures"] and c["waits"] >= 0
    assert "graphs hashed 1/3" in done.stdout
