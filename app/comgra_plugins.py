"""Visualization files written for comgra 0.11.5, run on comgra_like's recordings.

comgra calls ``create_visualization(recordings, type_of_execution, tsc, ngs, db,
training_step_value, type_of_recording_value, batch_aggregation_value, iteration_value,
node_name, role_of_tensor_in_node_value)``. :func:`plugin_style` recognises that
signature (11 positional parameters with exactly these names) next to the native
``create_visualization(ctx)``; :func:`comgra_arguments` builds the 11 arguments for the
current selection from the query API. Nothing here writes or imports torch.

What a comgra plugin gets, in comgra's vocabulary, for the selected trial and step:

- ``db.get_matches(filters)`` (:class:`PseudoDb`): the filter keys are comgra's
  attributes ``training_step``, ``type_of_tensor_recording``, ``batch_aggregation``,
  ``iteration``, ``node_name``, ``role_within_node``, ``record_type``, ``item``,
  ``metadata`` (another key raises ``ConfigurationError``); each filter is compared
  with ``==``. It returns ``(list_of_matches, possible_attribute_values)`` like comgra:
  each match is ``(key, value)`` with ``key`` the 9 attribute values in that order, and
  ``possible_attribute_values`` maps every attribute to the values it could take while
  all other filters still match. ``db.attributes`` lists the attributes.
- the records: ``record_type='data'`` with ``item`` ``mean``, ``abs_mean``, ``std``,
  ``abs_max`` (``metadata`` None), ``svd`` for 2-D parameters (forward), ``neuron`` with
  ``metadata`` the neuron's index as text (``'3'``, ``'1, 2'`` for 2-D; tensors recorded
  with values), ``single_value`` for losses; ``record_type='meta_information'`` with
  ``item`` ``tensor_shape`` (a list, batch dimension included) and
  ``index_of_batch_dimension`` (int or None), whose ``type_of_tensor_recording`` and
  ``batch_aggregation`` are ``'not_applicable'``.
- the vocabulary: ``type_of_tensor_recording`` ``'forward'``, the loss group's own name
  for gradients (comgra_like's ``'gradient:<group>'``) and comgra_like's ``'update'``;
  ``batch_aggregation`` ``'batch_mean'``, ``'batch_abs_max'``, ``'batch_std'``,
  ``'has_no_batch_dimension'`` (comgra_like's ``'none'``) and ``'Sample <i>'`` (``'Sample
  <i> | <category>'`` with comgra's zero padding when the step has sample categories);
  node names with the ``node__`` prefix. As in comgra, a node shown in an iteration's
  graph but stored elsewhere (parameters, initial values, values imported from an
  earlier iteration) is ``node__<name>*old`` in that iteration, its role gets
  ``__from_initialization`` / ``__from_iteration_<k>`` (not for parameters), and data
  of iteration -1 is only found through those names. An imported value is named after
  the tensor's last registration, as comgra does (``node__memory*old`` /
  ``memory_out__from_iteration_0``), and also after its first (comgra_like's graph). A
  tensor registered under a second name is found under both.
- ``tsc`` (:class:`TrainingStepConfiguration`): ``type_of_execution``,
  ``graph_configuration_per_iteration`` (one entry per iteration of the step, with
  ``hash_of_node_graph_structure`` and ``tensor_graph_structure.tensor_references`` /
  ``tensor_connections``) and ``modules_and_parameters``.
- ``ngs`` (:class:`NodeGraphStructure`) of the selected iteration: ``name_to_node``
  (``Node(full_unique_name, type_of_tensor)``), ``node_connections``, ``dag_format``
  (columns by longest path from the sources; comgra_like's own layout may differ) and
  ``node_graph_hash``.
- ``recordings``: an object whose ``recordings`` attribute is ``db``.
- ``type_of_execution``: the selected step's type of execution (never comgra's filter
  value ``'any_value'``).

Differences in the data: comgra records a gradient of zeros for a tensor that got none;
comgra_like records no gradient there, so such records are missing. ``svd`` is there for
the forward values of 2-D parameters only (comgra also has it for their gradients).
Checked on comgra's tutorial: apart from these, every key comgra's database has for a
step is there; the extra keys are comgra_like's ``update`` records and its own names of
imported values.

Not supported: comgra's own modules (``import comgra...``: a plugin imports these
classes from ``comgra_like.app.comgra_plugins`` instead); ``dash_svg`` (not a
dependency); ``PseudoDb``'s writing and indexing methods (``add_record_value``,
``create_index``, ``serialize``, ``merge``); TensorReference ``previous_reference`` chains
(always None); and the order of the matches, which comgra does not promise either.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from comgra_like import vocabulary as vocab
from comgra_like.errors import ConfigurationError, NotFoundError, StorageError

COMGRA_PARAMETERS: tuple[str, ...] = (
    "recordings",
    "type_of_execution",
    "tsc",
    "ngs",
    "db",
    "training_step_value",
    "type_of_recording_value",
    "batch_aggregation_value",
    "iteration_value",
    "node_name",
    "role_of_tensor_in_node_value",
)
ATTRIBUTES: tuple[str, ...] = (
    "training_step",
    "type_of_tensor_recording",
    "batch_aggregation",
    "iteration",
    "node_name",
    "role_within_node",
    "record_type",
    "item",
    "metadata",
)
NODE_PREFIX = "node__"
OLD_SUFFIX = "*old"  # comgra's mark of a node shown in an iteration it was not made in
NOT_APPLICABLE = "not_applicable"
DATA, META = "data", "meta_information"
NO_BATCH_DIMENSION = "has_no_batch_dimension"
# comgra's statistic items: our first four statistics, with the same names and meaning
STAT_ITEMS: tuple[str, ...] = vocab.STATISTICS[: vocab.STATISTIC_INDEX["abs_max"] + 1]
NATIVE, COMGRA = "native", "comgra"

_ROW_ATTRIBUTES = ATTRIBUTES[:7]  # what a record shares with the others of its tensor
_ITEM, _METADATA = 7, 8


# --- detecting the form of a plugin ------------------------------------------------------


def plugin_style(function: Callable[..., Any]) -> tuple[str | None, str | None]:
    """(``'native'`` or ``'comgra'``, None), or (None, what is wrong with the signature)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function: called as the native form
        return NATIVE, None
    positional = [
        p for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is p.empty]
    if tuple(p.name for p in positional[: len(COMGRA_PARAMETERS)]) == COMGRA_PARAMETERS and (
        len(required) <= len(COMGRA_PARAMETERS)
    ):
        return COMGRA, None
    if len(required) <= 1 and (positional or any(p.kind == p.VAR_POSITIONAL for p in parameters)):
        return NATIVE, None
    names = ", ".join(p.name for p in parameters)
    return None, (
        f"create_visualization({names}) has neither supported signature. Define "
        "create_visualization(ctx) (comgra_like's form), or comgra 0.11.5's "
        f"create_visualization({', '.join(COMGRA_PARAMETERS)}) with these 11 parameter "
        "names in this order."
    )


# --- comgra's vocabulary ------------------------------------------------------------------


def comgra_recording_type(recording_type: str) -> str:
    """comgra's type_of_tensor_recording for ours: 'gradient:main' -> 'main'."""
    if recording_type.startswith(vocab.GRADIENT_PREFIX):
        return recording_type[len(vocab.GRADIENT_PREFIX):]
    return recording_type


def comgra_batch_aggregation(
    aggregation: str,
    sample_index: int = -1,
    categories: Mapping[int, str] | None = None,
    batch_size: int = 0,
) -> str:
    """comgra's batch_aggregation value: 'none' -> 'has_no_batch_dimension', sample 3 ->
    'Sample 3' (comgra's 'Sample 03 | category' when the step has sample categories)."""
    if aggregation == vocab.NO_BATCH:
        return NO_BATCH_DIMENSION
    if aggregation != vocab.SAMPLE:
        return aggregation
    if categories:
        digits = len(str(max(batch_size - 1, 0)))
        return f"Sample {sample_index:0{digits}d} | {categories.get(sample_index, '')}"
    return f"Sample {sample_index}"


def comgra_node_name(node: Any, graph_iteration: int) -> str:
    """The ``node__`` name comgra gives a graph node in the graph of ``graph_iteration``
    (comgra_like's name of the node; :class:`Naming` also knows comgra's second names)."""
    name = NODE_PREFIX + str(node.node)
    return name + OLD_SUFFIX if _is_old(node, graph_iteration) else name


def comgra_role(node: Any, role: str, graph_iteration: int) -> str:
    """The role_within_node comgra gives ``role`` of a graph node in that graph."""
    return role + _role_suffix(node, graph_iteration)


def _role_suffix(node: Any, graph_iteration: int) -> str:
    if not _is_old(node, graph_iteration) or node.kind == vocab.PARAMETER:
        return ""
    if node.iteration < 0:
        return "__from_initialization"
    return f"__from_iteration_{node.iteration}"


def _is_old(node: Any, graph_iteration: int) -> bool:
    return bool(node.is_import) or int(node.iteration) != graph_iteration


def stored_location(node: Any, role: str) -> tuple[str, str, int]:
    """(node, role, iteration) where a graph node's tensor is stored (follows aliases)."""
    alias = (node.alias_of or {}).get(role)
    if alias:
        return str(alias[0]), str(alias[1]), int(alias[2])
    return str(node.node), role, int(node.iteration)


class Naming:
    """comgra's names of the graph nodes of one step.

    comgra names a value imported from an earlier iteration after the tensor's *last*
    registration (``memory_out`` registered again as node ``memory``: ``node__memory*old``,
    role ``memory_out__from_iteration_0``); comgra_like's graph shows it under its first
    one. Both names are given, comgra's first.
    """

    def __init__(self, graphs: Mapping[int, Any]):
        self._later: dict[tuple[str, str, int], tuple[str, str]] = {}
        for graph in graphs.values():
            for node in graph.nodes:
                for role, target in (node.alias_of or {}).items():
                    if not node.is_import:
                        self._later[(str(target[0]), str(target[1]), int(target[2]))] = (
                            str(node.node), role
                        )

    def names(self, node: Any, role: str, graph_iteration: int) -> list[tuple[str, str]]:
        """(node name, role) pairs for ``role`` of ``node`` in that iteration, comgra's first."""
        ours = (comgra_node_name(node, graph_iteration), comgra_role(node, role, graph_iteration))
        if not _is_old(node, graph_iteration) or node.kind == vocab.PARAMETER:
            return [ours]
        later = self._later.get(stored_location(node, role))
        if later is None:
            return [ours]
        theirs = (NODE_PREFIX + later[0] + OLD_SUFFIX,
                  later[1] + _role_suffix(node, graph_iteration))
        return [theirs] if theirs == ours else [theirs, ours]

    def node_name(self, node: Any, graph_iteration: int) -> str:
        """comgra's name of a whole node (of its first role, for a node of several)."""
        if not node.roles:
            return comgra_node_name(node, graph_iteration)
        return self.names(node, node.roles[0], graph_iteration)[0][0]


# --- the objects comgra's plugins receive ---------------------------------------------------


@dataclass(frozen=True)
class TensorReference:
    tensor_name: str
    iteration: int
    node_name: str
    role_within_node: str
    is_canonical_reference: bool
    previous_reference: TensorReference | None = None


@dataclass(frozen=True)
class Node:
    full_unique_name: str
    type_of_tensor: str


@dataclass
class TensorGraphStructure:
    tensor_references: list[TensorReference]
    tensor_connections: list[tuple[TensorReference, TensorReference]]


@dataclass
class GraphConfigurationOfOneIteration:
    hash_of_node_graph_structure: str
    tensor_graph_structure: TensorGraphStructure


@dataclass(frozen=True)
class ParameterRepresentation:
    name: str
    full_unique_name: str
    shape: list[int]


@dataclass(frozen=True)
class ModuleRepresentation:
    name: str
    full_unique_name: str
    submodules: dict[str, ModuleRepresentation]
    parameters: dict[str, ParameterRepresentation]


@dataclass
class TrainingStepConfiguration:
    type_of_execution: str
    modules_and_parameters: dict[str, ModuleRepresentation]
    graph_configuration_per_iteration: list[GraphConfigurationOfOneIteration] = field(
        default_factory=list
    )


@dataclass
class NodeGraphStructure:
    name_to_node: dict[str, Node]
    node_connections: list[tuple[str, str]] = field(default_factory=list)
    dag_format: list[list[str]] = field(default_factory=list)
    node_graph_hash: str = ""


@dataclass
class TensorRecordings:
    recordings: PseudoDb | None = None


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
        self.graphs = _read_graphs(query, trial_id, self._step)
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


def _read_graphs(query: Any, trial_id: str, step: int) -> dict[int, Any]:
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
    categories, batch_size = _sample_categories(steps)
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


def _sample_categories(steps: Any) -> tuple[dict[int, str], int]:
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


# --- the 11 arguments ------------------------------------------------------------------------


def _graph_configuration(
    graph: Any, iteration: int, naming: Naming
) -> GraphConfigurationOfOneIteration:
    references: dict[tuple[str, str], TensorReference] = {}
    by_node: dict[str, list[TensorReference]] = {}
    for node in graph.nodes:
        for role in node.roles:
            old = _is_old(node, iteration)
            name, role_name = naming.names(node, role, iteration)[0]
            reference = TensorReference(
                tensor_name=str(node.tensor_names.get(role, role)) + (OLD_SUFFIX if old else ""),
                iteration=iteration,
                node_name=name,
                role_within_node=role_name,
                is_canonical_reference=not old and role not in (node.alias_of or {}),
            )
            references[(node.name, role)] = reference
            by_node.setdefault(node.name, []).append(reference)
    connections = []
    for edge in graph.edges:
        source = references.get((edge.source, edge.source_role)) or next(
            iter(by_node.get(edge.source, ())), None
        )
        target = references.get((edge.target, edge.target_role)) or next(
            iter(by_node.get(edge.target, ())), None
        )
        if source is not None and target is not None:
            connections.append((source, target))
    return GraphConfigurationOfOneIteration(
        str(graph.graph_hash), TensorGraphStructure(list(references.values()), connections)
    )


def _node_graph_structure(graph: Any, iteration: int, naming: Naming) -> NodeGraphStructure:
    names = {node.name: naming.node_name(node, iteration) for node in graph.nodes}
    name_to_node = {
        names[node.name]: Node(names[node.name], str(node.kind)) for node in graph.nodes
    }
    connections = list(dict.fromkeys(
        (names[e.source], names[e.target]) for e in graph.edges
        if e.source in names and e.target in names
    ))
    depth: dict[str, int] = {name: 0 for name in name_to_node}
    for _ in range(len(depth)):  # longest path from a source; a DAG settles in len() rounds
        changed = False
        for source, target in connections:
            if depth[target] < depth[source] + 1:
                depth[target] = depth[source] + 1
                changed = True
        if not changed:
            break
    columns: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for name in name_to_node:
        columns[depth[name]].append(name)
    return NodeGraphStructure(name_to_node, connections, columns, str(graph.graph_hash))


def _modules(query: Any, trial_id: str) -> dict[str, ModuleRepresentation]:
    try:
        modules = query.read_modules(trial_id)
    except (NotFoundError, StorageError):
        return {}
    children: dict[str | None, list[Any]] = {}
    for module in modules:
        children.setdefault(module.parent, []).append(module)

    def build(module: Any) -> ModuleRepresentation:
        return ModuleRepresentation(
            name=module.name.rsplit(".", 1)[-1],
            full_unique_name=module.name,
            submodules={c.name.rsplit(".", 1)[-1]: build(c) for c in children.get(module.name, [])},
            parameters={
                p.name: ParameterRepresentation(p.name, p.full_name, list(p.shape))
                for p in module.parameters
            },
        )

    return {m.name: build(m) for m in children.get(None, [])}


@dataclass(frozen=True)
class Selection:
    """What comgra_arguments needs of the GUI's selection (comgra_like's names)."""

    trial_id: str
    training_step: int
    iteration: int | None
    graph_node: str | None  # the node's name in the graph of ``iteration``
    graph_role: str | None
    recording_type: str | None
    aggregation: str | None
    sample_index: int = -1


def comgra_arguments(query: Any, selection: Selection, db: PseudoDb | None = None) -> tuple:
    """The 11 arguments comgra 0.11.5 passes to ``create_visualization``."""
    trial, step = selection.trial_id, int(selection.training_step)
    if db is None:
        db = PseudoDb(query, trial, step)
    steps = query.list_steps(trial)
    steps = steps[steps["training_step"] == step].sort_values("iteration")
    if steps.empty:
        raise NotFoundError(f"trial {trial!r} has no recorded step {step}")
    type_of_execution = str(steps["type_of_execution"].iloc[0])
    configurations = [
        _graph_configuration(graph, iteration, db.naming) for iteration, graph in db.graphs.items()
    ]
    tsc = TrainingStepConfiguration(type_of_execution, _modules(query, trial), configurations)
    iteration = selection.iteration
    graph = db.graphs.get(iteration) if iteration is not None else None
    ngs = (
        _node_graph_structure(graph, iteration, db.naming) if graph is not None
        else NodeGraphStructure({})
    )
    node = (
        next((n for n in graph.nodes if n.name == selection.graph_node), None)
        if graph is not None else None
    )
    node_name = role = None
    if node is not None:
        node_name = db.naming.node_name(node, iteration)
        if selection.graph_role is not None:
            node_name, role = db.naming.names(node, selection.graph_role, iteration)[0]
    categories, batch_size = _sample_categories(steps)
    aggregation = (
        comgra_batch_aggregation(selection.aggregation, selection.sample_index, categories,
                                 batch_size)
        if selection.aggregation else None
    )
    recording_type = (
        comgra_recording_type(selection.recording_type) if selection.recording_type else None
    )
    return (
        TensorRecordings(db), type_of_execution, tsc, ngs, db,
        step, recording_type, aggregation, iteration, node_name, role,
    )
