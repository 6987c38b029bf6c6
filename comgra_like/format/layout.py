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
per folder and rank. Compaction replaces ``part-<a>`` ... ``part-<b>`` by one
``compact-<a>-<b>.parquet``.

Under ``torch.distributed`` every recording rank has its own writer and its own names:
rank 0 writes the names above (a single-process recording is rank 0), rank ``r > 0``
writes ``part-r<rank>-<seq>.parquet`` and ``compact-r<rank>-<a>-<b>.parquet`` (the rank
with at least 4 digits). No two ranks ever write one shard name, so they need no lock
between them. :func:`shard_range` places every rank's sequence numbers in a range of
their own (``rank * SEQ_SPAN + seq``): code that orders and covers ranges works for all
ranks of a folder at once. docs/FORMAT.md is the contract in prose.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError

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

PART_RE = re.compile(r"^part-(?:r(\d{4,9})-)?(\d{8})\.parquet\Z")
COMPACT_RE = re.compile(r"^compact-(?:r(\d{4,9})-)?(\d{8})-(\d{8})\.parquet\Z")
GRAPH_RE = re.compile(r"^([0-9a-f]{64})\.json\Z")
#: Sequence numbers have 8 digits: rank r's shards hold ``shard_range`` values
#: ``r * SEQ_SPAN + seq``, so the ranges of two ranks never overlap.
SEQ_SPAN = 10**8
MAX_RANK = 10**9 - 1


def _rank_part(rank: int) -> str:
    if not 0 <= rank <= MAX_RANK:
        raise ConfigurationError(f"rank {rank} is outside 0..{MAX_RANK}")
    return "" if rank == 0 else f"r{rank:04d}-"


def part_name(seq: int, rank: int = 0) -> str:
    """``part-<seq>.parquet`` (rank 0) or ``part-r<rank>-<seq>.parquet``."""
    return f"part-{_rank_part(rank)}{seq:08d}.parquet"


def compact_name(first: int, last: int, rank: int = 0) -> str:
    """``compact-<first>-<last>.parquet`` (rank 0) or ``compact-r<rank>-<first>-<last>...``;
    ``first`` and ``last`` are the rank's own sequence numbers."""
    return f"compact-{_rank_part(rank)}{first:08d}-{last:08d}.parquet"


def graph_name(digest: str) -> str:
    return f"{digest}.json"


def is_hidden(name: str) -> bool:
    """Files being written (and anything else a reader must not look at)."""
    return name.startswith(".")


def shard_seqs(name: str) -> tuple[int, int, int] | None:
    """(rank, first, last) of a shard file, its own sequence numbers; None for a name
    that is no shard. Names without a rank are rank 0's."""
    m = PART_RE.match(name)
    if m:
        n = int(m.group(2))
        return int(m.group(1) or 0), n, n
    m = COMPACT_RE.match(name)
    if m:
        return int(m.group(1) or 0), int(m.group(2)), int(m.group(3))
    return None


def shard_rank(name: str) -> int | None:
    """The rank that wrote a shard file (0 for names without one), None for no shard."""
    seqs = shard_seqs(name)
    return None if seqs is None else seqs[0]


def shard_range(name: str) -> tuple[int, int] | None:
    """The sequence numbers a shard file holds, placed in its rank's own range
    (``rank * SEQ_SPAN + seq``; rank 0's are the plain numbers), or None for a name that
    is no shard."""
    seqs = shard_seqs(name)
    if seqs is None:
        return None
    base = seqs[0] * SEQ_SPAN
    return base + seqs[1], base + seqs[2]


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
    that lists the folder in between sees both; the sources are then ignored. The
    ranges sorted once, each name is looked up by bisection: a folder of a thousand
    ranks' shards and compacted files is sorted out in O(n log n), not O(parts x
    compacts).
    """
    ranges = {n: r for n in names if (r := shard_range(n)) is not None}
    compacts = sorted(((r[0], -r[1]) for n, r in ranges.items() if n.startswith("compact-")))
    starts = [c for c, _ in compacts]
    reach = list(itertools.accumulate((-neg for _, neg in compacts), max))
    keep = []
    for name, (a, b) in ranges.items():
        if name.startswith("compact-"):
            # sorted by (first, -last): the compacts before this one start earlier, or at
            # the same number and reach at least as far; one of them covers it if the
            # farthest reaches its end (an equal range is the same name)
            j = bisect.bisect_left(compacts, (a, -b))
            covered = j > 0 and reach[j - 1] >= b
        else:
            i = bisect.bisect_right(starts, a)  # compacts starting at or before a
            covered = i > 0 and reach[i - 1] >= a
        if not covered:
            keep.append(name)
    return sorted(keep, key=lambda n: ranges[n])


def lock_name(trial_id: str, rank: int = 0) -> str:
    """The lock file of a trial's rank being recorded: next to the trial's folder, hidden
    from readers. ``.<trial_id>.lock`` for rank 0, ``.<trial_id>.lock.r<rank>`` for the
    others (a trial id never ends in ``.lock.r<digits>`` and ``.lock`` at once, so two
    trials' locks never share a name)."""
    return f".{trial_id}.lock" if rank == 0 else f".{trial_id}.lock.r{rank:04d}"


def trial_lock(group: Path, trial_id: str, rank: int = 0) -> Path:
    """``<group>/trials/.<trial_id>.lock[.r<rank>]`` (docs/FORMAT.md, "Recording ranks")."""
    return trials_dir(group) / lock_name(trial_id, rank)
