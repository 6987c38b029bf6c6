"""Finite values whose float32 sums overflow (a transformer's attention mask holds the
float32 minimum, -3.4e38) get the statistics float64 gives them, not -inf and NaN."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comgra_like.vocabulary import STATISTIC_INDEX as I
from comgra_like.writer.stats import block_statistics

F32_MIN = np.finfo(np.float32).min


def reference(row: np.ndarray) -> dict[str, float]:
    x = row.astype(np.float64)
    scale = np.abs(x).max() or 1.0
    y = x / scale
    return {"mean": y.mean() * scale, "abs_mean": np.abs(y).mean() * scale,
            "std": (y.std(ddof=1) if len(y) > 1 else 0.0) * scale,
            "norm": np.sqrt((y * y).sum()) * scale}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), masked=st.integers(0, 40), seed=st.integers(0, 2**31 - 1))
def test_rows_with_the_float32_minimum_match_float64(n, masked, seed):
    rng = np.random.default_rng(seed)
    row = rng.standard_normal(n).astype(np.float32)
    row[: min(masked, n)] = F32_MIN
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings either
        out = block_statistics(row[None, :])[0]
    ref = reference(row)
    for name in ("mean", "abs_mean", "std"):
        assert np.isfinite(out[I[name]]), name
        np.testing.assert_allclose(out[I[name]], ref[name], rtol=1e-5, atol=1e-30 + 1e-6 * abs(
            ref[name]), err_msg=name)
    with np.errstate(over="ignore"):
        expected_norm = np.float32(ref["norm"])  # inf where the norm is beyond float32
    np.testing.assert_allclose(out[I["norm"]], expected_norm, rtol=1e-5)
    assert out[I["nan_count"]] == 0 and out[I["inf_count"]] == 0
    assert out[I["min"]] == row.min() and out[I["max"]] == row.max()


def test_rows_that_really_hold_nan_or_inf_keep_numpys_answer_and_their_counts():
    rows = np.array([[1, np.nan, F32_MIN, 2], [np.inf, 1, 2, 3]], np.float32)
    out = block_statistics(rows)
    assert np.isnan(out[0, I["mean"]]) and out[0, I["nan_count"]] == 1
    assert out[1, I["mean"]] == np.inf and out[1, I["inf_count"]] == 1
