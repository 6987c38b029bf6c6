"""What every detector shares: the :class:`Finding`, the severities, and :class:`TrialData`,
one trial's statistics read once (``Group.read_statistics``) with its dependency graphs.

A detector is a function ``detect(data: TrialData) -> list[Finding]``; it reads what it
needs from ``data`` (never from files) and explains each finding in one sentence with the
numbers it found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ComgraError, ConfigurationError
from ..query import Graph, Group
from ..vocabulary import (
    BATCH_ABS_MAX,
    BATCH_MEAN,
    CALCULATED,
    FORWARD,
    LOSS,
    NO_BATCH,
    PARAMETER,
    SAMPLE,
    is_gradient,
)

# --- severities, least to most severe ------------------------------------------------
INFO, WARNING, ERROR = "info", "warning", "error"
SEVERITIES: tuple[str, ...] = (INFO, WARNING, ERROR)
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def severity_rank(severity: str) -> int:
    """0 for info, 1 for warning, 2 for error; ConfigurationError for anything else."""
    try:
        return _RANK[severity]
    except KeyError:
        raise ConfigurationError(
            f"unknown severity {severity!r}; choose one of {', '.join(SEVERITIES)}") from None


def at_least(findings: Iterable[Finding], severity: str) -> list[Finding]:
    """The findings of ``severity`` or a more severe one."""
    rank = severity_rank(severity)
    return [f for f in findings if _RANK[f.severity] >= rank]


#: The statistics the detectors read, in one read_statistics call per trial.
NEEDED_STATISTICS: tuple[str, ...] = (
    "mean", "abs_mean", "std", "abs_max", "min", "max", "norm", "nan_count", "inf_count",
    "numel", "update_ratio",
)


@dataclass(frozen=True)
class Finding:
    """One thing a detector found, explained in one sentence, with where to look.

    ``where`` is a selection of the Tensors page (the field names of
    ``app/selection.py``'s CHAIN: trial, type_of_execution, training_step, iteration,
    node, role, recording_type, aggregation, plus statistic); ``numbers`` holds the
    measured values the explanation quotes, for programs.
    """

    kind: str
    severity: str
    trial_id: str
    steps: tuple[int, ...]
    node: str | None
    role: str | None
    recording_type: str | None
    explanation: str
    where: dict[str, Any] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (numbers as plain floats and ints; non-finite as strings)."""
        out = asdict(self)
        out["steps"] = [int(s) for s in self.steps]
        out["where"] = {k: _plain(v) for k, v in self.where.items()}
        out["numbers"] = {k: _plain(v) for k, v in self.numbers.items()}
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if np.isfinite(v) else str(v)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def where(trial_id: str, *, step: int | None = None, type_of_execution: str | None = None,
          iteration: int | None = None, node: str | None = None, role: str | None = None,
          recording_type: str | None = None, aggregation: str | None = None,
          sample_index: int = -1, statistic: str | None = None) -> dict[str, Any]:
    """A selection the GUI can open (None fields are left to the GUI's defaults)."""
    if aggregation == SAMPLE:
        aggregation = f"{SAMPLE}:{int(sample_index)}"
    fields = {"trial": trial_id, "type_of_execution": type_of_execution,
              "training_step": None if step is None else int(step),
              "iteration": None if iteration is None else int(iteration), "node": node,
              "role": role, "recording_type": recording_type, "aggregation": aggregation,
              "statistic": statistic}
    return {k: v for k, v in fields.items() if v is not None}


def fmt(x: float) -> str:
    """A number for an explanation: 3 significant digits, exponent when far from 1."""
    x = float(x)
    if not np.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.3g}"
    return f"{x:.2e}"


class TrialData:
    """One trial's statistics (one ``read_statistics`` call) and its graphs, for detectors.

    ``stats`` is a pandas frame with categorical name columns (cheap to build for
    millions of rows) and the file's float32 statistics (detectors convert what they
    compute with).
    """

    def __init__(self, group: Group, trial_id: str):
        self.group = group
        self.trial_id = trial_id
        table = group.read_statistics(trial_id, statistics=list(NEEDED_STATISTICS),
                                      as_pandas=False)
        # Arrow dictionaries become categoricals: far cheaper than millions of str objects.
        self.stats: pd.DataFrame = table.to_pandas()
        self.steps: pd.DataFrame = group.list_steps(trial_id)
        self._graphs: dict[tuple[str, int], Graph | None] = {}

    def rows(self, *, recording_type: str | None = None, aggregation: str | None = None,
             kinds: Iterable[str] | None = None, gradient: bool | None = None) -> pd.DataFrame:
        """The rows with this recording type (or any gradient type), aggregation and kind."""
        s = self.stats
        mask = np.ones(len(s), bool)
        if recording_type is not None:
            mask &= (s["recording_type"] == recording_type).to_numpy()
        if gradient is not None:
            types = s["recording_type"]
            gradients = [t for t in types.cat.categories if is_gradient(str(t))] \
                if isinstance(types.dtype, pd.CategoricalDtype) else \
                [t for t in types.unique() if is_gradient(str(t))]
            is_grad = types.isin(gradients).to_numpy()
            mask &= is_grad if gradient else ~is_grad
        if aggregation is not None:
            mask &= (s["aggregation"] == aggregation).to_numpy()
        if kinds is not None:
            mask &= s["kind"].isin(list(kinds)).to_numpy()
        return s[mask]

    def graph(self, step: int, iteration: int) -> Graph | None:
        """The dependency graph of a step's iteration (None: not readable)."""
        row = self.steps[(self.steps["training_step"] == step)
                         & (self.steps["iteration"] == iteration)]
        if row.empty:
            return None
        key = (str(row["graph_hash"].iloc[0]), int(iteration))
        if key not in self._graphs:
            try:
                self._graphs[key] = self.group.read_graph(self.trial_id, int(step),
                                                          int(iteration))
            except ComgraError:
                self._graphs[key] = None  # a damaged graph: the GUI's banner reports it
        return self._graphs[key]

    @cached_property
    def step_iterations(self) -> dict[int, list[int]]:
        """Recorded step -> its iterations, ascending."""
        out: dict[int, list[int]] = {}
        for step, iteration in zip(self.steps["training_step"], self.steps["iteration"]):
            out.setdefault(int(step), []).append(int(iteration))
        return {k: sorted(v) for k, v in sorted(out.items())}

    @cached_property
    def type_of_execution(self) -> dict[int, str]:
        """Recorded step -> its type of execution."""
        return {int(s): str(t) for s, t in zip(self.steps["training_step"],
                                                self.steps["type_of_execution"])}

    @cached_property
    def graphs(self) -> list[Graph]:
        """Each distinct dependency graph of the trial once (with the first iteration
        that uses it)."""
        out, seen = [], set()
        for step, iteration, digest in zip(self.steps["training_step"], self.steps["iteration"],
                                           self.steps["graph_hash"]):
            if digest in seen:
                continue
            seen.add(digest)
            graph = self.graph(int(step), int(iteration))
            if graph is not None:
                out.append(graph)
        return out

    @cached_property
    def parameter_shapes(self) -> dict[tuple[str, str], tuple]:
        """(node, role) of each parameter in the graphs -> its shape."""
        return {(n.node, role): shape for g in self.graphs for n in g.nodes
                if n.kind == PARAMETER for role, shape in n.shapes.items()}

    @cached_property
    def per_sample_losses(self) -> list[tuple[str, str]]:
        """(node, role) of the per-sample losses: calculated tensors with one value per
        sample that a loss node depends on directly and whose batch mean the loss is
        proportional to (the tutorial's ``loss_per_sample``; a prediction or a target
        that also feeds the loss is not)."""
        batched = self.rows(recording_type=FORWARD, aggregation=BATCH_MEAN, kinds=(CALCULATED,))
        single = batched[batched["numel"] == 1]
        candidates = {(str(n), str(r)) for n, r in zip(single["node"], single["role"])}
        losses = self.rows(recording_type=FORWARD, aggregation=NO_BATCH, kinds=(LOSS,))
        found: list[tuple[str, str]] = []
        for graph in self.graphs:
            nodes = {n.name: n for n in graph.nodes}
            for e in graph.edges:
                target, source = nodes.get(e.target), nodes.get(e.source)
                if target is None or source is None or target.kind != LOSS:
                    continue
                key = (source.node, e.source_role)
                if key in candidates and key not in found and self._proportional(
                        single, key, losses, (target.node, e.target_role)):
                    found.append(key)
        return found

    @staticmethod
    def _proportional(single: pd.DataFrame, key: tuple[str, str], losses: pd.DataFrame,
                      loss_key: tuple[str, str]) -> bool:
        """Whether the loss is a positive multiple (the same at every step: a mean or a
        sum) of the batch mean of ``key``."""
        a = single[(single["node"] == key[0]).to_numpy() & (single["role"] == key[1]).to_numpy()]
        b = losses[(losses["node"] == loss_key[0]).to_numpy()
                   & (losses["role"] == loss_key[1]).to_numpy()]
        joined = a[["training_step", "iteration", "mean"]].merge(
            b[["training_step", "iteration", "mean"]], on=["training_step", "iteration"])
        x, y = joined["mean_x"].to_numpy(np.float64), joined["mean_y"].to_numpy(np.float64)
        ok = np.isfinite(x) & np.isfinite(y) & (np.abs(x) > 1e-12)
        if not ok.any():
            return False
        ratio = y[ok] / x[ok]
        return bool(np.all(ratio > 0) and np.ptp(ratio) <= 1e-3 * np.abs(ratio).max())

    def unit_values(self, step: int, iteration: int, node: str, role: str,
                    aggregation: str = BATCH_ABS_MAX) -> np.ndarray | None:
        """Per-unit values of a batch aggregate at one step (one tensor read; the
        statistics alone do not say which unit is zero)."""
        try:
            record = self.group.read_tensor(self.trial_id, int(step), int(iteration), node,
                                            role, FORWARD, aggregation)
        except ComgraError:
            return None
        if record.values is None:
            return None
        return np.asarray(record.values, dtype=np.float64).reshape(-1)


def detect_all(data: TrialData, detectors: Mapping[str, Any]) -> list[Finding]:
    """Every detector's findings for one trial, most severe first, then by step."""
    findings: list[Finding] = []
    for detector in detectors.values():
        findings.extend(detector(data))
    return sort_findings(findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-_RANK[f.severity], f.trial_id,
                                           f.steps[0] if f.steps else -1, f.kind))

