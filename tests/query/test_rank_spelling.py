"""One spelling of ranks in every read: ``rank=`` reads one rank, ``ranks=`` several with
a ``rank`` column; no private keyword in a public signature; the spelling before
(``read_kpis(rank="all")``) still reads, with a DeprecationWarning."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from comgra_like.errors import ConfigurationError
from comgra_like.format.layout import part_name, shard_seqs
from comgra_like.query import open_group
from comgra_like.query.provider import Group

from .helpers import copy_group


@pytest.fixture(scope="module")
def two_ranks(tiny_group, tmp_path_factory) -> Path:
    """trial_a of the tiny group with a second rank: each of its steps, tensors and kpis
    files copied under rank 1's name with rank 1 in its rank column (values + 1000 in
    the KPIs, so that the ranks' rows differ)."""
    group = copy_group(tiny_group, tmp_path_factory.mktemp("ranks") / "g")
    trial = group / "trials" / "trial_a"
    for kind in ("steps", "tensors", "kpis"):
        for path in sorted((trial / kind).glob("*.parquet")):
            table = pq.read_table(path)
            rank = table.schema.get_field_index("rank")
            table = table.set_column(rank, "rank", pa.array([1] * table.num_rows, pa.int32()))
            if kind == "kpis":
                index = table.schema.get_field_index("value")
                table = table.set_column(index, "value", pa.array(
                    [v + 1000.0 for v in table.column("value").to_pylist()]))
            _, first, last = shard_seqs(path.name)
            name = part_name(first, 1) if first == last else part_name(last, 1)
            pq.write_table(table, path.parent / name)
    return group


def test_no_public_read_has_a_private_keyword():
    for name, method in inspect.getmembers(Group, inspect.isfunction):
        if name.startswith("_"):
            continue
        private = [p for p in inspect.signature(method).parameters if p.startswith("_")]
        assert private == [], f"Group.{name} has private keywords {private}"


def test_read_statistics_reads_one_rank_with_rank_and_several_with_ranks(two_ranks):
    g = open_group(two_ranks)
    assert g.list_ranks("trial_a") == [0, 1]
    lowest = g.read_statistics("trial_a")
    assert "rank" not in lowest.columns
    pd.testing.assert_frame_equal(g.read_statistics("trial_a", rank=0), lowest)
    one = g.read_statistics("trial_a", rank=1)
    assert "rank" not in one.columns and len(one) == len(lowest)
    both = g.read_statistics("trial_a", ranks="all")
    assert sorted(set(both["rank"])) == [0, 1] and len(both) == 2 * len(lowest)
    pd.testing.assert_frame_equal(
        both[both["rank"] == 1].drop(columns="rank").reset_index(drop=True), one)
    with pytest.raises(ConfigurationError, match="pass one of them"):
        g.read_statistics("trial_a", rank=0, ranks="all")


def test_read_kpis_takes_ranks_and_the_old_rank_all_warns(two_ranks):
    g = open_group(two_ranks)
    one = g.read_kpis("trial_a")
    assert "rank" not in one.columns
    both = g.read_kpis("trial_a", ranks="all")
    assert sorted(set(both["rank"])) == [0, 1] and len(both) == 2 * len(one)
    ranked = g.read_kpis("trial_a", ranks=[1])
    assert set(ranked["rank"]) == {1}
    assert (ranked["value"].to_numpy() == one["value"].to_numpy() + 1000.0).all()
    with pytest.warns(DeprecationWarning, match='ranks="all"'):
        old = g.read_kpis("trial_a", rank="all")
    pd.testing.assert_frame_equal(old, both)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g.read_kpis("trial_a", ranks="all")
        g.read_kpis("trial_a", rank=1)
