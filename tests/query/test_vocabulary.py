"""One word per thing (docs/FORMAT.md, "Vocabulary"): histograms are written with
``module`` (was ``node``) and metrics with ``wall_time`` (was ``time``) now, and the
committed example group, written with the older words, reads the same: the public reads
say the files' words for old and new files alike (``read_histograms`` ``module``, whose
``time`` stays the time_log value; ``read_metrics`` ``wall_time``), as the SQL views do;
``nodes=`` still filters the histograms (the older name of ``modules=``); compaction
keeps the rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from comgra_like.errors import ConfigurationError
from comgra_like.format.layout import HISTOGRAMS, METRICS, part_name
from comgra_like.format.schema import OLD_COLUMN_NAMES, SCHEMAS, current_names
from comgra_like.query import open_group

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
WATCHED = "trial_watched_classifier"


def _columns(path: Path) -> list[str]:
    return pq.read_schema(path).names


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> tuple[Path, Path]:
    """(the committed example group with its old words, the same watched trial recorded
    now by make_examples with the current words)."""
    pytest.importorskip("torch")
    from comgra_like.scripts.make_examples import make_watched_trial

    root = tmp_path_factory.mktemp("vocabulary")
    old = Path(shutil.copytree(EXAMPLE, root / "old" / "tutorial"))
    make_watched_trial(root / "new")
    return old, root / "new" / "tutorial"


def test_the_old_group_has_the_old_words_and_a_new_one_the_current_ones(groups):
    old, new = groups
    for table, renamed in OLD_COLUMN_NAMES.items():
        (old_file,) = (old / "trials" / WATCHED / table).glob("*.parquet")
        assert set(renamed) <= set(_columns(old_file))
        for path in (new / "trials" / WATCHED / table).glob("*.parquet"):
            columns = _columns(path)
            assert set(renamed.values()) <= set(columns) and not set(renamed) & set(columns)
            assert [c for c in columns if c != "rank"] == SCHEMAS[table].names


def test_the_public_reads_are_the_same_for_old_and_new_files(groups):
    old, new = groups
    a, b = open_group(old), open_group(new)
    for read in ("read_histograms", "read_metrics", "list_metrics",
                 "list_module_graph_steps"):
        x, y = getattr(a, read)(WATCHED), getattr(b, read)(WATCHED)
        assert list(x.columns) == list(y.columns), read
        assert len(x) == len(y) and len(x), read
        assert x.dtypes.to_dict() == y.dtypes.to_dict(), read
    hist_a, hist_b = a.read_histograms(WATCHED), b.read_histograms(WATCHED)
    assert "module" in hist_a.columns and "node" not in hist_a.columns
    assert "time" in hist_a.columns  # the time_log value: no wall time, keeps its name
    assert hist_a["module"].notna().all() and hist_b["module"].notna().all()
    assert sorted(set(hist_a["module"])) == sorted(set(hist_b["module"]))
    assert len(a.read_histograms(WATCHED, modules="model.fc1")) == len(
        b.read_histograms(WATCHED, modules="model.fc1")) > 0
    metrics_a, metrics_b = a.read_metrics(WATCHED), b.read_metrics(WATCHED)
    assert "wall_time" in metrics_a.columns and "time" not in metrics_a.columns
    assert metrics_a["wall_time"].notna().all() and metrics_b["wall_time"].notna().all()
    assert (metrics_b["wall_time"] > 1e9).all()  # a wall time
    assert (a.list_metrics(WATCHED)[["module", "metric", "n_points"]].to_numpy()
            == b.list_metrics(WATCHED)[["module", "metric", "n_points"]].to_numpy()).all()


def test_the_reads_and_the_sql_views_have_the_same_words(groups):
    pytest.importorskip("duckdb")
    from comgra_like.query.sql import sql

    old, new = groups
    for group in (old, new):
        g = open_group(group)
        # every column of a read is the view's, but those the reads add
        view = set(sql(group, "SELECT * FROM histograms LIMIT 1").columns)
        read = set(g.read_histograms(WATCHED).columns)
        assert read - view == {"shared_with", "recorded_as"} and "module" in read
        view = set(sql(group, "SELECT * FROM metrics LIMIT 1").columns)
        assert set(g.read_metrics(WATCHED).columns) <= view and "wall_time" in view


def test_merged_histograms_say_module_and_nodes_still_filters(groups):
    old, new = groups
    for group in (old, new):
        g = open_group(group)
        merged = g.read_merged_histograms(WATCHED)
        assert "module" in merged.columns and "node" not in merged.columns
        assert len(merged) == len(g.read_histograms(WATCHED))
        by_modules = g.read_histograms(WATCHED, modules=["model.fc1"], what="io")
        assert len(by_modules) and set(by_modules["module"]) == {"model.fc1"}
        # nodes= is the older name of modules=: callers that pass it get the same rows
        assert by_modules.equals(g.read_histograms(WATCHED, nodes=["model.fc1"], what="io"))
        assert g.read_merged_histograms(WATCHED, nodes="model.fc1").equals(
            g.read_merged_histograms(WATCHED, modules="model.fc1"))
        with pytest.raises(ConfigurationError, match="nodes"):
            g.read_histograms(WATCHED, modules="model.fc1", nodes="model.fc2")


def test_the_sql_views_say_the_current_words_for_both(groups):
    pytest.importorskip("duckdb")
    from comgra_like.query.sql import sql

    old, new = groups
    for group in (old, new):
        hist = sql(group, "SELECT module, time, count(*) AS n FROM histograms "
                          "GROUP BY ALL ORDER BY ALL")
        assert len(hist) and hist["module"].notna().all() and hist["time"].notna().all()
        assert "node" not in sql(group, "SELECT * FROM histograms LIMIT 1").columns
        metrics = sql(group, "SELECT wall_time FROM metrics")
        assert len(metrics) and metrics["wall_time"].notna().all()
        assert "time" not in sql(group, "SELECT * FROM metrics LIMIT 1").columns
    count = "SELECT module, count(*) AS n FROM histograms GROUP BY ALL ORDER BY ALL"
    assert sql(old, count).equals(sql(new, count))


def test_compaction_of_old_and_new_shards_keeps_every_row(groups, tmp_path):
    from comgra_like.writer.compaction import compact_trial

    old, _new = groups
    group = Path(shutil.copytree(old, tmp_path / "g"))
    trial = group / "trials" / WATCHED
    before = open_group(group)
    expected = {t: len(getattr(before, r)(WATCHED))
                for t, r in ((HISTOGRAMS, "read_histograms"), (METRICS, "read_metrics"))}
    for table in (HISTOGRAMS, METRICS):
        # a later shard of the current words beside the old compacted file
        (source,) = (trial / table).glob("*.parquet")
        newer = current_names(pq.read_table(source), table)
        pq.write_table(newer, trial / table / part_name(3))
    compact_trial(trial)
    after = open_group(group)
    for table, read in ((HISTOGRAMS, "read_histograms"), (METRICS, "read_metrics")):
        (merged,) = (trial / table).glob("*.parquet")
        assert not set(OLD_COLUMN_NAMES[table]) & set(_columns(merged))
        frame = getattr(after, read)(WATCHED)
        assert len(frame) == 2 * expected[table]
        assert frame["time" if table == HISTOGRAMS else "wall_time"].notna().all()
    assert after.read_histograms(WATCHED)["module"].notna().all()
