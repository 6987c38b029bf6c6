"""Graph files (``graphs/<sha256>.json``, docs/FORMAT.md) read into :class:`Graph` values.

The file stores iterations relative to the iteration that uses it, so one file serves
every iteration of the same structure; :func:`parse_graph` makes them absolute. A file
of another structure raises :class:`GraphStructureError` naming the first part that is
wrong, so that a damaged file is reported, not shown half.
"""

from __future__ import annotations

from typing import Any

from .types import Graph, GraphEdge, GraphNode


class GraphStructureError(ValueError):
    """A graph file holds valid JSON of another structure (says where)."""


_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
               bool: "true/false", float: "a number", type(None): "null"}


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise GraphStructureError(f"{where} should be {_JSON_NAMES.get(kind, kind.__name__)}, "
                                  f"not {_JSON_NAMES.get(type(value), type(value).__name__)}")
    return value


def _relative_iteration(value: Any, iteration: int, where: str) -> int:
    if value == "step":
        return -1
    return iteration + _expect(value, int, where)


def parse_graph(digest: str, iteration: int, structure: Any) -> Graph:
    """The Graph of a graph file's JSON (docs/FORMAT.md) used at ``iteration``;
    GraphStructureError names the first thing of another structure."""
    _expect(structure, dict, "the file")
    nodes = []
    for i, n in enumerate(_expect(structure.get("nodes", []), list, "'nodes'")):
        where = f"nodes[{i}]"
        _expect(n, dict, where)
        for key in ("id", "node", "kind"):
            if key not in n:
                raise GraphStructureError(f"{where} has no {key!r}")
            _expect(n[key], str, f"{where}.{key}")
        it = _relative_iteration(n.get("iteration"), iteration, f"{where}.iteration")
        roles = _expect(n.get("roles", {}), dict, f"{where}.roles")
        tensor_names, shapes, alias_of = {}, {}, {}
        for r, v in roles.items():
            at = f"{where}.roles[{r!r}]"
            _expect(v, dict, at)
            tensor_names[r] = _expect(v.get("tensor_name", ""), str, f"{at}.tensor_name")
            shape = _expect(v.get("shape", []), list, f"{at}.shape")
            shapes[r] = tuple(_expect(d, int, f"{at}.shape") for d in shape)
            alias = v.get("alias_of")
            if alias:
                if not (isinstance(alias, list) and len(alias) == 3):
                    raise GraphStructureError(f"{at}.alias_of should be [node, role, iteration]")
                alias_of[r] = (_expect(alias[0], str, f"{at}.alias_of"),
                               _expect(alias[1], str, f"{at}.alias_of"),
                               _relative_iteration(alias[2], iteration, f"{at}.alias_of"))
        group = n.get("module_group")
        nodes.append(GraphNode(
            name=n["id"], node=n["node"], kind=n["kind"], roles=tuple(sorted(roles)),
            tensor_names=tensor_names, shapes=shapes, iteration=it,
            is_import=bool(n.get("is_import")),
            module_group=None if group is None else _expect(group, str, f"{where}.module_group"),
            alias_of=alias_of,
        ))
    edges = []
    for i, e in enumerate(_expect(structure.get("edges", []), list, "'edges'")):
        if not (isinstance(e, list) and len(e) == 4 and all(isinstance(x, str) for x in e)):
            raise GraphStructureError(
                f"edges[{i}] should be [source, target, source role, target role]")
        edges.append(GraphEdge(*e))
    return Graph(digest, iteration, nodes, edges)
