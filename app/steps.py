"""The recorded steps of one trial as the GUI sees them: a compact, read-only mapping.

A trial of 100,000 steps held as a dict of :class:`StepInfo` objects (a dict of graphs
each) took ~410 bytes a step in Python objects, 41 MB that the cache bound counted as
8. :class:`StepList` keeps numpy columns, one row per step (24 bytes), and what steps
share (their samples and categories, their graphs per iteration) once; a
:class:`StepInfo` is made when a step is asked for. Its :attr:`StepList.nbytes` is what
the cache counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.query.cache import estimate_bytes
from comgra_like.vocabulary import ANY_TYPE

#: Bytes per step of the columns (step number, type, batch size, samples, graphs).
BYTES_PER_STEP = 8 + 4 + 4 + 4 + 4
_OVERHEAD = 2048  # the object, its attributes and its arrays' headers


@dataclass(frozen=True)
class StepInfo:
    """One recorded training step of a trial: its type and the graph of each iteration."""

    training_step: int
    type_of_execution: str
    graph_hashes: Mapping[int, str]
    batch_size: int
    sample_indices: tuple[int, ...]
    sample_categories: Mapping[int, str]  # recorded batch index -> category (dynamic recording)


def _as_list(value: Any) -> list:
    return [] if value is None else list(value)


def _list_key(value: Any) -> Any:
    """A hashable key of a list cell (a numpy array from Arrow, a list, or None), cheap
    for the numeric arrays that most cells are."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.dtype != object:
            return value.dtype.str, value.tobytes()
        return tuple(value.tolist())
    return tuple(value)


class StepList(Mapping[int, StepInfo]):
    """Training step -> :class:`StepInfo` of one trial, ascending, from numpy columns."""

    def __init__(self, steps: np.ndarray, types: np.ndarray, type_names: list[str],
                 batch_sizes: np.ndarray, sample_codes: np.ndarray,
                 samples: list[tuple[tuple[int, ...], Mapping[int, str]]],
                 graph_codes: np.ndarray, graphs: list[Mapping[int, str]]):
        self.steps = steps.astype(np.int64, copy=False)
        self.types = types.astype(np.int32, copy=False)
        self.type_names = type_names
        self.batch_sizes = batch_sizes.astype(np.int32, copy=False)
        self.sample_codes = sample_codes.astype(np.int32, copy=False)
        self.samples = samples  # (sample indices, categories), shared by the steps
        self.graph_codes = graph_codes.astype(np.int32, copy=False)
        self.graphs = graphs  # iteration -> graph hash, shared by the steps
        self.nbytes = step_list_bytes(len(self.steps), samples, graphs, type_names)

    @classmethod
    def empty(cls) -> StepList:
        nothing = np.zeros(0, np.int64)
        return cls(nothing, nothing, [], nothing, nothing, [], nothing, [])

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> StepList:
        """From the steps table (one row per step and iteration, sorted by both): each
        step's type, batch size and samples from its first row, its graphs from all."""
        if not len(frame):
            return cls.empty()
        rows = frame["training_step"].to_numpy(np.int64)
        first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        types, type_names = pd.factorize(frame["type_of_execution"].to_numpy(object)[first],
                                          use_na_sentinel=False)
        batch_sizes = frame["batch_size"].to_numpy()[first]

        # Steps share their samples and categories: each distinct pair is built once.
        sample_column = frame["sample_indices"].to_numpy(object)[first]
        category_column = frame["sample_categories"].to_numpy(object)[first]
        samples: list[tuple[tuple[int, ...], Mapping[int, str]]] = []
        found_samples: dict[tuple, int] = {}
        sample_codes = np.empty(len(first), np.int32)
        for j, cells in enumerate(zip(sample_column, category_column)):
            value = _list_key(cells[0]), _list_key(cells[1])
            code = found_samples.get(value)
            if code is None:
                indices = tuple(int(i) for i in _as_list(cells[0]))
                categories = [str(c) for c in _as_list(cells[1])]
                code = found_samples[value] = len(samples)
                samples.append((indices, MappingProxyType(
                    {i: c for i, c in zip(indices, categories) if c})))
            sample_codes[j] = code

        # The graph of each iteration: steps of one type mostly have the same ones.
        iterations = frame["iteration"].to_numpy(np.int64).tolist()
        digests = frame["graph_hash"].tolist()
        ends = np.r_[first[1:], len(rows)].tolist()
        graphs: list[Mapping[int, str]] = []
        found: dict[tuple, int] = {}
        graph_codes = np.empty(len(first), np.int32)
        for j, (a, b) in enumerate(zip(first.tolist(), ends)):
            key = tuple(zip(iterations[a:b], digests[a:b]))
            code = found.get(key)
            if code is None:
                code = found[key] = len(graphs)
                graphs.append(MappingProxyType({int(i): str(d) for i, d in key}))
            graph_codes[j] = code
        return cls(rows[first], types, [str(t) for t in type_names], batch_sizes,
                   sample_codes, samples, graph_codes, graphs)

    # --- the mapping ---------------------------------------------------------------------

    def _position(self, step: Any) -> int | None:
        try:
            step = int(step)
        except (TypeError, ValueError):
            return None
        i = int(np.searchsorted(self.steps, step))
        return i if i < len(self.steps) and self.steps[i] == step else None

    def _info(self, i: int) -> StepInfo:
        indices, categories = self.samples[self.sample_codes[i]]
        return StepInfo(
            training_step=int(self.steps[i]),
            type_of_execution=self.type_names[self.types[i]],
            graph_hashes=self.graphs[self.graph_codes[i]],
            batch_size=int(self.batch_sizes[i]),
            sample_indices=indices,
            sample_categories=categories,
        )

    def __getitem__(self, step: Any) -> StepInfo:
        i = self._position(step)
        if i is None:
            raise KeyError(step)
        return self._info(i)

    def get(self, step: Any, default: Any = None) -> Any:
        i = self._position(step)
        return default if i is None else self._info(i)

    def __contains__(self, step: object) -> bool:
        return self._position(step) is not None

    def __iter__(self) -> Iterator[int]:
        return iter(self.steps.tolist())

    def __len__(self) -> int:
        return len(self.steps)

    def values(self) -> Iterator[StepInfo]:  # type: ignore[override]
        return (self._info(i) for i in range(len(self.steps)))

    def items(self) -> Iterator[tuple[int, StepInfo]]:  # type: ignore[override]
        return ((int(self.steps[i]), self._info(i)) for i in range(len(self.steps)))

    def __repr__(self) -> str:
        return f"StepList({len(self)} steps, {self.nbytes:,} bytes)"

    # --- what the selectors ask for ------------------------------------------------------

    def types_of_execution(self) -> tuple[str, ...]:
        """The types of execution of the steps, sorted."""
        present = np.unique(self.types).tolist()
        return tuple(sorted(self.type_names[t] for t in present))

    def steps_of(self, type_of_execution: str) -> tuple[int, ...]:
        """The steps of one type of execution (every step for ``ANY_TYPE``), ascending."""
        if type_of_execution == ANY_TYPE:
            return tuple(self.steps.tolist())
        if type_of_execution not in self.type_names:
            return ()
        code = self.type_names.index(type_of_execution)
        return tuple(self.steps[self.types == code].tolist())


def step_list_bytes(steps: int, samples: list, graphs: list, type_names: list[str]) -> int:
    """The size the cache counts for a :class:`StepList`: :data:`BYTES_PER_STEP` a step
    plus what the steps share (its samples, graphs and type names), counted by
    :func:`~comgra_like.query.cache.estimate_bytes`."""
    shared = sum(estimate_bytes(s[0]) + estimate_bytes(s[1]) for s in samples)
    shared += sum(estimate_bytes(g) for g in graphs)
    return BYTES_PER_STEP * steps + shared + estimate_bytes(type_names) + _OVERHEAD
