"""Per-sample gradient norms (io_grad) are taken along the batch dimension the step's
input shows: the leading dimension of tensors that derive from the input. A parameter,
a tensor made from parameters alone, or a tensor whose only dimension of the batch size
is not the leading one has no batch dimension (its io_grad is one norm), even when one
of its dimensions happens to equal the batch size (here: 4 heads, 4 samples)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

import comgra_like
from comgra_like.query import open_group

BATCH = HEADS = 4
T, D = 5, 8


class HeadBias(nn.Module):
    """A per-head attention bias made from a parameter alone: (heads, T, T)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(HEADS, T, T) * 0.1)

    def forward(self, length: int):
        return self.table[:, :length, :length] * 1.0


class Scale(nn.Module):
    def forward(self, x):
        return x * 2.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, D * HEADS)
        self.bias = HeadBias()
        self.seq_major = Scale()  # given the input with the time first: (T, B, D)
        self.out = nn.Linear(D, 3)

    def forward(self, x):  # x: (B, T, D)
        q = self.q(x).view(BATCH, T, HEADS, D).transpose(1, 2)  # (B, H, T, D)
        scores = q @ q.transpose(-1, -2) / D ** 0.5 + self.bias(T)  # (B, H, T, T)
        mixed = (scores.softmax(-1) @ q).mean(1)  # (B, T, D)
        mixed = self.seq_major(mixed.transpose(0, 1)).transpose(0, 1)
        return self.out(mixed).mean(1)


def _loop(model, handle=None, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(BATCH, T, D, generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if handle is not None:
        handle.unwatch()


def _row(h, node, role, what):
    rows = h[(h.module == node) & (h.role == role) & (h.what == what) & (h.training_step == 0)]
    assert len(rows) == 1, (node, role, what, len(rows))
    return rows.iloc[0]


def test_a_dimension_equal_to_the_batch_size_is_not_taken_for_the_batch(tmp_path):
    torch.manual_seed(0)
    model = Model()
    bare = copy.deepcopy(model)
    _loop(bare)

    handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                               log_freq=1, verbose=False, sample_n=None,
                               reject_outlier_proportion=0.0)
    _loop(model, handle)
    for k, v in bare.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k

    h = open_group(handle.group_path).read_histograms("t")
    # derived from the input, batch leading: one norm per sample
    assert _row(h, "model.q", "output 0", "io_grad").n == BATCH
    assert _row(h, "model.out", "input 0", "io_grad").n == BATCH
    # made from a parameter alone: (4 heads, T, T) is no batch of 4 samples
    bias = _row(h, "model.bias", "output 0", "io_grad")
    assert bias.n == 1
    # the whole gradient's l2 norm, recomputed here
    torch.manual_seed(0)
    check = Model()
    captured = {}

    def keep(module, args, out):
        out.retain_grad()
        captured["bias"] = out

    check.bias.register_forward_hook(keep)
    check(torch.randn(BATCH, T, D, generator=torch.Generator().manual_seed(1))
          ).pow(2).mean().backward()
    norm = float(torch.linalg.vector_norm(captured["bias"].grad.double()))
    np.testing.assert_allclose([bias.vmin, bias.vmax], [norm, norm], rtol=1e-6)
    # the batch in the second dimension only: not taken for one (a (T, B, D) tensor)
    assert _row(h, "model.seq_major", "input 0", "io_grad").n == 1
    assert _row(h, "model.seq_major", "output 0", "io_grad").n == 1
