"""Optimizer-state statistics equal an independent numpy computation from the
optimizer's state (captured by the test's own hooks), for Adam, AdamW (amsgrad too) and
SGD with momentum, on a loop that drives a ComgraRecorder itself (comgra's API)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from comgra_like import ComgraRecorder, DecisionMakerForRecordingsFrequencyPerType
from comgra_like.query import open_group
from comgra_like.query.optimizer import read_optimizer_state
from comgra_like.record.optimizer import watch_optimizer

from .loops import Capture, batches, model

STEPS = 4


def _run(tmp_path, make_opt):
    net = model()
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1),
                         max_num_batch_size_to_record=0)
    rec.track_module("net", net)
    opt = make_opt(net.parameters())
    ow = watch_optimizer(rec, opt, net)
    cap = Capture(opt)
    for step, (x, y) in enumerate(batches(STEPS)):
        rec.start_batch(step, 5, type_of_execution="training")
        rec.start_iteration()
        nn.functional.mse_loss(net(x), y).backward()
        rec.finish_iteration()
        opt.step()
        opt.zero_grad()
        rec.finish_batch()
    ow.close()
    rec.finalize()
    names = {id(p): f"net.{n}" for n, p in net.named_parameters()}
    group = open_group(tmp_path / "g")
    frame = group.read_optimizer_state("t")
    pd.testing.assert_frame_equal(frame, read_optimizer_state(group, "t"))
    one = group.read_optimizer_state("t", parameters="net.0.weight", quantities="update_ratio",
                                     steps=[1, 2])
    assert list(one.training_step) == [1, 2] and set(one.quantity) == {"update_ratio"}
    return frame, cap, names


def _stats(prefix, a):
    a = a.astype(np.float64).ravel()
    return {f"{prefix}_mean": a.mean(), f"{prefix}_std": a.std(),
            f"{prefix}_absmax": np.abs(a).max(), f"{prefix}_norm": np.sqrt((a * a).sum())}


def _expected(cap, step, pid, group):
    state = cap.state[step][pid]
    out = {}
    before = cap.before[step][pid].numpy().astype(np.float64)
    delta = cap.after[step][pid].numpy().astype(np.float64) - before
    out["update_norm"] = np.sqrt((delta ** 2).sum())
    out["update_absmax"] = np.abs(delta).max()
    out["update_ratio"] = out["update_norm"] / np.sqrt((before ** 2).sum())
    out["grad_norm"] = np.sqrt((cap.grads[step][pid].numpy().astype(np.float64) ** 2).sum())
    out["lr"] = group["lr"]
    if "exp_avg" in state:
        out.update(_stats("exp_avg", state["exp_avg"].numpy()))
        out.update(_stats("exp_avg_sq", state["exp_avg_sq"].numpy()))
        v = (state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]).numpy()
        t = float(state["step"])
        vhat = v.astype(np.float64) / (1 - group["betas"][1] ** t)
        size = group["lr"] / (np.sqrt(vhat) + group["eps"])
        out.update(step_size_mean=size.mean(), step_size_min=size.min(),
                   step_size_max=size.max(),
                   eps_dominated=float((np.sqrt(vhat) < group["eps"])[v > 0].mean()))
    if "momentum_buffer" in state:
        out.update(_stats("momentum", state["momentum_buffer"].numpy()))
    return out


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True, eps=1e-3),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
], ids=["adam", "adamw-amsgrad", "sgd-momentum"])
def test_state_statistics_equal_an_independent_computation(tmp_path, make_opt):
    frame, cap, names = _run(tmp_path, make_opt)
    assert cap.count == STEPS
    group = cap.opt.param_groups[0]
    checked = 0
    for step in range(STEPS):
        for pid, name in names.items():
            rows = frame[(frame.training_step == step) & (frame.parameter == name)]
            got = dict(zip(rows.quantity, rows.value))
            want = _expected(cap, step, pid, group)
            assert set(want) <= set(got), (name, set(want) - set(got))
            for q, v in want.items():
                np.testing.assert_allclose(got[q], v, rtol=1e-9, atol=1e-15, err_msg=(name, q))
                checked += 1
    assert checked >= STEPS * 4 * 9
    glob = frame[frame.parameter == "optimizer"]
    norms = glob[glob.quantity == "grad_norm"].sort_values("training_step").value.to_numpy()
    want = [np.sqrt(sum(float((g.double() ** 2).sum()) for g in cap.grads[s].values()))
            for s in range(STEPS)]
    np.testing.assert_allclose(norms, want, rtol=1e-9)
    assert (glob[glob.quantity == "skipped"].value == 0).all()
