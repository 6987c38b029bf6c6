"""Small real training loops shared by the optimizer tests: a hand-driven recorder loop
(comgra's API) and watch()'s own loop, with gradient accumulation, a GradScaler and
clipping; the test's own optimizer hooks capture what the optimizer used."""

from __future__ import annotations

import torch
from torch import nn


def model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def batches(n: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)) for _ in range(n)]


class Capture:
    """The test's own optimizer hooks: per optimizer step (counted from 0), the
    gradients the step used, the parameters before and after, and the state after (all
    copies), registered after watch's hooks."""

    def __init__(self, opt: torch.optim.Optimizer):
        self.opt = opt
        self.count = 0
        self.grads: list[dict[int, torch.Tensor]] = []
        self.before: list[dict[int, torch.Tensor]] = []
        self.after: list[dict[int, torch.Tensor]] = []
        self.state: list[dict[int, dict]] = []
        self.lr: list[float] = []
        opt.register_step_pre_hook(self._pre)
        opt.register_step_post_hook(self._post)

    def params(self) -> list[torch.Tensor]:
        return [p for g in self.opt.param_groups for p in g["params"]]

    def _pre(self, opt, args, kwargs):
        self.grads.append({id(p): p.grad.detach().clone() for p in self.params()
                           if p.grad is not None})
        self.before.append({id(p): p.detach().clone() for p in self.params()})

    def _post(self, opt, args, kwargs):
        self.after.append({id(p): p.detach().clone() for p in self.params()})
        self.state.append({id(p): {k: (v.detach().clone() if torch.is_tensor(v) else v)
                                   for k, v in opt.state[p].items()}
                           for p in self.params()})
        self.lr.append(float(opt.param_groups[0]["lr"]))
        self.count += 1


def train(net: nn.Module, opt, data, *, accum: int = 1, scaler=None, clip: float | None = None,
          handle=None, poison_step: int | None = None) -> tuple[list[float], list[float]]:
    """The plain loop: ``accum`` micro-batches per optimizer step, ``scaler`` (a
    GradScaler) and ``clip`` (clip_grad_norm_) optional; ``poison_step``: that optimizer
    step's first micro-batch gets an infinite loss (the scaler skips the step).
    ``handle.gradients_before_clipping()`` is called after unscaling when given.
    Returns the losses and the norms clip_grad_norm_ returned (before clipping)."""
    losses, clip_norms = [], []
    for i, (x, y) in enumerate(data):
        step = i // accum
        loss = nn.functional.mse_loss(net(x), y) / accum
        if poison_step is not None and step == poison_step and i % accum == 0:
            loss = loss * float("inf")
        (scaler.scale(loss) if scaler is not None else loss).backward()
        losses.append(float(loss.detach()))
        if (i + 1) % accum:
            continue
        if scaler is not None:
            scaler.unscale_(opt)
        if handle is not None:
            handle.gradients_before_clipping()
        if clip is not None:
            clip_norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), clip)))
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad()
    return losses, clip_norms
