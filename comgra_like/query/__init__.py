"""The query API: the only way anything reads recordings (docs/QUERY_API.md).

``open_group(path)`` returns a :class:`Group`. Inside, one module per job:

- ``types``     the values handed out (TrialInfo, Graph, TensorRecord, ...)
- ``index``     the directory watcher: what each trial folder holds, extended with new
                names only on each refresh
- ``provider``  :class:`Group`: ``list_*`` metadata, ``read_*`` values, from what the
                last refresh indexed
- ``tensors``   reads of the tensors table (one step, one series, many statistics)
- ``graphs``    graph files into :class:`Graph` values
- ``cache``     :class:`ByteLRU`, the byte-bounded cache (the GUI can share it)
- ``sql``       ``sql(group, "SELECT ...")`` / ``connect(group)``: SQL over every trial
                with DuckDB (optional: ``pip install comgra-like[sql]``; docs/QUERYING.md)

Needs numpy, pandas and pyarrow; never torch or dash.
"""

from __future__ import annotations

from ..format.files import StoreUnreachable
from ..format.trial import flight_triggers
from .cache import ByteLRU, estimate_bytes
from .flight import read_flight_statistics, statistics_with_flight
from .optimizer import read_optimizer_state
from .provider import DEFAULT_CACHE_BYTES, Group, open_group
from .sql import GroupSQL, connect, shard_files, sql
from .tensors import KEY_COLUMNS, STATISTICS_KEY_COLUMNS
from .types import (
    Graph,
    GraphEdge,
    GraphNode,
    ModuleInfo,
    Note,
    ParameterInfo,
    RefreshReport,
    SkippedFile,
    TensorRecord,
    TrialChange,
    TrialInfo,
)

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "KEY_COLUMNS",
    "STATISTICS_KEY_COLUMNS",
    "ByteLRU",
    "Graph",
    "GraphEdge",
    "GraphNode",
    "Group",
    "GroupSQL",
    "ModuleInfo",
    "Note",
    "ParameterInfo",
    "RefreshReport",
    "SkippedFile",
    "StoreUnreachable",
    "TensorRecord",
    "TrialChange",
    "TrialInfo",
    "connect",
    "estimate_bytes",
    "flight_triggers",
    "open_group",
    "read_flight_statistics",
    "read_optimizer_state",
    "shard_files",
    "sql",
    "statistics_with_flight",
]
