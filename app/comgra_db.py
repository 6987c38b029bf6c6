"""comgra 0.11.5's tensor database of one training step (:class:`PseudoDb`: what a
plugin's ``db.get_matches`` sees), built on demand from the query API. The records and
their keys are described in ``comgra_plugins.py``'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from comgra_like import vocabulary as vocab
from comgra_like.errors import ConfigurationError, NotFoundError, StorageError

from .comgra_names import (
    ATTRIBUTES,
    DATA,
    META,
    NODE_PREFIX,
    NOT_APPLICABLE,
    STAT_ITEMS,
    Naming,
    comgra_batch_aggregation,
    comgra_recording_type,
    stored_location,
)

__all__ = ["PseudoDb", "TensorRecordings", "read_graphs", "sample_categories"]

_ROW_ATTRIBUTES = ATTRIBUTES[:7]  # what a record shares with the others of its tensor


@dataclass(frozen=True)
class _Location:
    """Where one (iteration, node, role) of comgra's view is stored in ours."""

    iteration: int
    node_name: str  # comgra's name
    role: str  # comgra's role
    stored_node: str
    stored_role: str
    stored_iteration: int
    kind: str
    graph_shape: tuple | None  # the graph's shape, -1 in the batch dimension


@dataclass(frozen=True)
class _Row:
    """One stored tensor record as seen at one location: the records of one key prefix."""

    key: tuple  # the first 7 attribute values
    location: _Location
    recording_type: str
    aggregation: str
    sample_index: int
    shape: tuple  # without the batch dimension
    svd: bool


class PseudoDb:
    """comgra's tensor database of one training step (``get_matches``), read on demand.

    The records of a stored tensor are built when a query first needs them and kept;
    keys for ``possible_attribute_values`` of tensors not read yet come from their
    shape and kind.
    """

    def __init__(self, query: Any, trial_id: str, training_step: int):
        self.attributes: list[str] = list(ATTRIBUTES)
        self._query = query
        self._trial = trial_id
        self._step = int(training_step)
        self._records: dict[_Row, list[tuple[tuple, Any]]] = {}
        self.graphs = read_graphs(query, trial_id, self._step)
        self.naming = Naming(self.graphs)
        self._rows = _build_rows(query, trial_id, self._step, self.graphs, self.naming)

    def get_matches(
        self, filters: Mapping[str, Any]
    ) -> tuple[list[tuple[tuple, Any]], dict[str, set]]:
        """Records equal to every filter, and each attribute's values that would match
        with all other filters kept (comgra's ``PseudoDb.get_matches``)."""
        unknown = sorted(set(filters) - set(ATTRIBUTES))
        if unknown:
            raise ConfigurationError(
                f"db.get_matches: unknown filter key(s) {unknown}; comgra's filter keys "
                f"are {list(ATTRIBUTES)}."
            )
        wanted = [(ATTRIBUTES.index(k), v) for k, v in filters.items()]
        row_filters = [(i, v) for i, v in wanted if i < len(_ROW_ATTRIBUTES)]
        item_filters = [(i, v) for i, v in wanted if i >= len(_ROW_ATTRIBUTES)]
        matches: list[tuple[tuple, Any]] = []
        possible: dict[str, set] = {name: set() for name in ATTRIBUTES}
        for row in self._rows:
            row_misses = sum(row.key[i] != v for i, v in row_filters)
            if row_misses > 1:
                continue
            keys: Iterable[tuple[tuple, Any]]
            if row_misses == 0:
                keys = self._read(row)
            elif row in self._records:
                keys = self._records[row]
            else:
                keys = ((key, None) for key in _expected_keys(row))
            for key, value in keys:
                misses = row_misses + sum(key[i] != v for i, v in item_filters)
                if misses == 0:
                    matches.append((key, value))
                if misses <= 1:
                    for name, attribute in zip(ATTRIBUTES, key):
                        possible[name].add(attribute)
        return matches, possible

    def _read(self, row: _Row) -> list[tuple[tuple, Any]]:
        records = self._records.get(row)
        if records is None:
            records = self._records[row] = _records_of(self._query, self._trial, self._step, row)
        return records

    def __repr__(self) -> str:
        return f"PseudoDb({self._trial!r}, step {self._step}, {len(self._rows)} tensors)"


@dataclass
class TensorRecordings:
    recordings: PseudoDb | None = None


def read_graphs(query: Any, trial_id: str, step: int) -> dict[int, Any]:
    """The dependency graph of every iteration of the step (by iteration, in order)."""
    steps = query.list_steps(trial_id)
    iterations = sorted(int(i) for i in steps.loc[steps["training_step"] == step, "iteration"])
    graphs = {}
    for iteration in iterations:
        try:
            graphs[iteration] = query.read_graph(trial_id, step, iteration)
        except (NotFoundError, StorageError):  # not written yet, or damaged (reported)
            continue
    return graphs


def _build_rows(
    query: Any, trial_id: str, step: int, graphs: Mapping[int, Any], naming: Naming
) -> list[_Row]:
    steps = query.list_steps(trial_id)
    steps = steps[steps["training_step"] == step]
    locations: dict[tuple, _Location] = {}
    for iteration, graph in graphs.items():
        for node in graph.nodes:
            for role in node.roles:
                stored_node, stored_role, stored_iteration = stored_location(node, role)
                shape = node.shapes.get(role)
                for node_name, comgra_role_name in naming.names(node, role, iteration):
                    locations.setdefault((iteration, node_name, comgra_role_name), _Location(
                        iteration, node_name, comgra_role_name, stored_node, stored_role,
                        stored_iteration, str(node.kind),
                        tuple(shape) if shape is not None else None,
                    ))

    listing = query.list_tensors(trial_id, step)
    by_stored: dict[tuple, list[tuple]] = {}
    columns = ("iteration", "node", "role", "kind", "recording_type", "aggregation",
               "sample_index", "shape")
    for it, node, role, kind, rt, agg, sample, shape in zip(*(listing[c].tolist() for c in columns)):
        stored_key = (int(it), str(node), str(role))
        by_stored.setdefault(stored_key, []).append((str(kind), str(rt), str(agg), int(sample),
                                                     tuple(shape)))
        if int(it) >= 0:  # a tensor no graph shows: under its own name, as comgra would
            own = (int(it), NODE_PREFIX + str(node), str(role))
            if own not in locations:
                locations[own] = _Location(int(it), own[1], own[2], str(node), str(role),
                                           int(it), str(kind), None)

    svd = _svd_rows(query, trial_id, step)
    categories, batch_size = sample_categories(steps)
    rows: list[_Row] = []
    for location in locations.values():
        stored_key = (location.stored_iteration, location.stored_node, location.stored_role)
        for kind, rt, agg, sample, shape in by_stored.get(stored_key, ()):
            key = (
                step,
                comgra_recording_type(rt),
                comgra_batch_aggregation(agg, sample, categories, batch_size),
                location.iteration,
                location.node_name,
                location.role,
                DATA,
            )
            location_with_kind = location if location.kind == kind else _with_kind(location, kind)
            rows.append(_Row(key, location_with_kind, rt, agg, sample, shape,
                             (*stored_key, rt, agg, sample) in svd))
    rows.extend(_meta_rows(step, locations.values(), by_stored))
    return rows


def _with_kind(location: _Location, kind: str) -> _Location:
    return _Location(location.iteration, location.node_name, location.role, location.stored_node,
                     location.stored_role, location.stored_iteration, kind, location.graph_shape)


def _svd_rows(query: Any, trial_id: str, step: int) -> set[tuple]:
    """The stored tensors of the step with a largest singular value (comgra's 'svd')."""
    frame = query.read_statistics(trial_id, steps=(step, step), statistics=["svd_top"])
    frame = frame[np.isfinite(frame["svd_top"].to_numpy(dtype=float))]
    columns = ("iteration", "node", "role", "recording_type", "aggregation", "sample_index")
    return {
        (int(it), str(n), str(r), str(rt), str(a), int(s))
        for it, n, r, rt, a, s in zip(*(frame[c].tolist() for c in columns))
    }


def sample_categories(steps: Any) -> tuple[dict[int, str], int]:
    if steps.empty:
        return {}, 0
    first = steps.iloc[0]
    indices = [int(i) for i in list(first["sample_indices"])]
    categories = [str(c) for c in list(first["sample_categories"])]
    named = {i: c for i, c in zip(indices, categories)}
    return (named if any(named.values()) else {}), int(first["batch_size"])


def _batch_dimension(location: _Location) -> int | None:
    if location.kind in (vocab.PARAMETER, vocab.LOSS):
        return None
    if location.graph_shape is not None and -1 in location.graph_shape:
        return location.graph_shape.index(-1)
    return 0


def _meta_rows(
    step: int, locations: Iterable[_Location], by_stored: Mapping[tuple, list]
) -> Iterator[_Row]:
    """One row per location for comgra's 'meta_information' records (shape, batch index)."""
    for location in locations:
        stored = by_stored.get(
            (location.stored_iteration, location.stored_node, location.stored_role)
        )
        if not stored:
            continue
        kind, _, _, _, shape = stored[0]
        key = (step, NOT_APPLICABLE, NOT_APPLICABLE, location.iteration, location.node_name,
               location.role, META)
        yield _Row(key, _with_kind(location, kind), "", "", -1, shape, False)


def _neuron_labels(shape: tuple) -> list[str]:
    if not shape:
        return [""]
    return [", ".join(str(i) for i in index) for index in np.ndindex(*shape)]


def _items_of(row: _Row) -> list[str]:
    if row.location.kind == vocab.LOSS and not row.shape:
        return ["single_value"]
    items = list(STAT_ITEMS)
    if row.svd:
        items.append("svd")
    return items


def _expected_keys(row: _Row) -> Iterator[tuple]:
    """The keys of a row's records before it is read (its shape and kind decide them)."""
    if row.key[6] == META:
        yield (*row.key, "tensor_shape", None)
        yield (*row.key, "index_of_batch_dimension", None)
        return
    items = _items_of(row)
    for item in items:
        yield (*row.key, item, None)
    if items != ["single_value"] and row.location.kind != vocab.PARAMETER:
        for label in _neuron_labels(row.shape):
            yield (*row.key, "neuron", label)


def _records_of(query: Any, trial_id: str, step: int, row: _Row) -> list[tuple[tuple, Any]]:
    if row.key[6] == META:
        shape, batch_index = list(row.shape), _batch_dimension(row.location)
        if batch_index is not None:
            steps = query.list_steps(trial_id)
            sizes = steps.loc[steps["training_step"] == step, "batch_size"].tolist()
            shape.insert(min(batch_index, len(shape)), int(sizes[0]) if sizes else -1)
        return [((*row.key, "tensor_shape", None), shape),
                ((*row.key, "index_of_batch_dimension", None), batch_index)]
    location = row.location
    record = query.read_tensor(
        trial_id, step, location.stored_iteration, location.stored_node, location.stored_role,
        row.recording_type, row.aggregation, row.sample_index,
    )
    items = _items_of(row)
    if items == ["single_value"]:
        value = (
            float(np.asarray(record.values).reshape(-1)[0])
            if record.values is not None and np.asarray(record.values).size
            else float(record.stats["mean"])
        )
        return [((*row.key, "single_value", None), value)]
    records: list[tuple[tuple, Any]] = []
    for item in items:
        stat = "svd_top" if item == "svd" else item
        records.append(((*row.key, item, None), float(record.stats[stat])))
    if record.values is not None and location.kind != vocab.PARAMETER:
        flat = np.asarray(record.values, dtype=float).reshape(-1)
        for label, value in zip(_neuron_labels(tuple(record.shape)), flat.tolist()):
            records.append(((*row.key, "neuron", label), value))
    return records
