"""The merge rules of comgra_like.query.ranks against the statistics of a concatenated
batch computed with numpy (the real-process test checks them end to end)."""

from __future__ import annotations

import numpy as np
import pytest

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.query.ranks import merge_batch, select_ranks


def test_merge_batch_equals_the_statistics_of_the_concatenated_batch():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc, 1.0 + loc, size=(n, 7)) for loc, n in ((0.0, 9), (3.0, 2), (-1.0, 1))]
    whole = np.concatenate(parts)
    n = [len(p) for p in parts]
    mean, std, abs_max = merge_batch(n, np.stack([p.mean(0) for p in parts]),
                                     np.stack([p.std(0, ddof=1) if len(p) > 1 else
                                               np.zeros(7) for p in parts]),
                                     np.stack([np.abs(p).max(0) for p in parts]))
    np.testing.assert_allclose(mean, whole.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, whole.std(0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(abs_max, np.abs(whole).max(0), rtol=1e-12)


def test_one_sample_in_all_and_nan_anywhere():
    mean, std, abs_max = merge_batch([1], np.array([2.0]), np.array([0.0]), np.array([2.0]))
    assert (mean, std, abs_max) == (2.0, 0.0, 2.0)
    mean, std, abs_max = merge_batch([3, 4], np.array([1.0, np.nan]), np.array([1.0, 1.0]),
                                     np.array([2.0, np.nan]))
    assert np.isnan(mean) and np.isnan(std) and np.isnan(abs_max)


def test_rank_selection():
    assert select_ranks(None, [0, 1, 2]) is None
    assert select_ranks("all", [0, 1, 2]) == [0, 1, 2]
    assert select_ranks(2, [0, 1, 2]) == [2]
    assert select_ranks(range(0, 3, 2), [0, 1, 2]) == [0, 2]
    with pytest.raises(NotFoundError, match="rank 5 recorded nothing.*\\[0, 1, 2\\]"):
        select_ranks([1, 5], [0, 1, 2])
    with pytest.raises(ConfigurationError, match="'every'"):
        select_ranks("every", [0])
