"""The GUI's pages, one module each; :data:`PAGES` is the registry ``create_app`` iterates.

A page module defines ``PAGE = Page(path, name, layout, register_callbacks)``: a pure
layout builder and a function that adds its callbacks (see :class:`Page`). To add a
page, write its module and list its ``PAGE`` here, in the order of the top bar.
"""

from __future__ import annotations

from . import (
    compare,
    findings,
    flight,
    flow,
    graphs,
    metrics,
    modules,
    network,
    notes,
    tensors,
    visualization,
)
from .page import Page

PAGES: tuple[Page, ...] = (
    tensors.PAGE,
    network.PAGE,
    notes.PAGE,
    graphs.PAGE,
    findings.PAGE,
    flight.PAGE,
    compare.PAGE,
    modules.PAGE,
    metrics.PAGE,
    flow.PAGE,
    visualization.PAGE,
)

__all__ = ["PAGES", "Page"]
