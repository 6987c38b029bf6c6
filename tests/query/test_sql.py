"""comgra_like.query.sql (issue 19, whole-group queries): DuckDB's answers equal the query
API's on a group recorded by the real recorder: finished (compacted) trials, a trial
whose shards a compaction is merging right now, a trial still being written by a live
recorder, hidden files being written, and a damaged shard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from comgra_like.errors import ConfigurationError, StorageError
from comgra_like.format.layout import compact_name
from comgra_like.query import STATISTICS_KEY_COLUMNS, open_group, sql
from comgra_like.query import connect as sql_connect
from comgra_like.vocabulary import ALL_STATISTICS

from .helpers import one_shard_per_step

pytest.importorskip("duckdb")

RECORDED = [0, 1, 4, 5, 8, 9, 10]
ROW_KEY = ["trial_id", "training_step", "iteration", "node", "role", "recording_type",
           "aggregation", "sample_index"]

# The README's example: the largest gradient norm per node over all trials.
LARGEST_GRADIENT_NORM = """
    SELECT node, max(norm) AS max_norm, arg_max(trial_id, norm) AS trial_id
    FROM tensors
    WHERE recording_type LIKE 'gradient:%' AND aggregation IN ('none', 'batch_abs_max')
    GROUP BY node ORDER BY max_norm DESC
"""


def _copy_trial(group: Path, source: str, target: str) -> Path:
    """A copy of a trial under another folder name (its files still say ``source``)."""
    root = group / "trials" / target
    shutil.copytree(group / "trials" / source, root)
    info = json.loads((root / "trial.json").read_text())
    info["trial_id"] = target
    (root / "trial.json").write_text(json.dumps(info))
    return root


def _compaction_in_progress(trial: Path) -> None:
    """Steps and tensors as one part per step, plus a compact file of parts 0..2 whose
    sources are not deleted yet (a compaction caught between its two moves)."""
    one_shard_per_step(trial)
    for kind in ("steps", "tensors"):
        folder = trial / kind
        parts = [folder / f"part-{n:08d}.parquet" for n in range(3)]
        pq.write_table(pa.concat_tables([pq.read_table(p) for p in parts]),
                       folder / compact_name(0, 2))


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """trial_a, trial_b finished; trial_c a copy of trial_b (another folder name) with a
    compaction in progress; trial_damaged a copy of trial_a with one truncated tensors
    shard; trial_live recorded by a live recorder (steps 0..5 so far, not finalized)."""
    pytest.importorskip("torch")
    from tests.conftest import TinyRun as tiny_run_class

    root = tmp_path_factory.mktemp("sql")
    for number, trial_id in enumerate(["trial_a", "trial_b"]):
        run = tiny_run_class(root, "g", trial_id, RECORDED, seed=number, bugged=number == 0)
        run.run(range(12))
        run.finalize()
    path = root / "g"
    _compaction_in_progress(_copy_trial(path, "trial_b", "trial_c"))
    damaged = _copy_trial(path, "trial_a", "trial_damaged")
    parts = one_shard_per_step(damaged)
    data = parts[4]["tensors"].read_bytes()
    parts[4]["tensors"].write_bytes(data[: len(data) // 2])
    # Hidden files a writer is renaming into place: whole copies of real shards, which
    # would double rows if a reader looked at them.
    for trial in ("trial_a", "trial_c"):
        folder = path / "trials" / trial / "tensors"
        shutil.copy(max(folder.glob("*.parquet")), folder / ".part-00000099.tmp")
        shutil.copy(max(folder.glob("*.parquet")), folder / ".part-00000098.parquet")
    live = tiny_run_class(root, "g", "trial_live", RECORDED, seed=7)
    live.run(range(6))
    live.recorder.flush()
    yield path, live
    live.finalize()


def _query_api_statistics(group) -> pd.DataFrame:
    frames = []
    for info in group.list_trials():
        frame = group.read_statistics(info.trial_id)
        frame.insert(0, "trial_id", info.trial_id)
        frames.append(frame)
    return _sorted(pd.concat(frames, ignore_index=True), ROW_KEY)


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, kind="stable").reset_index(drop=True)


def _as_query_api(frame: pd.DataFrame) -> pd.DataFrame:
    """DuckDB's frame with the query API's dtypes (statistics float64, ints as there)."""
    frame = frame.copy()
    for name in ALL_STATISTICS:
        if name in frame:
            frame[name] = frame[name].astype(np.float64)
    for name in ("training_step", "numel"):
        if name in frame:
            frame[name] = frame[name].astype(np.int64)
    for name in ("iteration", "sample_index"):
        if name in frame:
            frame[name] = frame[name].astype(np.int32)
    return frame


def test_every_table_equals_the_query_api(group):
    path, _ = group
    api = open_group(path)
    db = sql_connect(path)
    trials = [t.trial_id for t in api.list_trials()]
    assert trials == ["trial_a", "trial_b", "trial_c", "trial_damaged", "trial_live"]
    got = db.sql("SELECT trial_id, status FROM trials ORDER BY trial_id")
    assert got["trial_id"].tolist() == trials
    assert got["status"].tolist() == [t.status for t in api.list_trials()]
    assert got["status"].tolist()[-1] == "running"

    # tensors: every statistic of every row, hidden files and superseded parts left out
    columns = ", ".join(["trial_id", *STATISTICS_KEY_COLUMNS, *ALL_STATISTICS])
    mine = _as_query_api(_sorted(db.sql(f"SELECT {columns} FROM tensors"), ROW_KEY))
    theirs = _query_api_statistics(api)
    assert len(mine) > 1000
    pd.testing.assert_frame_equal(mine, theirs[mine.columns.tolist()], check_dtype=False)

    for trial in trials:
        steps = db.sql("SELECT training_step, type_of_execution, iteration, graph_hash, "
                       f"batch_size FROM steps WHERE trial_id = '{trial}' "
                       "ORDER BY training_step, iteration")
        expected = api.list_steps(trial)[steps.columns.tolist()]
        pd.testing.assert_frame_equal(_as_query_api(steps), expected, check_dtype=False)
        kpis = db.sql("SELECT kpi_group, kpi_name, type_of_execution, timepoint, value "
                      f"FROM kpis WHERE trial_id = '{trial}' ORDER BY timepoint, kpi_group, "
                      "kpi_name")
        expected = _sorted(api.read_kpis(trial)[kpis.columns.tolist()],
                           ["timepoint", "kpi_group", "kpi_name"])
        assert len(kpis) > 0
        pd.testing.assert_frame_equal(kpis, expected, check_dtype=False)
        notes = db.sql(f"SELECT text FROM notes WHERE trial_id = '{trial}'")["text"].tolist()
        assert notes == [n.text for n in api.read_notes(trial)] and notes
    live_steps = db.sql("SELECT DISTINCT training_step FROM steps WHERE trial_id = 'trial_live' "
                        "ORDER BY 1")["training_step"].tolist()
    assert live_steps == [0, 1, 4, 5]


def test_the_trial_id_is_the_folder_name(group):
    path, _ = group
    got = sql(path, "SELECT trial_id, count(*) AS n FROM tensors GROUP BY 1 ORDER BY 1")
    # trial_c's files were written as trial_b: the column says where the file lies
    files = pq.read_table(path / "trials" / "trial_c" / "tensors", columns=["trial_id"])
    assert set(files["trial_id"].to_pylist()) == {"trial_b"}
    counts = dict(zip(got["trial_id"], got["n"]))
    assert counts["trial_c"] == counts["trial_b"] > 0


def test_the_largest_gradient_norm_per_node_equals_read_statistics(group):
    path, _ = group
    got = sql(path, LARGEST_GRADIENT_NORM)
    stats = _query_api_statistics(open_group(path))
    grads = stats[stats["recording_type"].str.startswith("gradient:")
                  & stats["aggregation"].isin(["none", "batch_abs_max"])]
    best = grads.loc[grads.groupby("node")["norm"].idxmax()]
    expected = best.set_index("node")["norm"]
    assert sorted(got["node"]) == sorted(expected.index) and len(got) >= 5
    np.testing.assert_allclose(got.set_index("node")["max_norm"].astype(np.float64),
                               expected.loc[got["node"]].to_numpy(), rtol=0)
    assert got["max_norm"].is_monotonic_decreasing
    for node, trial in zip(got["node"], got["trial_id"]):
        assert trial in set(best.loc[best["node"] == node, "trial_id"]) or (
            grads[(grads["node"] == node) & (grads["trial_id"] == trial)]["norm"].max()
            == expected[node])


def test_values_and_shapes_equal_read_tensor(group):
    path, _ = group
    api = open_group(path)
    rows = sql(path, "SELECT * FROM tensors WHERE trial_id = 'trial_b' AND training_step = 5 "
                     "AND node = 'memory' AND values IS NOT NULL ORDER BY iteration, role, "
                     "recording_type, aggregation, sample_index")
    assert len(rows) > 4
    for row in rows.itertuples():
        record = api.read_tensor("trial_b", 5, row.iteration, row.node, row.role,
                                 row.recording_type, row.aggregation, row.sample_index)
        assert tuple(row.shape) == record.shape
        np.testing.assert_array_equal(np.asarray(row.values, np.float32),
                                      record.values.reshape(-1))


def test_arrow_result_equals_the_frame(group):
    path, _ = group
    query = "SELECT trial_id, training_step, node, norm FROM tensors ORDER BY ALL"
    table = sql(path, query, arrow=True)
    assert isinstance(table, pa.Table)
    pd.testing.assert_frame_equal(table.to_pandas(), sql(path, query))


def test_a_damaged_file_is_skipped_and_reported_like_the_query_api(group):
    path, _ = group
    damaged = str(path / "trials" / "trial_damaged" / "tensors" / "part-00000002.parquet")
    api = open_group(path)
    db = sql_connect(path)
    assert [s.path for s in db.skipped] == [s.path for s in api.skipped] == [damaged]
    assert "unreadable shard" in db.skipped[0].reason
    frame = sql(path, "SELECT count(*) AS n FROM tensors WHERE trial_id = 'trial_damaged'")
    assert [s.path for s in frame.attrs["skipped"]] == [damaged]
    assert frame["n"][0] == len(api.read_statistics("trial_damaged")) > 0
    steps = sql(path, "SELECT DISTINCT training_step FROM tensors "
                      "WHERE trial_id = 'trial_damaged' ORDER BY 1")["training_step"].tolist()
    assert steps == [s for s in RECORDED if s != 4]
    with pytest.raises(StorageError, match="part-00000002.parquet.*damaged='skip'"):
        sql(path, "SELECT 1", damaged="raise")


def test_a_file_damaged_after_the_listing_is_skipped_at_the_query(tmp_path, tiny_group):
    """Pages overwritten, footer intact: found only by reading the file."""
    path = shutil.copytree(tiny_group, tmp_path / "g")
    db = sql_connect(path)
    before = db.sql("SELECT count(*) AS n FROM tensors")["n"][0]
    victim = next((path / "trials" / "trial_b" / "tensors").glob("*.parquet"))
    rows = pq.read_metadata(victim).num_rows
    data = victim.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little") + 8
    victim.write_bytes(data[:4] + b"\x07" * (len(data) - 4 - footer) + data[-footer:])
    after = db.sql("SELECT count(*) AS n, sum(norm) AS s FROM tensors")
    assert [s.path for s in db.skipped] == [str(victim)]
    assert after["n"][0] == before - rows
    api = open_group(path)
    assert len(api.read_statistics("trial_b")) == 0
    assert [s.path for s in api.skipped] == [str(victim)]
    with pytest.raises(StorageError, match="damaged files"):
        sql_connect(path, damaged="raise").sql("SELECT sum(norm) FROM tensors")


def test_a_compaction_after_the_listing_is_followed(tmp_path, tiny_group):
    """The parts listed are gone when the query runs: the group is listed again."""
    from comgra_like import compact_trial

    path = shutil.copytree(tiny_group, tmp_path / "g")
    one_shard_per_step(path / "trials" / "trial_a")
    db = sql_connect(path)
    before = db.sql("SELECT count(*) AS n, sum(norm) AS s FROM tensors")
    compact_trial(path / "trials" / "trial_a")
    assert not list((path / "trials" / "trial_a" / "tensors").glob("part-*"))
    after = db.sql("SELECT count(*) AS n, sum(norm) AS s FROM tensors")
    pd.testing.assert_frame_equal(after, before)
    assert db.skipped == []


def test_a_live_recorder_new_shards_and_its_compaction(tmp_path, tiny_run_class):
    run = tiny_run_class(tmp_path, "live", "model", list(range(0, 40, 2)), seed=3)
    path = tmp_path / "live"
    api = open_group(path)
    db = sql_connect(path)
    for upto in (4, 10, 16):
        run.run(range(upto - 6 if upto > 4 else 0, upto))
        run.recorder.flush()
        api.refresh()
        db.refresh()
        folder = path / "trials" / "model" / "tensors"
        assert all(p.name.startswith("part-") for p in folder.glob("*.parquet"))
        got = db.sql("SELECT count(*) AS n, max(training_step) AS last FROM tensors")
        assert got["n"][0] == len(api.read_statistics("model"))
        assert got["last"][0] == max(s for s in range(0, 40, 2) if s < upto)
    run.finalize()
    api.refresh()
    db.refresh()
    names = [p.name for p in (path / "trials" / "model" / "tensors").glob("*.parquet")]
    assert len(names) == 1 and names[0].startswith("compact-")
    got = db.sql("SELECT count(*) AS n FROM tensors")["n"][0]
    assert got == len(api.read_statistics("model"))
    assert db.sql("SELECT status FROM trials")["status"].tolist() == ["finished"]


def test_the_rank_column_comes_from_the_files_or_from_their_names(tmp_path, tiny_group):
    """Files of a distributed recording carry their rank as a column and in their name;
    files written before ranks have neither and are rank 0's."""
    from comgra_like.format.layout import part_name, shard_seqs
    from comgra_like.format.schema import with_rank

    path = shutil.copytree(tiny_group, tmp_path / "g")
    folder = path / "trials" / "trial_a" / "kpis"
    last = max(shard_seqs(p.name)[2] for p in folder.glob("*.parquet"))
    old = pq.read_table(folder)
    assert set(old.column("rank").to_pylist()) == {0}
    plain = old.drop_columns(["rank"])
    pq.write_table(plain.slice(0, 3), folder / part_name(last + 1))  # before ranks
    pq.write_table(plain.slice(0, 2), folder / part_name(0, rank=2))  # the name alone
    pq.write_table(with_rank(plain.slice(0, 1), 1), folder / part_name(0, rank=1))
    got = sql(path, "SELECT trial_id, rank, count(*) AS n FROM kpis GROUP BY ALL ORDER BY ALL")
    rows = [(t, int(r), int(n)) for t, r, n in got.itertuples(index=False)]
    total_b = len(pq.read_table(path / "trials" / "trial_b" / "kpis"))
    assert rows == [("trial_a", 0, len(old) + 3), ("trial_a", 1, 1), ("trial_a", 2, 2),
                    ("trial_b", 0, total_b)]


def test_tables_come_from_the_layout_and_empty_ones_have_their_columns(tiny_group):
    from comgra_like.format.layout import NOTES_DIR, TABLES
    from comgra_like.format.schema import FILE_SCHEMAS

    db = sql_connect(tiny_group)
    assert set(db.tables) == {"trials", *TABLES, NOTES_DIR}
    for table in (*TABLES, NOTES_DIR):
        columns = db.sql(f"SELECT * FROM {table} LIMIT 0").columns.tolist()
        assert columns[0] == "trial_id"
        assert set(columns) == set(FILE_SCHEMAS[table].names)


def test_bad_queries_and_arguments_are_project_errors(tiny_group, tmp_path):
    with pytest.raises(ConfigurationError, match="nope.*Tables: trials, steps, tensors"):
        sql(tiny_group, "SELECT nope FROM tensors")
    with pytest.raises(ConfigurationError, match="damaged="):
        sql(tiny_group, "SELECT 1", damaged="ignore")
    with pytest.raises(ConfigurationError, match="non-empty SQL string"):
        sql(tiny_group, "  ")
    from comgra_like.errors import NotFoundError
    with pytest.raises(NotFoundError, match="not a group folder"):
        sql(tmp_path / "missing", "SELECT 1")


def test_without_duckdb_the_error_names_the_extra(tiny_group):
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "from comgra_like.query import sql\n"
            "from comgra_like.errors import ConfigurationError\n"
            "try:\n"
            f"    sql({str(tiny_group)!r}, 'SELECT 1')\n"
            "except ConfigurationError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install comgra-like[sql]" in out


def test_the_gui_the_query_api_and_the_writer_do_not_load_duckdb():
    code = ("import sys\n"
            "import comgra_like.query, comgra_like.writer.worker, comgra_like.app.cli\n"
            "from comgra_like.query import sql, connect\n"
            "print('duckdb' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
