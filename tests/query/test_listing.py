"""The listing seam (query/listing.py): one refresh lists each folder of a group once, and
the index, the watch() tables and the metrics table all take their names from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq

from comgra_like.format.layout import part_name
from comgra_like.query import open_group
from comgra_like.query.index import GroupIndex
from comgra_like.query.listing import GroupListing, live_now
from comgra_like.query.metrics import MetricsIndex
from comgra_like.query.sql import GroupFiles
from comgra_like.query.watch import WatchIndex

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
WATCHED = "trial_watched_classifier"
TABLES = ("steps", "kpis", "tensors", "graphs", "notes", "histograms", "module_steps",
          "metrics")


def _example(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "tutorial"))


def _folders(listing: GroupListing) -> set[str]:
    return {folder for _kind, folder in listing.calls}


def test_one_refresh_lists_each_folder_once_for_every_reader(tmp_path):
    group = _example(tmp_path)
    index = GroupIndex(group)
    update = index.update()
    assert update.listing is index.listing
    watch, metrics = WatchIndex(group), MetricsIndex(group)
    assert watch.update(update.listing) and metrics.update(update.listing)
    calls = update.listing.calls
    assert calls[("folders", str(group / "trials"))] == 1
    assert max(calls.values()) == 1, [c for c, n in calls.items() if n > 1]
    trial = group / "trials" / WATCHED
    assert {str(trial / t) for t in TABLES} <= _folders(update.listing)
    # nothing new: the next refresh lists again (a new listing) and finds nothing
    again = index.update()
    assert again.listing is not update.listing and not again.report.new_trials
    assert not watch.update(again.listing) and not metrics.update(again.listing)


def test_the_group_refresh_shares_its_listing_and_still_sees_new_shards(tmp_path):
    group = _example(tmp_path)
    g = open_group(group)
    listing = g._index.listing  # the refresh's (a test may look inside)
    assert max(listing.calls.values()) == 1
    assert str(group / "trials" / WATCHED / "metrics") in _folders(listing)
    before = g.read_metrics(WATCHED)
    histograms = g.read_histograms(WATCHED)
    assert len(before) and len(histograms)
    # a new metrics shard (a copy of the compacted rows under a later name) shows after
    # the next refresh, not before: reads answer from the last listing
    folder = group / "trials" / WATCHED / "metrics"
    (source,) = folder.glob("*.parquet")
    pq.write_table(pq.read_table(source), folder / part_name(3))
    assert len(g.read_metrics(WATCHED)) == len(before)
    version = g.version
    g.refresh()
    assert g.version > version
    assert len(g.read_metrics(WATCHED)) == 2 * len(before)


def test_a_read_that_finds_a_file_gone_lists_again_at_once(tmp_path):
    group = _example(tmp_path)
    folder = group / "trials" / WATCHED / "histograms"
    listing = GroupListing(group)
    assert listing.live(folder) == ["compact-00000000-00000002.parquet"]
    (source,) = folder.glob("*.parquet")
    source.rename(folder / "compact-00000000-00000005.parquet")
    assert listing.live(folder) == ["compact-00000000-00000002.parquet"]  # the snapshot
    assert live_now(listing.files, folder) == ["compact-00000000-00000005.parquet"]


def test_the_sql_views_list_through_the_same_seam(tmp_path):
    group = _example(tmp_path)
    listing = GroupFiles(group).list()
    assert sorted(t["trial_id"] for t in listing.trials) == sorted(
        p.name for p in (group / "trials").iterdir())
    assert [s.path for s in listing.shards["histograms"]] == [
        str(p) for p in sorted((group / "trials" / WATCHED / "histograms").glob("*.parquet"))]
