"""Every statistic against a numpy reference (float64), on random tensors of several ranks."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder
from comgra_like.vocabulary import STATISTICS as STAT_NAMES
from comgra_like.writer.stats import (
    batch_aggregates,
    block_statistics,
    group_by_size,
    top_singular_value,
)


def numpy_stats(v: np.ndarray) -> dict:
    v = v.astype(np.float64).ravel()
    return {
        "mean": v.mean(), "abs_mean": np.abs(v).mean(),
        "std": v.std(ddof=1) if v.size > 1 else 0.0, "abs_max": np.abs(v).max(),
        "min": v.min(), "max": v.max(), "norm": np.sqrt((v * v).sum()),
        "nan_count": np.isnan(v).sum(), "inf_count": np.isinf(v).sum(),
    }


shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 6), value_shapes=st.lists(shapes, min_size=1, max_size=5),
       seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_grouped_statistics_match_numpy(batch, value_shapes, seed, scale):
    rng = np.random.default_rng(seed)
    tensors = [rng.normal(size=(batch, *s)).astype(np.float32) * scale for s in value_shapes]
    mats = [t.reshape(batch, -1) for t in tensors]
    groups = group_by_size(mats)
    assert sorted(i for g in groups for i in g.members) == list(range(len(mats)))
    got = {}
    for g in groups:
        stats = block_statistics(g.block)
        assert stats.shape == (len(g.members), batch, len(STAT_NAMES))
        for j, i in enumerate(g.members):
            got[i] = stats[j]
    for s, t in enumerate(tensors):
        for b in range(batch):
            ref = numpy_stats(t[b])
            for k, name in enumerate(STAT_NAMES):
                np.testing.assert_allclose(got[s][b, k], ref[name], rtol=2e-4,
                                           atol=2e-6 * scale, err_msg=name)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 7), n=st.integers(1, 9), seed=st.integers(0, 2**31 - 1))
def test_batch_aggregates_match_numpy(batch, n, seed):
    v = np.random.default_rng(seed).normal(size=(batch, n)).astype(np.float32)
    got = batch_aggregates(v)
    np.testing.assert_allclose(got[0], v.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], np.abs(v).max(0), rtol=1e-6)
    ref_std = v.std(0, ddof=1) if batch > 1 else np.zeros(n)
    np.testing.assert_allclose(got[2], ref_std, rtol=1e-4, atol=1e-6)


def test_nan_and_inf_are_counted_and_propagate_like_numpy():
    v = np.array([[1.0, np.nan, 3.0, np.inf, -np.inf, 2.0]], dtype=np.float32)
    got = block_statistics(v)[0]
    stats = dict(zip(STAT_NAMES, got))
    assert stats["nan_count"] == 1 and stats["inf_count"] == 2
    for name in ("mean", "abs_max", "min", "max"):
        assert np.isnan(stats[name]), name


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), seed=st.integers(0, 2**31 - 1))
def test_top_singular_value_matches_numpy(rows, cols, seed):
    w = np.random.default_rng(seed).normal(size=(rows, cols)).astype(np.float32)
    ref = np.linalg.svd(w.astype(np.float64), compute_uv=False)[0]
    sigma, v = top_singular_value(w, None, tol=1e-9, max_iterations=5000)
    assert abs(sigma - ref) <= 1e-3 * ref
    # Warm start from the previous vector: a slightly changed matrix converges at once.
    w2 = w + 1e-3 * np.random.default_rng(seed + 1).normal(size=w.shape).astype(np.float32)
    ref2 = np.linalg.svd(w2.astype(np.float64), compute_uv=False)[0]
    sigma2, _ = top_singular_value(w2, v, tol=1e-9, max_iterations=5000)
    assert abs(sigma2 - ref2) <= 1e-3 * ref2


@settings(max_examples=15, deadline=None)
@given(rank_shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
       batch=st.integers(1, 5), batch_dim=st.integers(0, 4), seed=st.integers(0, 2**31 - 1))
def test_recorded_rows_match_numpy(tmp_path_factory, rank_shape, batch, batch_dim, seed):
    """End to end: any rank, any batch dimension position, read back through the query API."""
    batch_dim = batch_dim % (len(rank_shape) + 1)
    shape = list(rank_shape)
    shape.insert(batch_dim, batch)
    rng = np.random.default_rng(seed)
    data = rng.normal(size=shape).astype(np.float32)
    root = tmp_path_factory.mktemp("rec")
    model = torch.nn.Linear(1, 1)
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                         max_num_batch_size_to_record=3)
    rec.track_module("m", model)
    rec.start_batch(0, batch)
    rec.start_iteration()
    t = torch.from_numpy(data.copy())
    rec.register_tensor("x", t, index_of_batch_dimension=batch_dim)
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    g = open_group(root / "g")
    per_sample = np.moveaxis(data, batch_dim, 0)
    for i in range(min(batch, 3)):
        r = g.read_tensor("t", 0, 0, "x", "x", "forward", "sample", i)
        assert r.shape == tuple(rank_shape)
        np.testing.assert_array_equal(r.values, per_sample[i])
        ref = numpy_stats(per_sample[i])
        for name in STAT_NAMES:
            np.testing.assert_allclose(r.stats[name], ref[name], rtol=2e-4, atol=1e-6)
    stats_per_sample = {n: np.array([numpy_stats(s)[n] for s in per_sample]) for n in STAT_NAMES}
    mean_row = g.read_tensor("t", 0, 0, "x", "x", "forward", "batch_mean")
    np.testing.assert_allclose(mean_row.values, per_sample.mean(0), rtol=1e-5, atol=1e-6)
    absmax_row = g.read_tensor("t", 0, 0, "x", "x", "forward", "batch_abs_max")
    std_row = g.read_tensor("t", 0, 0, "x", "x", "forward", "batch_std")
    for name in ("mean", "abs_mean", "std", "abs_max"):
        ref = stats_per_sample[name]
        np.testing.assert_allclose(mean_row.stats[name], ref.mean(), rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(absmax_row.stats[name], np.abs(ref).max(), rtol=2e-4, atol=1e-6)
        ref_std = ref.std(ddof=1) if batch > 1 else 0.0
        np.testing.assert_allclose(std_row.stats[name], ref_std, rtol=1e-3, atol=1e-5)
    assert g.list_tensors("t", 0).query("node == 'x' and aggregation == 'sample'").shape[0] == min(batch, 3)


def test_std_is_accurate_for_large_offsets():
    """One-pass variance in float64 must not lose float32 accuracy when |mean| >> std."""
    rng = np.random.default_rng(3)
    v = (1000.0 + 0.01 * rng.normal(size=(4, 5000))).astype(np.float32)
    got = block_statistics(v)
    np.testing.assert_allclose(got[:, 2], v.astype(np.float64).std(axis=1, ddof=1), rtol=1e-4)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 4), sizes=st.lists(st.sampled_from([1, 3, 16]), min_size=1, max_size=8),
       seed=st.integers(0, 2**31 - 1))
def test_arrays_back_to_back_in_memory_are_reduced_in_place(batch, sizes, seed):
    """The writer's shared memory holds tensors of one size back to back: group_by_size
    views such runs instead of copying them, with the same statistics."""
    rng = np.random.default_rng(seed)
    buffer = rng.normal(size=batch * sum(sizes)).astype(np.float32)
    mats, pos = [], 0
    for n in sizes:
        mats.append(buffer[pos:pos + batch * n].reshape(batch, n))
        pos += batch * n
    groups = group_by_size(mats)
    assert sorted(i for g in groups for i in g.members) == list(range(len(mats)))
    for g in groups:
        adjacent = all(b == a + 1 for a, b in zip(g.members, g.members[1:]))
        if adjacent:
            assert np.shares_memory(g.block, buffer)  # a view, not a copy
        stats = block_statistics(g.block)
        aggregated = batch_aggregates(g.block, axis=1)
        for j, i in enumerate(g.members):
            np.testing.assert_array_equal(g.block[j], mats[i])
            for b in range(batch):
                ref = numpy_stats(mats[i][b])
                for k, name in enumerate(STAT_NAMES):
                    np.testing.assert_allclose(stats[j, b, k], ref[name], rtol=2e-4, atol=2e-6,
                                               err_msg=name)
            np.testing.assert_allclose(aggregated[0, j], mats[i].mean(0), rtol=1e-5, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(chunk=st.sampled_from([1, 5, 16, 64]), g=st.integers(1, 4), batch=st.integers(1, 6),
       n=st.integers(1, 12), seed=st.integers(0, 2**31 - 1))
def test_statistics_reduced_in_chunks_match_numpy(chunk, g, batch, n, seed):
    """block_statistics reduces big blocks a cache-sized chunk of rows at a time: chunk
    boundaries that cut through a block (and rows whose variance needs the centred pass
    in any chunk) give numpy's statistics. The chunk size is made small here so that
    these small blocks span many chunks."""
    import comgra_like.writer.stats as stats_module

    rng = np.random.default_rng(seed)
    block = rng.normal(size=(g, batch, n)).astype(np.float32)
    block[rng.random((g, batch)) < 0.5] += np.float32(1000.0)  # needs the centred pass
    saved = stats_module.CHUNK_VALUES
    stats_module.CHUNK_VALUES = chunk
    try:
        stats = block_statistics(block)
    finally:
        stats_module.CHUNK_VALUES = saved
    for j in range(g):
        for b in range(batch):
            ref = numpy_stats(block[j, b])
            for k, name in enumerate(STAT_NAMES):
                np.testing.assert_allclose(stats[j, b, k], ref[name], rtol=2e-4,
                                           atol=1e-4, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 70), n=st.integers(1, 70), seed=st.integers(0, 2**31 - 1),
       special=st.sampled_from([None, np.nan, np.inf, -np.inf]), strided=st.booleans())
def test_row_extremes_are_numpys_max_and_min(rows, n, seed, special, strided):
    """The per-row maximum and minimum (reduceat over the flat rows where that is faster)
    are exactly numpy's, NaN and infinities included, for contiguous and strided rows."""
    from comgra_like.writer.stats import _row_extremes

    rng = np.random.default_rng(seed)
    full = rng.normal(size=(rows, 2 * n)).astype(np.float32)
    c = full[:, ::2] if strided else np.ascontiguousarray(full[:, :n])
    if special is not None:
        c[rng.random(c.shape) < 0.1] = special
    mx, mn = np.empty(rows, np.float32), np.empty(rows, np.float32)
    _row_extremes(c, mx, mn)
    np.testing.assert_array_equal(mx, np.max(c, axis=1))
    np.testing.assert_array_equal(mn, np.min(c, axis=1))


def test_block_statistics_pauses_between_chunks_and_pausing_changes_nothing():
    """The writer gives way to training between chunks (``pause``): one call before each
    chunk but the first, and the same statistics as without pauses."""
    import comgra_like.writer.stats as stats_module

    rng = np.random.default_rng(5)
    block = rng.normal(size=(6, 1, 40)).astype(np.float32)
    calls = []
    saved = stats_module.CHUNK_VALUES
    stats_module.CHUNK_VALUES = 80  # two rows of 40 per chunk: three chunks
    try:
        paused = block_statistics(block, lambda: calls.append(1))
        plain = block_statistics(block)
    finally:
        stats_module.CHUNK_VALUES = saved
    assert len(calls) == 2
    np.testing.assert_array_equal(paused, plain)


def test_a_group_of_tensors_larger_than_a_chunk_is_recorded_exactly(tmp_path):
    """Five tensors of 64 x 512 values lie back to back in shared memory and make one
    block of the writer, whose statistics and aggregates are reduced two tensors at a
    time (CHUNK_VALUES): every tensor's per-sample statistics and per-neuron aggregates
    still match numpy."""
    rng = np.random.default_rng(7)
    data = [rng.normal(loc=i, size=(64, 512)).astype(np.float32) for i in range(5)]
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                         max_num_batch_size_to_record=2)
    rec.track_module("m", torch.nn.Linear(1, 1))
    rec.start_batch(0, 64)
    rec.start_iteration()
    for i, d in enumerate(data):
        rec.register_tensor(f"t{i}", torch.from_numpy(d.copy()))
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    for i, d in enumerate(data):
        name = f"t{i}"
        for s in range(2):
            r = g.read_tensor("t", 0, 0, name, name, "forward", "sample", s)
            np.testing.assert_array_equal(r.values, d[s])
            ref = numpy_stats(d[s])
            for stat in STAT_NAMES:
                np.testing.assert_allclose(r.stats[stat], ref[stat], rtol=2e-4, atol=1e-5)
        mean_row = g.read_tensor("t", 0, 0, name, name, "forward", "batch_mean")
        np.testing.assert_allclose(mean_row.values, d.mean(0), rtol=1e-5, atol=1e-5)
        std_row = g.read_tensor("t", 0, 0, name, name, "forward", "batch_std")
        np.testing.assert_allclose(std_row.values, d.std(0, ddof=1), rtol=1e-4, atol=1e-5)
        per_sample_std = np.array([numpy_stats(x)["std"] for x in d])
        np.testing.assert_allclose(mean_row.stats["std"], per_sample_std.mean(), rtol=1e-4)
