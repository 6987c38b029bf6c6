"""watch() of a torch.compile'd model: the compiled module's own inputs and outputs, every
parameter, its gradient the optimizer used and the optimizer's state are recorded; the
submodules inside the compiled graph are not, and the watch report and one warning say
so. Training stays bitwise the same as the compiled model's without watch."""

from __future__ import annotations

import logging

import numpy as np
import torch

import comgra_like
from comgra_like.query import open_group
from comgra_like.query.optimizer import read_optimizer_state

from .loops import Capture, batches, model, train

BACKEND = "inductor"  # gcc compiles its CPU kernels


def _run(tmp_path, watched: bool):
    torch._dynamo.reset()
    net = model()
    compiled = torch.compile(net, backend=BACKEND)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    handle = None
    if watched:
        handle = comgra_like.watch(compiled, optimizer=opt, log_freq=1, trial_id="t",
                                   standalone_dir=str(tmp_path / "w"), verbose=False)
    cap = Capture(opt)
    losses, _ = train(compiled, opt, batches(4), accum=2)
    if handle is not None:
        handle.unwatch()
    return net, losses, handle, cap


def test_compiled_model_recorded_as_far_as_possible_and_said_so(tmp_path, caplog):
    bare, bare_losses, _, _ = _run(tmp_path, False)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        net, losses, handle, cap = _run(tmp_path, True)
    assert losses == bare_losses
    for a, b in zip(bare.parameters(), net.parameters()):
        assert torch.equal(a, b)

    said = [r for r in caplog.records if "torch.compile" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]  # logged once
    report = handle.report()
    assert "torch.compile" in report["compiled"]
    compiled = {x["module"] for x in report["skipped"] if x["reason"] == "compiled"}
    assert {"model._orig_mod.0", "model._orig_mod.2"} <= compiled
    assert "model" not in compiled
    group = open_group(handle.group_path)
    assert group.read_watch_report("t")["compiled"] == report["compiled"]

    tensors = group.list_tensors("t", 0)
    assert set(tensors[tensors.recording_type == "forward"].node) >= {"model"}
    assert not any(n.startswith("model._orig_mod.0 ") or n == "model._orig_mod.0"
                   for n in tensors[tensors.kind != "parameter"].node)
    grads = tensors[tensors.recording_type == "gradient:optimizer"]
    # every parameter, and the compiled module's output (its io_grad)
    assert set(grads.node) == {f"model._orig_mod.{n}" for n, _ in net.named_parameters()} | {
        "model"}
    for (name, p) in net.named_parameters():
        stats = group.read_tensor("t", 1, -1, f"model._orig_mod.{name}",
                                  f"model._orig_mod.{name}", "gradient:optimizer",
                                  "none").stats
        used = cap.grads[1][id(p)].numpy()
        assert (stats["min"], stats["max"]) == (used.min(), used.max())
    frame = read_optimizer_state(group, "t")
    assert {"exp_avg_norm", "step_size_mean", "update_ratio"} <= set(frame.quantity)
    assert np.isfinite(frame.value).all()
