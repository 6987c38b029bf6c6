"""The objects comgra 0.11.5 hands a plugin (its ``comgra.objects`` classes, the fields a
plugin reads), and how they are built from comgra_like's graphs and module tree:
:func:`graph_configuration` (``tsc.graph_configuration_per_iteration``),
:func:`node_graph_structure` (``ngs``) and :func:`modules_and_parameters`. Reads only
through the query API it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from comgra_like.errors import NotFoundError, StorageError

from .comgra_names import OLD_SUFFIX, Naming, is_old

__all__ = [
    "GraphConfigurationOfOneIteration",
    "ModuleRepresentation",
    "Node",
    "NodeGraphStructure",
    "ParameterRepresentation",
    "TensorGraphStructure",
    "TensorReference",
    "TrainingStepConfiguration",
    "graph_configuration",
    "modules_and_parameters",
    "node_graph_structure",
]


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


def graph_configuration(
    graph: Any, iteration: int, naming: Naming
) -> GraphConfigurationOfOneIteration:
    references: dict[tuple[str, str], TensorReference] = {}
    by_node: dict[str, list[TensorReference]] = {}
    for node in graph.nodes:
        for role in node.roles:
            old = is_old(node, iteration)
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


def node_graph_structure(graph: Any, iteration: int, naming: Naming) -> NodeGraphStructure:
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


def modules_and_parameters(query: Any, trial_id: str) -> dict[str, ModuleRepresentation]:
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
