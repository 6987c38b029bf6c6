"""comgra 0.11.5's vocabulary and names for comgra_like's recordings (for
``comgra_plugins.py``): its attribute names, recording types, batch aggregations, and
the ``node__`` names and roles it gives the nodes of a step's graphs (:class:`Naming`).
Pure; nothing here reads or writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from comgra_like import vocabulary as vocab

__all__ = [
    "ATTRIBUTES",
    "DATA",
    "META",
    "NODE_PREFIX",
    "NOT_APPLICABLE",
    "NO_BATCH_DIMENSION",
    "OLD_SUFFIX",
    "STAT_ITEMS",
    "Naming",
    "comgra_batch_aggregation",
    "comgra_node_name",
    "comgra_recording_type",
    "comgra_role",
    "is_old",
    "stored_location",
]

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
    return name + OLD_SUFFIX if is_old(node, graph_iteration) else name


def comgra_role(node: Any, role: str, graph_iteration: int) -> str:
    """The role_within_node comgra gives ``role`` of a graph node in that graph."""
    return role + _role_suffix(node, graph_iteration)


def _role_suffix(node: Any, graph_iteration: int) -> str:
    if not is_old(node, graph_iteration) or node.kind == vocab.PARAMETER:
        return ""
    if node.iteration < 0:
        return "__from_initialization"
    return f"__from_iteration_{node.iteration}"


def is_old(node: Any, graph_iteration: int) -> bool:
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
        if not is_old(node, graph_iteration) or node.kind == vocab.PARAMETER:
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
