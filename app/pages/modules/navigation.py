"""Where the Modules page goes: the next view after a click, a breadcrumb, the picked
modules or a node the Tensors page shows (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import module_figures as mf
from .layout import MAX_PANELS


def current(selection: Mapping | None) -> Mapping:
    """The selection's fields (trial, step, node, ...)."""
    return (selection or {}).get("current") or {}


def navigate(
    view: Mapping[str, Any] | None,
    graph: Mapping[str, Any] | None,
    trial: str | None,
    *,
    clicked: list | None = None,
    crumb: str | None = None,
    picked: list | None = None,
    node: str | None = None,
) -> dict:
    """The page's next view: a click on a module picks it (and opens it when it has
    modules inside) and closes the panels of the modules that contain it, a breadcrumb
    opens its level, the dropdown sets the picked modules,
    and a node the Tensors page shows (``node``, new since the last time) opens its level."""
    new = {"trial": trial, "parent": None, "picked": [], "from_node": None, **(view or {})}
    if new["trial"] != trial:
        new.update(trial=trial, parent=None)
    chosen = list(new["picked"] or [])
    if clicked:
        key, kind, opens = clicked[0], clicked[1], clicked[2]
        if kind == "module":
            # down into a container: the panels of the modules around it close (only the
            # clicked module's and those of other branches, picked to compare, stay)
            chosen = [key] + [m for m in chosen if m != key and not _contains(m, key)]
            if opens:
                new["parent"] = key
    elif crumb is not None:
        new["parent"] = crumb
    elif picked is not None:
        chosen = list(picked)
    elif node is not None and node != new["from_node"]:
        new["from_node"] = node
        found = mf.find_invocation(graph, node)
        if found is not None:
            new["parent"] = mf.parent_of(graph, found)
            chosen = [found] + [m for m in chosen if m != found]
    new["picked"] = chosen[:MAX_PANELS]
    return new


def _contains(outer: str, inner: str) -> bool:
    """Whether the invocation ``outer`` holds ``inner`` (by name: ``model.block#1`` holds
    ``model.block.conv1#1``)."""
    base = str(outer).split("#", 1)[0]
    return str(inner).split("#", 1)[0].startswith(base + ".")

