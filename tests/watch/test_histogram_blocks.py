"""The writer bins the histograms of a recorded step block by block (rows of one size
together): each row must equal numpy's ``histogram`` of the values torchexplorer's outlier
rejection keeps, and a range too narrow for numpy must not fail the writer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import comgra_like
from comgra_like.query import open_group
from comgra_like.writer.histograms import _kept_mask, block_histograms, histogram, sample_values


def _rows(kind: int, rows: int, n: int, dtype, rng: np.random.Generator) -> np.ndarray:
    if kind == 0:
        v = rng.standard_normal((rows, n))
    elif kind == 1:  # few distinct values: ties at the rejection threshold and on edges
        v = rng.integers(-3, 4, (rows, n)).astype(float)
    elif kind == 2:  # one value: numpy's range of +-0.5
        v = np.full((rows, n), 1.5)
    else:  # magnitudes over many octaves
        v = np.exp(rng.standard_normal((rows, n)) * 5) * rng.choice([-1, 1], (rows, n))
    return v.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reject", [0.0, 0.1, 0.35])
def test_blocks_equal_numpy_histogram_per_row(dtype, reject):
    rng = np.random.default_rng(7)
    for case in range(120):
        kind, n, bins = case % 4, int(rng.integers(1, 400)), int(rng.integers(1, 40))
        values = _rows(kind, int(rng.integers(1, 6)), n, dtype, rng)
        keep = _kept_mask(values, reject)
        lo, hi, counts = block_histograms(values, keep, bins)
        for r in range(values.shape[0]):
            kept = sample_values(values[r].copy(), None, reject, rng)
            mine = values[r] if keep is None else values[r][keep[r]]
            np.testing.assert_array_equal(np.sort(mine), np.sort(kept))
            want_lo, want_hi, want = histogram(kept, bins)
            np.testing.assert_array_equal(counts[r], want)
            assert (lo[r], hi[r]) == (want_lo, want_hi)


def test_a_range_too_narrow_for_numpy_is_binned_in_float64(tmp_path):
    one = np.float32(1.0)
    next_up = np.nextafter(one, np.float32(2.0))
    values = np.array([[one, next_up, one, next_up]], dtype=np.float32)
    with pytest.raises(ValueError):  # numpy: no 30 distinct float32 edges in one ulp
        np.histogram(values[0], bins=30, range=(float(one), float(next_up)))
    lo, hi, counts = block_histograms(values, None, 30)
    assert counts.sum() == 4 and counts[0, 0] == 2 and counts[0, -1] == 2
    assert (lo[0], hi[0]) == (float(one), float(next_up))

    # end to end: such a parameter (LayerNorm's weight after a tiny update) once failed
    # the writer, and with it the recording
    model = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(values))
    handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                               verbose=False, log_freq=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    handle.unwatch()
    h = open_group(handle.group_path).read_histograms("t", what="params")
    assert len(h) == 2 and all(sum(c) == 4 for c in h.counts)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_huge_magnitudes_are_binned_not_a_writer_failure(dtype):
    # a constant row of 1e38 (+-0.5 is the value itself) and a float32 range wider than
    # float32 holds: numpy cannot bin the first, and the block's float32 differences
    # would overflow in the second; every value is counted, within the range reported
    big = float(np.finfo(np.float32).max) * 0.9
    rows = np.array([[1e38] * 6, [-big, big, 0.0, 1.0, -1.0, big]], dtype=dtype)
    lo, hi, counts = block_histograms(rows, None, 30)
    assert counts.sum(axis=1).tolist() == [6, 6]
    assert lo[0] < 1e38 < hi[0] and hi[0] - lo[0] < 1e33
    assert lo[1] <= -big and hi[1] >= big and counts[1, 0] == 1 and counts[1, -1] == 2
    one_lo, one_hi, one = histogram(rows[0], 30)
    assert one.sum() == 6 and one_lo < 1e38 < one_hi
    with pytest.raises(ValueError):  # what numpy says for the constant row
        np.histogram(rows[0].astype(np.float64), bins=30, range=(1e38, 1e38))
