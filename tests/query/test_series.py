"""read_series at scale (issue 19, "Scale"): what the series index of a tensors file holds
and that every series equals the rows read_statistics gives, within the cache bound."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from comgra_like.query import open_group
from comgra_like.query.tensors import SeriesIndex
from comgra_like.vocabulary import ALL_STATISTICS

TRIAL = "trial_a"
KEY = ["node", "role", "recording_type", "aggregation", "sample_index"]


def test_the_series_index_keeps_blocks_and_layouts_not_rows(tiny_group):
    files = sorted((tiny_group / "trials" / TRIAL / "tensors").glob("*.parquet"))
    assert files
    for path in files:
        rows = pq.read_metadata(path).num_rows
        index = SeriesIndex.build(path)
        assert index.num_rows == rows
        # one entry per (step, iteration) block and each distinct layout once (2 bytes
        # a row of it); the grouped row order took 4 bytes a row of the file, holding
        # every statistic of every row ~130 (2 GB at 100,000 steps)
        blocks = len(index.pair_starts)
        arrays = [a for a in vars(index).values() if isinstance(a, np.ndarray)]
        assert sum(a.nbytes for a in arrays) <= 30 * blocks + 2 * len(index.layout_rows) + 1024
        assert len(index.layout_rows) <= rows and index.nbytes >= sum(a.nbytes for a in arrays)
        assert not any(np.issubdtype(a.dtype, np.floating) for a in arrays)


@pytest.mark.parametrize("arrangement", ["small row groups", "shuffled with repeats"])
def test_any_row_order_gives_every_row_of_each_tensor(tiny_group, tmp_path, arrangement):
    """A file in the writer's order read in many small batches (blocks span batches),
    and one in no order with rows repeated (blocks of one row, a tensor twice in a
    block): each tensor's rows are those a scan of the key columns finds."""
    [source] = sorted((tiny_group / "trials" / TRIAL / "tensors").glob("*.parquet"))[:1]
    table = pq.read_table(source)
    if arrangement == "shuffled with repeats":
        rng = np.random.default_rng(1)
        order = rng.permutation(table.num_rows)
        # rows repeated next to themselves: a tensor twice in one block
        places = rng.integers(1, len(order), 40)
        order = np.insert(order, places, order[places - 1])
        order = np.concatenate([order, order[-1:]])  # the last block too
        table = table.take(order)
    path = tmp_path / "tensors.parquet"
    pq.write_table(table, path, row_group_size=7)
    index = SeriesIndex.build(path)
    frame = table.select(["training_step", "type_of_execution", "iteration", *KEY]).to_pandas()
    twice_in_a_block = 0
    for key, expected in frame.groupby(KEY, observed=True).groups.items():
        rows = index.rows(*key[:4], int(key[4]))
        np.testing.assert_array_equal(rows, np.sort(np.asarray(expected)))
        blocks = np.searchsorted(index.pair_starts, rows, side="right") - 1
        twice_in_a_block += len(blocks) - len(np.unique(blocks))
        series = index.series(rows, np.arange(table.num_rows, dtype=np.float32))
        chosen = frame.iloc[rows]
        assert series["training_step"].tolist() == chosen["training_step"].tolist()
        assert series["iteration"].tolist() == chosen["iteration"].tolist()
        assert series["type_of_execution"].tolist() == chosen["type_of_execution"].tolist()
        assert series["value"].tolist() == [float(r) for r in rows]
    assert (twice_in_a_block > 0) == (arrangement == "shuffled with repeats")
    assert index.rows("no such node", "x", "forward", "batch_mean", -1) is None
    mean = index.read_statistic("mean")
    np.testing.assert_array_equal(mean, table.column("mean").to_numpy(zero_copy_only=False)
                                  .astype(np.float32))


def test_every_series_equals_read_statistics_within_a_small_cache(tiny_group):
    bound = 256 * 1024
    g = open_group(tiny_group, cache_bytes=bound)
    table = g.read_statistics(TRIAL)
    tensors = table[KEY].drop_duplicates().itertuples(index=False)
    checked = 0
    for node, role, recording_type, aggregation, sample in tensors:
        expected_rows = table[(table.node == node) & (table.role == role)
                              & (table.recording_type == recording_type)
                              & (table.aggregation == aggregation)
                              & (table.sample_index == sample)]
        for statistic in ALL_STATISTICS[::3]:
            series = g.read_series(TRIAL, node, role, recording_type, aggregation, statistic,
                                   sample_index=int(sample))
            expected = expected_rows.sort_values(["training_step", "iteration"], kind="stable")
            assert series["training_step"].tolist() == expected["training_step"].tolist()
            assert series["iteration"].tolist() == expected["iteration"].tolist()
            assert series["type_of_execution"].tolist() == expected["type_of_execution"].tolist()
            np.testing.assert_array_equal(series["value"].to_numpy(),
                                          expected[statistic].to_numpy(np.float64))
            assert g.cache_bytes_used <= bound
            checked += 1
    assert checked > 50
