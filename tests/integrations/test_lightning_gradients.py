"""What the Lightning callback records of the optimizer's step, under
``accumulate_grad_batches=2``, ``precision="bf16-mixed"`` and ``gradient_clip_val``: the
recorded gradient (loss group ``optimizer``) equals the one the optimizer used, captured
by the test's own step pre-hook (Lightning passes the forward and backward to
``optimizer.step`` as its closure: the hook wraps it and reads the gradients after it);
the norm before clipping equals the one the test reads at ``on_before_optimizer_step``;
the recorded update (``optimizer/update_*``) equals the parameters after minus before
the optimizer's step (the test's own step pre- and post-hooks); training is bitwise the
same with and without the callback."""

from __future__ import annotations

import lightning.pytorch as L
import numpy as np
import pytest
import torch

from comgra_like.integrations.lightning import ComgraCallback
from comgra_like.query import open_group

from .lightning_models import Tiny, data, fit, trainer

SETTINGS = {"accumulate_grad_batches": 2, "precision": "bf16-mixed",
            "gradient_clip_val": 0.05, "max_steps": 4, "num_sanity_val_steps": 0,
            "limit_val_batches": 0}


class Capture(L.Callback):
    """The gradients before clipping (``on_before_optimizer_step``) and the ones the
    optimizer's step used (a step pre-hook that wraps Lightning's closure), and the
    parameters before and after the step (its pre- and post-hooks), per step."""

    def __init__(self):
        self.before: list[dict[str, torch.Tensor]] = []
        self.used: list[dict[str, torch.Tensor]] = []
        self.params_before: list[dict[str, torch.Tensor]] = []
        self.params_after: list[dict[str, torch.Tensor]] = []

    def on_fit_start(self, trainer, pl_module):
        self.names = {id(p): n for n, p in pl_module.named_parameters()}
        for opt in trainer.optimizers:
            opt.register_step_pre_hook(self._pre)
            opt.register_step_post_hook(self._post)

    def _params(self, optimizer) -> dict[str, torch.Tensor]:
        return {self.names[id(p)]: p.detach().clone()
                for g in optimizer.param_groups for p in g["params"]}

    def _post(self, optimizer, args, kwargs):
        self.params_after.append(self._params(optimizer))

    def _grads(self, params) -> dict[str, torch.Tensor]:
        return {self.names[id(p)]: p.grad.detach().clone() for p in params
                if p.grad is not None}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.before.append(self._grads(pl_module.parameters()))

    def _pre(self, optimizer, args, kwargs):
        closure = kwargs.get("closure")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.params_before.append(self._params(optimizer))

        def wrapped():
            loss = closure()
            self.used.append(self._grads(params))
            return loss
        return args, {**kwargs, "closure": wrapped}


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_bitwise_training_and_the_gradient_the_optimizer_used(tmp_path):
    plain = state(fit(tmp_path / "plain", **SETTINGS))
    capture = Capture()  # reads gradients only: training stays the same
    callback = ComgraCallback(log_freq=1)
    watched = state(fit(tmp_path / "watched", [capture, callback], **SETTINGS))
    assert plain.keys() == watched.keys()
    for k, value in plain.items():
        assert torch.equal(value, watched[k]), k
    assert len(capture.used) == len(capture.before) == 4
    g = open_group(callback.handle.group_path)
    trial = callback.handle.trial_id
    stats = g.read_statistics(trial)
    used = stats[stats["recording_type"] == "gradient:optimizer"]
    # no skip: with the pinned versions the callback always hands watch() the optimizer
    assert sorted(used["training_step"].unique()) == [0, 1, 2, 3], \
        "no loss group optimizer: the callback did not pass watch(optimizer=)"
    # two micro-batches per step: two iterations of each step
    forward = stats[(stats["node"] == "model.first") & (stats["role"] == "input 0")]
    assert forward.groupby("training_step")["iteration"].nunique().tolist() == [2] * 4
    clipped = 0
    for step in range(4):
        for name, grad in capture.used[step].items():
            row = used[(used["training_step"] == step) & (used["node"] == f"model.{name}")]
            assert len(row) == 1, (step, name)
            assert row["norm"].item() == pytest.approx(grad.norm().item(), rel=1e-5)
            assert row["mean"].item() == pytest.approx(grad.mean().item(), rel=1e-4,
                                                       abs=1e-9)
        before = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(t) for t in capture.before[step].values()]))
        after = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(t) for t in capture.used[step].values()]))
        clipped += bool(before > after * 1.01)
        m = g.read_metrics(trial, module="optimizer",
                           metric="optimizer/grad_norm_before_clipping", steps=[step])
        assert m["value"].item() == pytest.approx(before.item(), rel=1e-5)
        m = g.read_metrics(trial, module="optimizer", metric="optimizer/grad_norm",
                           steps=[step])
        assert m["value"].item() == pytest.approx(after.item(), rel=1e-5)
    assert clipped >= 2, "gradient_clip_val=0.05 should have clipped most steps"
    check_updates(g.read_optimizer_state(trial), capture.params_before,
                  capture.params_after, capture.used)


def check_updates(frame, before, after, used) -> None:
    """The recorded update of every parameter the step used (those with a gradient in
    ``used``) on every step equals after - before (update/weight ratio NaN for a zero
    weight, as documented)."""
    steps = len(used)
    assert len(before) == len(after) == steps
    checked = 0
    for step in range(steps):
        for name in used[step]:
            old = before[step][name].double().numpy()
            delta = after[step][name].double().numpy() - old
            assert np.abs(delta).max() > 0, (step, name)  # the step moved it
            weight = np.sqrt((old ** 2).sum())
            want = {"update_norm": np.sqrt((delta ** 2).sum()),
                    "update_absmax": np.abs(delta).max(),
                    "update_ratio": np.sqrt((delta ** 2).sum()) / weight if weight else np.nan}
            rows = frame[(frame.training_step == step) & (frame.parameter == f"model.{name}")]
            got = dict(zip(rows.quantity, rows.value))
            for q, v in want.items():
                assert got.get(q) == pytest.approx(v, rel=1e-9, nan_ok=True), (step, name, q)
                checked += 1
    assert checked == 3 * sum(len(u) for u in used) > 0


class WithLBFGS(Tiny):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=3)


def test_an_optimizer_that_calls_its_closure_again_trains_the_same(tmp_path):
    """The callback runs Lightning's closure ahead of the step (for the optimizer's step
    hooks); LBFGS calls it several times per step: the first call gets that result,
    the others run it again, as without the callback."""
    settings = {"max_steps": 3, "num_sanity_val_steps": 0, "limit_val_batches": 0}
    runs = []
    for name, callbacks in (("plain", []), ("watched", [ComgraCallback(log_freq=1)])):
        torch.manual_seed(0)
        model = WithLBFGS()
        calls = []
        model.register_forward_pre_hook(lambda m, a, calls=calls: calls.append(1))
        trainer(tmp_path / name, callbacks, **settings).fit(model, data(24, 1))
        runs.append((state(model), len(calls)))
    (plain, n_plain), (watched, n_watched) = runs
    assert n_plain == n_watched > 3  # LBFGS evaluated the closure more than once a step
    for k, value in plain.items():
        assert torch.equal(value, watched[k]), k
