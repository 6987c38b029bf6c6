"""The query API and DuckDB on the same cross-step scans of a whole group, side by side
(issue 19: whole-group queries).

    python benchmarks/benchmark_sql.py [--path GROUP] [--trials 10] [--steps 2000]
        [--nodes 60] [--repeat 3]

Without ``--path`` it builds a synthetic group with ``make_synthetic_group.py`` (the real
recorder; every step recorded, every 100th step 20 iterations long) in a temporary
folder first. Two scans, each over every recorded step of every trial:

- ``aggregate``: the largest gradient norm per node (the README's example): the query
  API reads ``read_statistics`` of each trial (gradient rows, the norm) and pandas
  groups them; DuckDB runs one GROUP BY.
- ``materialize``: every forward ``batch_mean`` row's keys, mean and norm as one pandas
  frame: ``read_statistics`` per trial, concatenated, against one SELECT.

``cold``: each repetition opens the group anew for both (``open_group``, which indexes
every trial's steps, KPIs and notes; a new DuckDB connection, which lists the files and
reads their footers); ``opened``: the group and the connection opened once before. The
files are in the page cache after the first run of either. Prints the median seconds of
each and the ratio query API / DuckDB; both answers are checked to be equal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from comgra_like.query import Group, connect, open_group

AGGREGATE_SQL = """
    SELECT node, max(norm) AS max_norm FROM tensors
    WHERE recording_type LIKE 'gradient:%' AND aggregation IN ('none', 'batch_abs_max')
    GROUP BY node ORDER BY node
"""
MATERIALIZE_SQL = """
    SELECT trial_id, training_step, iteration, node, role, mean, norm FROM tensors
    WHERE recording_type = 'forward' AND aggregation = 'batch_mean'
"""
KEYS = ["trial_id", "training_step", "iteration", "node", "role"]


def api_aggregate(group: Group) -> pd.DataFrame:
    frames = []
    for info in group.list_trials():
        frame = group.read_statistics(info.trial_id, aggregations=["none", "batch_abs_max"],
                                      statistics=["norm"])
        frames.append(frame[frame["recording_type"].str.startswith("gradient:")])
    rows = pd.concat(frames, ignore_index=True)
    return (rows.groupby("node", sort=True)["norm"].max().rename("max_norm").reset_index())


def api_materialize(group: Group) -> pd.DataFrame:
    frames = []
    for info in group.list_trials():
        frame = group.read_statistics(info.trial_id, recording_types="forward",
                                      aggregations="batch_mean", statistics=["mean", "norm"])
        frame.insert(0, "trial_id", info.trial_id)
        frames.append(frame[KEYS + ["mean", "norm"]])
    return pd.concat(frames, ignore_index=True)


def duckdb_query(path: Path, query: str) -> pd.DataFrame:
    db = connect(path)
    try:
        return db.sql(query)
    finally:
        db.close()


def api_cold(fn: Callable[[Group], pd.DataFrame], path: Path) -> pd.DataFrame:
    return fn(open_group(path))


def timed(fn: Callable[[], pd.DataFrame], repeat: int) -> tuple[float, pd.DataFrame]:
    seconds, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def check_equal(kind: str, api: pd.DataFrame, duck: pd.DataFrame) -> None:
    if kind == "aggregate":
        same = (api["node"].tolist() == duck["node"].tolist()
                and np.array_equal(api["max_norm"].to_numpy(np.float32),
                                   duck["max_norm"].to_numpy(np.float32)))
    else:
        a = api.sort_values(KEYS).reset_index(drop=True)
        d = duck.sort_values(KEYS).reset_index(drop=True)
        same = len(a) == len(d) and all(
            np.array_equal(a[c].to_numpy(), d[c].to_numpy(), equal_nan=c in ("mean", "norm"))
            if c in ("mean", "norm") else (a[c].astype(str) == d[c].astype(str)).all()
            for c in a.columns)
    if not same:
        sys.exit(f"{kind}: the query API and DuckDB disagree")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", type=Path, help="an existing group (else a synthetic one)")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    path = a.path
    if path is None:
        sys.path.insert(0, str(Path(__file__).parent))
        from make_synthetic_group import build

        path = build(Path(tempfile.mkdtemp()) / "group", a.trials, a.steps, a.nodes, 100, 20)
    size = sum(f.stat().st_size for f in path.rglob("*.parquet"))
    rows = int(duckdb_query(path, "SELECT count(*) AS n FROM tensors")["n"][0])
    trials = len(open_group(path).list_trials())
    print(f"group {path}: {trials} trials, {rows:,} tensor rows, {size / 2**20:.0f} MiB "
          f"of parquet; median of {a.repeat}")
    print(f"{'scan':<20} {'query API s':>12} {'DuckDB s':>10} {'ratio':>7} {'rows':>10}")
    group, db = open_group(path), connect(path)
    for kind, api_fn, query in (("aggregate", api_aggregate, AGGREGATE_SQL),
                                ("materialize", api_materialize, MATERIALIZE_SQL)):
        cold = (lambda fn=api_fn: api_cold(fn, path), lambda q=query: duckdb_query(path, q))
        warm = (lambda fn=api_fn: fn(group), lambda q=query: db.sql(q))
        for mode, (api_run, duck_run) in (("cold", cold), ("opened", warm)):
            api_s, api_result = timed(api_run, a.repeat)
            duck_s, duck_result = timed(duck_run, a.repeat)
            check_equal(kind, api_result, duck_result)
            print(f"{kind + ', ' + mode:<20} {api_s:>12.3f} {duck_s:>10.3f} "
                  f"{api_s / duck_s:>6.1f}x {len(duck_result):>10,}")
    db.close()

if __name__ == "__main__":
    main()
