"""The values the query API hands out: small, immutable, and readable when printed.

Their fields are the contract of docs/QUERY_API.md; the words are those of
docs/FORMAT.md and ``comgra_like.vocabulary``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import NotFoundError


@dataclass(frozen=True)
class SkippedFile:
    """A file (or the rows of one) that the reader left out, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class TrialChange:
    """What one refresh found new in a trial it knew already."""

    new_steps: list[int] = field(default_factory=list)
    new_graphs: int = 0
    kpis_changed: bool = False
    notes_changed: bool = False
    status_changed: bool = False
    repaired_files: int = 0  # damaged tensors shards that changed since and read again
    modules_changed: bool = False


@dataclass(frozen=True)
class RefreshReport:
    """The answer of ``Group.refresh()``."""

    version: int
    new_trials: list[str]
    changed_trials: dict[str, TrialChange]
    skipped: list[SkippedFile]

    @property
    def changed(self) -> bool:
        return bool(self.new_trials or self.changed_trials or self.skipped)


@dataclass(frozen=True)
class TrialInfo:
    trial_id: str
    status: str
    created: float
    schema_version: int
    settings: dict
    versions: dict
    config: dict = field(default_factory=dict)  # the trial's hyperparameters ({}: none)


@dataclass(frozen=True)
class GraphNode:
    name: str  # unique key in this graph (import nodes: "<node>@<iteration>")
    node: str  # the node name the data is stored under
    kind: str
    roles: tuple[str, ...]
    tensor_names: dict[str, str]
    shapes: dict[str, tuple]
    iteration: int
    is_import: bool
    module_group: str | None
    alias_of: dict[str, tuple] = field(default_factory=dict)  # role -> (node, role, iteration)


@dataclass(frozen=True)
class GraphEdge:
    source: str
    target: str
    source_role: str
    target_role: str


@dataclass(frozen=True)
class Graph:
    graph_hash: str
    iteration: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]

    def node(self, name: str) -> GraphNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise NotFoundError(f"no node {name!r} in this graph")

    def __repr__(self) -> str:  # hundreds of nodes: say what it is, not all of it
        return (f"Graph({self.graph_hash[:12]}…, iteration={self.iteration}, "
                f"{len(self.nodes)} nodes, {len(self.edges)} edges)")


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    full_name: str
    shape: tuple
    numel: int


@dataclass(frozen=True)
class ModuleInfo:
    name: str
    parent: str | None
    parameters: list[ParameterInfo]
    num_parameters_total: int


@dataclass(frozen=True)
class Note:
    index: int  # position among the trial's notes, oldest first
    text: str
    wall_time: float
    training_step: int | None = None
    rank: int = 0  # the torch.distributed rank that took the note (0: single process)


@dataclass(frozen=True)
class TensorRecord:
    trial_id: str
    training_step: int
    iteration: int
    node: str
    role: str
    tensor_name: str
    kind: str
    recording_type: str
    aggregation: str
    sample_index: int
    shape: tuple
    stats: dict[str, float]
    values: np.ndarray | None

    def __repr__(self) -> str:  # the values can be millions of numbers
        sample = f"[{self.sample_index}]" if self.sample_index >= 0 else ""
        values = "no values" if self.values is None else f"values {self.values.shape}"
        return (f"TensorRecord({self.trial_id!r} step {self.training_step} iteration "
                f"{self.iteration}: {self.node}.{self.role} {self.recording_type} "
                f"{self.aggregation}{sample}, shape {self.shape}, "
                f"mean={self.stats.get('mean', float('nan')):.4g}, {values})")
