"""Real architectures for the watch() tests, built here (no downloads).

``resnet_like``: torchvision's resnet18 design at a small size (BasicBlocks with
``ReLU(inplace=True)``, the residual ``out += identity``, a strided downsample path);
torchvision itself does not install beside this project's CPU build of torch 2.13.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNetLike(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2), BasicBlock(16, 16))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@dataclass
class ModelOutput:
    logits: torch.Tensor
    hidden: torch.Tensor


class TransformerBlock(nn.Module):
    """Self-attention called with keyword arguments, a dict output, a dataclass on top."""

    def __init__(self, d: int = 16, heads: int = 2, vocab: int = 11, classes: int = 3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.norm2 = nn.LayerNorm(d)
        self.head = Head(d, classes)

    def forward(self, tokens, *, padding_mask=None):
        x = self.embed(tokens)
        a, _ = self.attn(query=x, key=x, value=x, key_padding_mask=padding_mask,
                         need_weights=False)
        x = self.norm1(x + a)
        x = self.norm2(x + self.ff(x))
        out = self.head(hidden=x)
        return ModelOutput(logits=out["logits"], hidden=out["pooled"])


class Head(nn.Module):
    def __init__(self, d: int, classes: int):
        super().__init__()
        self.proj = nn.Linear(d, classes)

    def forward(self, *, hidden):
        pooled = hidden.mean(1)
        return {"pooled": pooled, "logits": self.proj(pooled)}


class LSTMLoop(nn.Module):
    """An LSTM cell called once per time step."""

    def __init__(self, cin: int = 4, hidden: int = 6):
        super().__init__()
        self.cell = nn.LSTMCell(cin, hidden)
        self.out = nn.Linear(hidden, 1)
        self.hidden = hidden

    def forward(self, x):  # x: (batch, time, cin)
        h = x.new_zeros(x.shape[0], self.hidden)
        c = x.new_zeros(x.shape[0], self.hidden)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
        return self.out(h)


class MLP(nn.Module):
    def __init__(self, sizes=(6, 16, 16, 2)):
        super().__init__()
        layers = []
        for a, b in itertools.pairwise(sizes):
            layers += [nn.Linear(a, b), nn.Tanh()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x)


def all_hooks(module: nn.Module) -> list:
    """Every module hook left on ``module`` and its children."""
    left = []
    for name, m in module.named_modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
                     "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
                     "_backward_hooks", "_backward_pre_hooks"):
            if getattr(m, attr, None):
                left.append((name, attr))
    return left
