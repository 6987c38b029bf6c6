"""The benchmark's lower bound (``_FloorRecorder``) really does the work it stands for."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "benchmark_recorder.py"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_recorder_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_floor_recorder_copies_what_a_recorder_must_copy_and_changes_no_result():
    bench = _load()
    torch.manual_seed(0)
    model = bench._build_model(torch)
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_twin = torch.optim.SGD(twin.parameters(), lr=0.1)
    gen, gen_twin = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    rec = bench._FloorRecorder(torch, {0})
    rec.track_module("mlp", model)
    before = [p.detach().clone() for p in model.parameters()]
    bench._train_step(torch, model, opt, gen, 0, rec)
    bench._train_step(torch, twin, opt_twin, gen_twin, 0, None)

    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    batch, width = bench.WORKLOAD["batch_size"], bench.WORKLOAD["width"]
    layers = bench.WORKLOAD["n_linear_layers"]
    # input, target, pre/post of the hidden layers, output, error (batch x width), loss
    n_forward = (2 + 2 * (layers - 1) + 2) * batch * width + 1
    # parameters before and after, every gradient (the input's and target's included)
    assert rec.off == 2 * n_params + (n_params + n_forward) + n_forward
    buf = rec.buf
    flat_before = torch.cat([b.flatten() for b in before])
    assert torch.equal(buf[:n_params], flat_before)
    flat_after = torch.cat([p.detach().flatten() for p in params])
    assert torch.equal(buf[rec.off - n_params:rec.off], flat_after)
    assert not torch.equal(flat_before, flat_after)  # the optimizer did change them
    # Recording leaves training as it is.
    for p, q in zip(params, twin.parameters()):
        assert torch.equal(p, q)
    # Steps that are not recorded copy nothing.
    bench._train_step(torch, model, opt, gen, 1, rec)
    assert rec.off == 2 * n_params + (n_params + n_forward) + n_forward
