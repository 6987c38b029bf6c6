"""Statistics of many tensors at once, computed on their device with a handful of ops.

All tensors of one capture (say, every registered activation of a step) are flattened
to ``[batch, values]`` and concatenated along the value axis into one matrix ``X``. Each
column belongs to one tensor (its *segment*). Segment-wise reductions (``index_add_`` and
``scatter_reduce_``) then give the statistics of every tensor for every sample in about
fifteen kernel launches, however many tensors there are, instead of a dozen per tensor.
"""

from __future__ import annotations

import torch

# Column order of the statistics matrices; must match schema.STATISTICS.
STAT_NAMES = ("mean", "abs_mean", "std", "abs_max", "min", "max", "norm", "nan_count", "inf_count")
NUM_STATS = len(STAT_NAMES)


def segment_ids(sizes: list[int], device: torch.device) -> torch.Tensor:
    """``[0]*sizes[0] + [1]*sizes[1] + ...`` as a long tensor on ``device``."""
    counts = torch.tensor(sizes, dtype=torch.long)
    return torch.repeat_interleave(torch.arange(len(sizes)), counts).to(device)


def segment_statistics(x: torch.Tensor, seg: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Statistics per row and segment of ``x`` (``[B, N]``) -> ``[B, S, NUM_STATS]``.

    ``std`` uses Bessel's correction (ddof=1) and is 0 for a segment of one value.
    NaN propagates into every statistic but the counts, as numpy's functions do.
    """
    b = x.shape[0]
    s = len(sizes)
    n = torch.tensor(sizes, dtype=x.dtype, device=x.device)
    zeros = x.new_zeros((b, s))
    index = seg.unsqueeze(0).expand(b, -1)

    total = zeros.clone().index_add_(1, seg, x)
    mean = total / n
    ax = x.abs()
    abs_mean = zeros.clone().index_add_(1, seg, ax) / n
    centered = x - mean.index_select(1, seg)  # index_select: far faster than x[:, seg]
    sq = zeros.clone().index_add_(1, seg, centered * centered)
    std = torch.where(n > 1, (sq / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))
    norm = zeros.clone().index_add_(1, seg, x * x).sqrt()
    mn = zeros.clone().scatter_reduce_(1, index, x, "amin", include_self=False)
    mx = zeros.clone().scatter_reduce_(1, index, x, "amax", include_self=False)
    abs_max = torch.maximum(mx, -mn)
    nan = zeros.clone().index_add_(1, seg, torch.isnan(x).to(x.dtype))
    inf = zeros.clone().index_add_(1, seg, torch.isinf(x).to(x.dtype))
    # scatter_reduce's amax/amin skip NaN on some builds; numpy propagates it.
    has_nan = nan > 0
    nan_fill = torch.full_like(mean, float("nan"))
    abs_max = torch.where(has_nan, nan_fill, abs_max)
    mn = torch.where(has_nan, nan_fill, mn)
    mx = torch.where(has_nan, nan_fill, mx)
    return torch.stack([mean, abs_mean, std, abs_max, mn, mx, norm, nan, inf], dim=2)


def batch_aggregates(per_sample: torch.Tensor) -> torch.Tensor:
    """Mean, abs-max and std (ddof=1) over dim 0 -> ``[3, ...]``."""
    b = per_sample.shape[0]
    mean = per_sample.mean(dim=0)
    abs_max = per_sample.abs().amax(dim=0)
    if b > 1:
        std = per_sample.std(dim=0)
    else:
        std = torch.zeros_like(mean)
    return torch.stack([mean, abs_max, std], dim=0)
