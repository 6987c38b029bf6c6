"""Where everything of a recording lives: the one place the folder layout is spelled out.

A *group* folder holds one folder per *trial*::

    <group>/trials/<trial_id>/
        trial.json                    schema_version, settings, status
        modules.json                  module and parameter tree
        notes/part-<seq>.parquet      notes (older recordings: notes.jsonl)
        graphs/<sha256>.json          dependency-graph structures, content-addressed
        steps/part-<seq>.parquet      one row per recorded step x iteration
        tensors/part-<seq>.parquet    statistics and per-neuron values
        kpis/part-<seq>.parquet       KPI points
        histograms/part-<seq>.parquet watch(): one histogram per module tensor and step
        module_steps/part-<seq>.parquet  watch(): the module graph hash per step
        metrics/part-<seq>.parquet    per-module metrics (Taiyi, monitorch) on their schedule
        module_graphs/<sha256>.json   watch(): module graph structures, content-addressed
        watch.json                    watch(): which modules were hooked, skipped and why

Shards are written under a name starting with ``.`` (readers skip such names) and
renamed into place, never modified afterwards. ``<seq>`` has 8 digits and grows strictly
per folder. Compaction replaces ``part-<a>`` ... ``part-<b>`` by one
``compact-<a>-<b>.parquet``. docs/FORMAT.md is the contract in prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TRIALS_DIR = "trials"
TRIAL_JSON = "trial.json"
MODULES_JSON = "modules.json"
WATCH_JSON = "watch.json"  # the watch report (comgra_like.watch)
GRAPHS_DIR = "graphs"
MODULE_GRAPHS_DIR = "module_graphs"  # watch(): module graph structures
NOTES_DIR = "notes"
LEGACY_NOTES_JSONL = "notes.jsonl"  # notes of recordings made before notes were shards

#: The parquet tables of a trial, each a folder of shards.
TABLES: tuple[str, ...] = ("steps", "tensors", "kpis", "histograms", "module_steps",
                           "metrics")
STEPS, TENSORS, KPIS, HISTOGRAMS, MODULE_STEPS, METRICS = TABLES  # their names (folders)

PART_RE = re.compile(r"^part-(\d{8})\.parquet\Z")
COMPACT_RE = re.compile(r"^compact-(\d{8})-(\d{8})\.parquet\Z")
GRAPH_RE = re.compile(r"^([0-9a-f]{64})\.json\Z")


def part_name(seq: int) -> str:
    return f"part-{seq:08d}.parquet"


def compact_name(first: int, last: int) -> str:
    return f"compact-{first:08d}-{last:08d}.parquet"


def graph_name(digest: str) -> str:
    return f"{digest}.json"


def is_hidden(name: str) -> bool:
    """Files being written (and anything else a reader must not look at)."""
    return name.startswith(".")


def shard_range(name: str) -> tuple[int, int] | None:
    """The sequence numbers a shard file holds, or None for a name that is no shard."""
    m = PART_RE.match(name)
    if m:
        n = int(m.group(1))
        return n, n
    m = COMPACT_RE.match(name)
    if m:
        return int(m.group(1)), int(m.group(2))
    return None


def trials_dir(group: Path) -> Path:
    return Path(group) / TRIALS_DIR


@dataclass(frozen=True)
class TrialLayout:
    """The paths of one trial's files."""

    root: Path

    @classmethod
    def of(cls, group: Path, trial_id: str) -> TrialLayout:
        return cls(trials_dir(group) / trial_id)

    @property
    def trial_id(self) -> str:
        return self.root.name

    @property
    def trial_json(self) -> Path:
        return self.root / TRIAL_JSON

    @property
    def modules_json(self) -> Path:
        return self.root / MODULES_JSON

    @property
    def watch_json(self) -> Path:
        return self.root / WATCH_JSON

    @property
    def graphs(self) -> Path:
        return self.root / GRAPHS_DIR

    def graph(self, digest: str) -> Path:
        return self.root / GRAPHS_DIR / graph_name(digest)

    def module_graph(self, digest: str) -> Path:
        return self.root / MODULE_GRAPHS_DIR / graph_name(digest)

    @property
    def notes(self) -> Path:
        return self.root / NOTES_DIR

    @property
    def legacy_notes(self) -> Path:
        return self.root / LEGACY_NOTES_JSONL

    def table(self, kind: str) -> Path:
        """The folder of a table's shards (``kind`` in TABLES, or ``notes``)."""
        return self.root / kind


def live_shards(names) -> list[str]:
    """The shard names a reader should use, in sequence order: those no compacted file
    supersedes (other names are left out).

    A compaction writes ``compact-<a>-<b>`` before it deletes the sources, so a reader
    that lists the folder in between sees both; the sources are then ignored.
    """
    ranges = {n: r for n in names if (r := shard_range(n)) is not None}
    compacts = [r for n, r in ranges.items() if n.startswith("compact-")]
    keep = []
    for name, (a, b) in ranges.items():
        covered = any(c <= a and b <= d and (c, d) != (a, b) for c, d in compacts)
        if name.startswith("part-") and any(c <= a <= d for c, d in compacts):
            covered = True
        if not covered:
            keep.append(name)
    return sorted(keep, key=lambda n: ranges[n])


def lock_name(trial_id: str) -> str:
    """The lock file of a trial being recorded: next to its folder, hidden from readers."""
    return f".{trial_id}.lock"


def trial_lock(group: Path, trial_id: str) -> Path:
    """``<group>/trials/.<trial_id>.lock`` (see docs/FORMAT.md, "One recorder per trial")."""
    return trials_dir(group) / lock_name(trial_id)
