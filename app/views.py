"""The models the views draw from, built from the data layer's reads and kept in its cache.

The data layer (:mod:`~comgra_like.app.data`) knows recordings, not figures; what a view
needs beyond the raw data (a graph's layout and indexes) is built here, once, and cached
by content so that a refresh never makes it stale.
"""

from __future__ import annotations

from .data import AppData
from .graph_figure import GraphFigureModel, build_graph_model


def graph_model(
    data: AppData, trial_id: str, training_step: int, iteration: int
) -> GraphFigureModel | None:
    """Layout and indexes of a step's graph for the figure (None if not on disk yet).

    Computed once per graph structure: the key is the graph's content hash.
    """
    graph = data.graph(trial_id, training_step, iteration)
    if graph is None:
        return None
    return data.cached(
        ("graph_model", graph.graph_hash, iteration), lambda: build_graph_model(graph)
    )
