"""Damaged recordings for the tests of the GUI and the query API (issue 20, item 9).

Starts from a group the real recorder wrote (tests/conftest.py ``record_tiny_group``) and
damages it the way disks, copy tools and careless hands do: a tensors shard whose footer
is intact but whose data pages are not, and a graph file of valid JSON but another
structure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from comgra_like.format.files import LOCAL
from comgra_like.format.layout import part_name

FIRST_TRIAL = "trial_a"


def split_tensor_shards(trial_dir: Path) -> dict[int, Path]:
    """Rewrite a trial's tensors as one shard per recorded step (as a long run flushes
    them), with the writer's own helper; training step -> its shard."""
    folder = trial_dir / "tensors"
    sources = sorted(folder.glob("*.parquet"))
    table = pq.read_table(sources)
    for source in sources:
        source.unlink()
    shards = {}
    for seq, step in enumerate(sorted(set(table["training_step"].to_pylist()))):
        shards[step] = folder / part_name(seq)
        LOCAL.write_parquet(shards[step], table.filter(pc.equal(table["training_step"], step)))
    return shards


def corrupt_data_pages(path: Path) -> None:
    """Scramble the middle half of a parquet file's data pages in place; the footer (and
    so the step range the reader indexes) stays intact."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    start, end = 4, len(data) - footer
    for i in range(start + (end - start) // 4, start + 3 * (end - start) // 4):
        data[i] = (data[i] * 7 + 13) % 256
    path.write_bytes(bytes(data))


def graph_path(trial_dir: Path, training_step: int, iteration: int) -> Path:
    """The graph file a recorded step and iteration uses."""
    steps = pq.read_table(sorted((trial_dir / "steps").glob("*.parquet"))).to_pylist()
    digest = next(
        r["graph_hash"]
        for r in steps
        if r["training_step"] == training_step and r["iteration"] == iteration
    )
    return trial_dir / "graphs" / f"{digest}.json"


def damaged_copy(tiny_group: Path, target: Path) -> dict[str, Path]:
    """A copy of the tiny group whose first trial has one tensors shard per step, the
    shard of step 0 with corrupt data pages, and the graph of iteration 0 (every step's)
    a JSON list. Returns ``group``, ``trial``, ``shard`` and ``graph`` paths and the
    per-step ``shards``."""
    group = target / tiny_group.name
    shutil.copytree(tiny_group, group)
    trial = group / "trials" / FIRST_TRIAL
    shards = split_tensor_shards(trial)
    corrupt_data_pages(shards[0])
    graph = graph_path(trial, 0, 0)
    graph.write_text(json.dumps(["not", "a", "graph"]))
    return {"group": group, "trial": trial, "shard": shards[0], "graph": graph, "shards": shards}
