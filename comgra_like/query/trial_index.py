"""What the query index holds of one trial, and the helpers its parts share.

:class:`TrialIndex` is the metadata of a trial as of the last update (steps, KPIs, notes,
graph structures, modules, which tensors shard holds which steps) and the bookkeeping of
what was read; :class:`TensorFile` a tensors shard with the steps it holds (from its
footer). ``query/index.py`` (the update) and ``query/index_tables.py`` (the shard tables)
fill them in; the provider reads them. The contract they follow is index.py's docstring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.layout import TrialLayout, graph_name
from ..format.schema import RANK
from .listing import GroupListing
from .types import ModuleInfo, Note, RefreshReport, TrialInfo

STEP_KEY = ["training_step", "iteration"]
KPI_KEY = ["kpi_group", "kpi_name", "type_of_execution", "timepoint"]
# Each rank of a distributed recording has its own rows of every step (the rank comes
# from the file's name, docs/FORMAT.md "Recording ranks"): repeats are within one rank.
RANK_STEP_KEY = [*STEP_KEY, RANK]
#: Step numbers of a file whose row groups have no statistics: consulted for every step.
UNKNOWN_RANGE = (-(2**62), 2**62)
#: At most this many graph files' checked JSON are kept to skip parsing repeats.
CHECKED_GRAPHS = 4096
#: Why a symbolic link inside a group is skipped (format/confine.py).
LINK_REASON = ("a symbolic link, not followed: comgra_like reads nothing through links "
               "inside a group (they could lead anywhere); replace it by the folder or "
               "file itself")


Signature = tuple[int, int]


def signature(path: Path) -> Signature | None:
    """(modification time, size) of a file, None if it cannot be looked at: a file that
    changes (a rewrite, a copy tool, a repair) gets a new signature."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def reason_of(exc: BaseException) -> str:
    text = " ".join(str(exc).split())  # pyarrow's messages span lines
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A frame with plain ``str`` columns where the table has dictionary columns."""
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        cols[name] = col
    return pa.table(cols).to_pandas()


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame({
        "training_step": pd.Series(dtype="int64"), "type_of_execution": pd.Series(dtype="object"),
        "iteration": pd.Series(dtype="int32"), "graph_hash": pd.Series(dtype="object"),
        "batch_size": pd.Series(dtype="int32"), "sample_indices": pd.Series(dtype="object"),
        "sample_categories": pd.Series(dtype="object"), "wall_time": pd.Series(dtype="float64"),
        RANK: pd.Series(dtype="int64"),
    })


def empty_kpis() -> pd.DataFrame:
    return pd.DataFrame({
        "kpi_group": pd.Series(dtype="object"), "kpi_name": pd.Series(dtype="object"),
        "type_of_execution": pd.Series(dtype="object"), "timepoint": pd.Series(dtype="int64"),
        "value": pd.Series(dtype="float64"), "wall_time": pd.Series(dtype="float64"),
        RANK: pd.Series(dtype="int64"),
    })


EMPTY_STEPS = empty_steps()
EMPTY_KPIS = empty_kpis()


@dataclass(frozen=True)
class TensorFile:
    """A tensors shard and the training steps it holds (from its footer alone)."""

    path: Path
    min_step: int
    max_step: int
    # The steps served from it: all of them, unless it stands in for files a compaction
    # merged since the last update (then only theirs: the rest was never indexed).
    first_served: int = UNKNOWN_RANGE[0]
    last_served: int = UNKNOWN_RANGE[1]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def served(self) -> tuple[int, int]:
        return max(self.min_step, self.first_served), min(self.max_step, self.last_served)

    def serves(self, step: int) -> bool:
        lo, hi = self.served
        return lo <= step <= hi


def step_range(meta: pq.FileMetaData) -> tuple[int, int]:
    """The training steps of a parquet file, from its row groups' statistics."""
    idx = meta.schema.to_arrow_schema().get_field_index("training_step")
    lo, hi = None, None
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(idx).statistics
        if st is None or not st.has_min_max:
            return UNKNOWN_RANGE
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    if lo is None:
        return 1, 0  # empty file
    return int(lo), int(hi)


class TrialIndex:
    """What the last update read of one trial folder.

    Readers use the attributes without a lock: an update replaces each of them whole
    (``steps``, ``kpis``, ``notes``, ``tensor_files`` ...), never changes one in place.
    """

    def __init__(self, root: Path):
        self.layout = TrialLayout(root)
        self.info: TrialInfo | None = None
        # shared empty frames (never changed in place, like every frame here): building
        # two per trial took 6 ms of the 15 ms a trial of a few steps took to index
        self.steps: pd.DataFrame = EMPTY_STEPS
        self.kpis: pd.DataFrame = EMPTY_KPIS
        self.notes: tuple[Note, ...] = ()
        self.graphs: dict[str, dict] = {}  # digest -> the file's JSON
        self.tensor_files: dict[str, TensorFile] = {}  # name -> file, in sequence order
        # (table, rank) -> (the frame it was made from, its rows of that rank without the
        # rank column): Group.list_steps / read_kpis made them at every call (0.6 ms)
        self.rank_frames: dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]] = {}
        self.modules: list[ModuleInfo] | None = None
        self.modules_problem: str | None = None  # why modules.json cannot be used
        # Damaged files, "<kind>/<name>" -> (signature when found damaged, reason): looked
        # at again only when their size or modification time changes.
        self.damaged: dict[str, tuple[Signature | None, str]] = {}
        self.damaged_tensor_files: dict[str, TensorFile] = {}  # their step ranges
        # The index's bookkeeping (GroupIndex's update alone changes it): names read (or
        # found damaged) per folder with their sequence ranges, graph files read, the
        # signatures of trial.json and modules.json when read, the notes read so far.
        self.seen: dict[str, dict[str, tuple[int, int]]] = {}
        self.seen_graphs: set[str] = set()
        self.info_signature: Signature | None = None
        self.modules_signature: Signature | None = None
        self.legacy_notes: list[Note] = []
        self.legacy_offset = 0
        self.shard_notes: list[tuple[str, float, int | None, int]] = []

    @property
    def trial_id(self) -> str:
        return self.layout.trial_id

    @property
    def path(self) -> Path:
        return self.layout.root

    def steps_holding(self, step: int) -> list[TensorFile]:
        return [f for f in self.tensor_files.values() if f.serves(step)]

    def damage_of(self, kind: str, name: str) -> str | None:
        entry = self.damaged.get(f"{kind}/{name}")
        return None if entry is None else entry[1]


def covers(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def covered_by(rng: tuple[int, int], seen: Iterable[tuple[int, int]]) -> bool:
    """Whether every sequence number of ``rng`` is in a range read already."""
    inside = sorted(r for r in seen if r[1] >= rng[0] and r[0] <= rng[1])
    expect = rng[0]
    for a, b in inside:
        if a > expect:
            return False
        expect = max(expect, b + 1)
    return expect > rng[1]


def overlaps_partly(rng: tuple[int, int], seen: Iterable[Any]) -> bool:
    """Whether ``rng`` shares sequence numbers with ranges read already without being
    covered by them."""
    seen = list(seen)
    return (any(r[1] >= rng[0] and r[0] <= rng[1] for r in seen)
            and not covered_by(rng, seen))


def graph_key(digest: str) -> str:
    """The key of a graph file in :attr:`TrialIndex.damaged`."""
    return f"graphs/{graph_name(digest)}"


@dataclass
class Update:
    """What one :meth:`GroupIndex.update` changed, for the provider's cache."""

    report: RefreshReport
    listing: GroupListing | None = None  # what the update listed (the others read it too)
    forgotten_trials: list[str] = field(default_factory=list)  # deleted folders
    gone_files: list[tuple[str, str]] = field(default_factory=list)  # (trial, tensors file)
    repaired: list[tuple[str, int, int]] = field(default_factory=list)  # (trial, steps lo, hi)
