"""Component ids shared by layouts, callbacks, assets/comgra.js and tests.

Selector controls use pattern-matching ids (``{"type": ..., "field": ...}``) so that one
selection callback serves every page: on pages without the Tensors selectors the
``ALL`` lists are simply empty.
"""

from __future__ import annotations

from typing import Any

URL = "url"
PAGE = "page"
SELECTION = "selection"  # dcc.Store, per browser tab (sessionStorage)
DATA_STATUS = "data-status"  # dcc.Store, the last DataStatus this tab saw
KEY_EVENT = "key-event"  # dcc.Store the arrow keys write (assets/comgra.js)
TICK = "tick"  # dcc.Interval
BANNER = "banner"
BADGE = "live-badge"
NAV = "nav"

# Tensors page
GRAPH_CONTAINER = "dependency-graph-container"  # plain id: assets/comgra.js looks for it
GRAPH_KEY = "graph-key"
GRAPH_SHOWN = "graph-shown"  # dcc.Store: the highlight the graph figure shows
VALUES_KEY = "values-key"
SERIES_KEY = "series-key"
VALUE_HEADER = "value-header"
STATS_TABLE = "stats-table"
NEURONS = "neuron-values"

# Other pages
NETWORK_TABLE = "network-table"
NETWORK_KEY = "network-key"
NOTES_SEARCH = "notes-search"
NOTES_LIST = "notes-list"
NOTES_KEY = "notes-key"
KPI_GRAPHS = "kpi-graphs"
KPI_KEY = "kpi-key"
VISUALIZATION = "visualization-output"
VISUALIZATION_KEY = "visualization-key"


def selector(field: Any) -> dict:
    """A selector dropdown of the selection ``field`` (or ALL)."""
    return {"type": "sel", "field": field}


def previous(field: Any) -> dict:
    """The ◀ button of a selector."""
    return {"type": "sel-prev", "field": field}


def following(field: Any) -> dict:
    """The ▶ button of a selector."""
    return {"type": "sel-next", "field": field}


def step_slider(field: Any = "training_step") -> dict:
    return {"type": "step-slider", "field": field}


def step_input(field: Any = "training_step") -> dict:
    return {"type": "step-input", "field": field}


def dependency_graph(name: Any = "main") -> dict:
    return {"type": "dependency-graph", "name": name}


def series_graph(name: Any = "main") -> dict:
    return {"type": "series-graph", "name": name}


def dom_id(component_id: Any) -> str:
    """The DOM id Dash gives a component (dict ids become sorted compact JSON)."""
    if isinstance(component_id, dict):
        import json

        return json.dumps(component_id, sort_keys=True, separators=(",", ":"))
    return str(component_id)
