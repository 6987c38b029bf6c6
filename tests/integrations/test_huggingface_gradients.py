"""What the Hugging Face callback records of the optimizer's step under
``gradient_accumulation_steps=2``, ``bf16`` and ``max_grad_norm``: the recorded gradient
(loss group ``optimizer``) equals the one the optimizer used (the test's own step
pre-hook on the torch optimizer behind accelerate's wrapper), the norm before clipping
equals the ``grad_norm`` the Trainer logs (clip_grad_norm_'s result); the recorded update
(``optimizer/update_*``) equals the parameters after minus before the optimizer's step
(the test's own step pre- and post-hooks); training is bitwise the same with and without
the callback."""

from __future__ import annotations

import pytest
import torch
import transformers

from comgra_like.integrations.huggingface import ComgraCallback, torch_optimizers
from comgra_like.query import open_group

from .hf_models import train
from .test_lightning_gradients import check_updates

SETTINGS = {"gradient_accumulation_steps": 2, "max_grad_norm": 0.05, "bf16": True,
            "max_steps": 3, "eval_strategy": "no"}


class Capture(transformers.TrainerCallback):
    def __init__(self):
        self.used: list[dict[str, torch.Tensor]] = []
        self.logged: list[float] = []
        self.params_before: list[dict[str, torch.Tensor]] = []
        self.params_after: list[dict[str, torch.Tensor]] = []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.names = {id(p): n for n, p in model.named_parameters()}
        for opt in torch_optimizers(optimizer):
            opt.register_step_pre_hook(self._pre)
            opt.register_step_post_hook(self._post)

    def _params(self, optimizer) -> dict[str, torch.Tensor]:
        return {self.names[id(p)]: p.detach().clone()
                for g in optimizer.param_groups for p in g["params"]}

    def _pre(self, optimizer, args, kwargs):
        self.used.append({self.names[id(p)]: p.grad.detach().clone()
                          for g in optimizer.param_groups for p in g["params"]
                          if p.grad is not None})
        self.params_before.append(self._params(optimizer))

    def _post(self, optimizer, args, kwargs):
        self.params_after.append(self._params(optimizer))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "grad_norm" in logs:
            self.logged.append(float(logs["grad_norm"]))


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_bitwise_training_and_the_gradient_the_optimizer_used(tmp_path):
    plain, _ = train(tmp_path / "plain", **SETTINGS)
    capture = Capture()  # reads gradients only: training stays the same
    callback = ComgraCallback(log_freq=1)
    watched, _ = train(tmp_path / "watched", [capture, callback], **SETTINGS)
    a, b = state(plain), state(watched)
    for k, value in a.items():
        assert torch.equal(value, b[k]), k
    assert len(capture.used) == len(capture.logged) == 3
    g = open_group(callback.handle.group_path)
    trial = callback.handle.trial_id
    stats = g.read_statistics(trial)
    used = stats[stats["recording_type"] == "gradient:optimizer"]
    # no skip: with the pinned versions the callback always hands watch() the optimizer
    assert sorted(used["training_step"].unique()) == [0, 1, 2], \
        "no loss group optimizer: the callback did not pass watch(optimizer=)"
    clipped = 0
    for step in range(3):
        for name, grad in capture.used[step].items():
            row = used[(used["training_step"] == step) & (used["node"] == f"model.{name}")]
            assert len(row) == 1, (step, name)
            assert row["norm"].item() == pytest.approx(grad.norm().item(), rel=1e-5,
                                                       abs=1e-12)
        after = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(t) for t in capture.used[step].values()])).item()
        clipped += capture.logged[step] > after * 1.01
        m = g.read_metrics(trial, module="optimizer",
                           metric="optimizer/grad_norm_before_clipping", steps=[step])
        assert m["value"].item() == pytest.approx(capture.logged[step], rel=1e-4)
        m = g.read_metrics(trial, module="optimizer", metric="optimizer/grad_norm",
                           steps=[step])
        assert m["value"].item() == pytest.approx(after, rel=1e-5)
    assert clipped >= 2, "max_grad_norm=0.05 should have clipped most steps"
    check_updates(g.read_optimizer_state(trial), capture.params_before,
                  capture.params_after, capture.used)
