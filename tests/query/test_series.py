"""read_series at scale (issue 19, "Scale"): what the series index of a tensors file holds
and that every series equals the rows read_statistics gives, within the cache bound."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from comgra_like.query import open_group
from comgra_like.query.tensors import SeriesIndex
from comgra_like.vocabulary import ALL_STATISTICS

TRIAL = "trial_a"
KEY = ["node", "role", "recording_type", "aggregation", "sample_index"]


def test_the_series_index_holds_no_statistics_a_few_bytes_per_row(tiny_group):
    files = sorted((tiny_group / "trials" / TRIAL / "tensors").glob("*.parquet"))
    assert files
    for path in files:
        rows = pq.read_metadata(path).num_rows
        index = SeriesIndex.build(path)
        # the grouped row order (4 bytes a row) and one entry per (step, iteration);
        # holding every statistic of every row took ~130 bytes a row (2 GB at 100,000 steps)
        pairs = len(index.pair_starts)
        assert index.nbytes <= 8 * rows + 32 * pairs + 1024
        assert all(not np.issubdtype(a.dtype, np.floating) for a in vars(index).values()
                   if isinstance(a, np.ndarray))


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
