"""Statistics of many tensors at once, with a handful of ops per distinct tensor size.

Captured tensors are flattened to ``[batch, values]``. Tensors with the same number of
values are stacked into one ``[batch, count, values]`` block and reduced along the last
(contiguous) dimension, so a network whose registered tensors come in a few sizes costs
a few dozen kernel launches per recorded step, however many tensors it registers.
(Reducing one concatenated matrix with ``index_add_``/``scatter_reduce_`` was tried
first: those loop per index entry on the CPU and were 4-8x slower.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Column order of the statistics; must match schema.STATISTICS.
STAT_NAMES = ("mean", "abs_mean", "std", "abs_max", "min", "max", "norm", "nan_count", "inf_count")
NUM_STATS = len(STAT_NAMES)


def block_statistics(x: torch.Tensor) -> torch.Tensor:
    """Statistics over the last dimension of ``x`` (``[..., n]``) -> ``[..., NUM_STATS]``.

    ``std`` uses Bessel's correction (ddof=1, two passes, so a large mean does not
    cost accuracy) and is 0 for one value. NaN propagates into every statistic but the
    counts, as numpy's functions do. The op choice is measured (CPU, one thread):
    ``amax``/``amin`` are ~25x faster than ``aminmax``, ``abs().sum()`` ~8x faster than
    an L1 ``vector_norm``, and ``std_mean`` is ~20x slower than these two passes.
    """
    n = x.shape[-1]
    total = x.sum(dim=-1)
    mean = total / n
    mx = x.amax(dim=-1)
    mn = x.amin(dim=-1)
    abs_max = torch.maximum(mx, -mn)
    norm = torch.linalg.vector_norm(x, ord=2, dim=-1)
    # One scratch buffer of x's size, used twice: fresh large allocations cost page
    # faults on every recorded step, which made them the most expensive part here.
    scratch = torch.abs(x)
    abs_mean = scratch.sum(dim=-1) / n
    if n > 1:
        torch.sub(x, mean.unsqueeze(-1), out=scratch)
        std = torch.linalg.vector_norm(scratch, ord=2, dim=-1) / math.sqrt(n - 1)
    else:
        std = torch.zeros_like(mean)
    del scratch
    if bool(torch.isfinite(total).all() and torch.isfinite(norm).all()):
        # Finite sums mean no NaN or Inf in the row (norm overflow aside, which only
        # costs the exact count below): skip two full passes.
        nan = torch.zeros_like(mean)
        inf = nan
    else:
        nan = torch.isnan(x).sum(dim=-1).to(x.dtype)
        inf = torch.isinf(x).sum(dim=-1).to(x.dtype)
    return torch.stack([mean, abs_mean, std, abs_max, mn, mx, norm, nan, inf], dim=-1)


def batch_aggregates(per_sample: torch.Tensor) -> torch.Tensor:
    """Mean, abs-max and std (ddof=1) over dim 0 -> ``[3, ...]``."""
    b = per_sample.shape[0]
    mean = per_sample.sum(dim=0) / b
    if b > 1:
        centered = per_sample - mean
        std = (centered.mul_(centered).sum(dim=0) / (b - 1)).sqrt()
    else:
        std = torch.zeros_like(mean)
    abs_max = torch.maximum(per_sample.amax(dim=0), -per_sample.amin(dim=0))
    return torch.stack([mean, abs_max, std], dim=0)


@dataclass
class SizeGroup:
    """Tensors of one size, stacked: ``members[j]`` is the caller's index of block row j."""

    members: list[int]
    block: torch.Tensor  # [B, len(members), n]


def group_by_size(mats: list[torch.Tensor]) -> list[SizeGroup]:
    """Stack ``[B, n_i]`` matrices of equal ``n_i`` (order of first appearance)."""
    by_size: dict[int, list[int]] = {}
    for i, m in enumerate(mats):
        by_size.setdefault(m.shape[1], []).append(i)
    groups = []
    for members in by_size.values():
        block = torch.stack([mats[i] for i in members], dim=1)
        groups.append(SizeGroup(members, block))
    return groups


def top_singular_value(w: torch.Tensor, v: torch.Tensor | None, tol: float = 1e-6,
                       max_iterations: int = 200) -> tuple[float, torch.Tensor]:
    """Largest singular value of a 2-D ``w`` by power iteration on ``wᵀw``.

    ``v`` is the right singular vector from the previous recorded step (or None):
    weights change little between steps, so a warm start converges in a few
    iterations, instead of the ~5 ms a full SVD of a 256x256 matrix costs.
    """
    w = w.float()
    if v is None or v.shape[0] != w.shape[1]:
        g = torch.Generator(device="cpu").manual_seed(0)
        v = torch.randn(w.shape[1], generator=g).to(w.device)
    v = v / v.norm().clamp_min(1e-30)
    sigma = 0.0
    for _ in range(max_iterations):
        u = w @ v
        new_sigma = float(u.norm())
        if new_sigma == 0.0 or math.isnan(new_sigma):
            return new_sigma, v
        v = w.t() @ (u / new_sigma)
        v = v / v.norm().clamp_min(1e-30)
        if abs(new_sigma - sigma) <= tol * new_sigma:
            return new_sigma, v
        sigma = new_sigma
    return sigma, v
