"""The parquet schemas of a trial's tables and the names they may hold.

The folder layout is :mod:`comgra_like.format.layout`'s; the words (statistics,
aggregations, kinds) are :mod:`comgra_like.vocabulary`'s; docs/FORMAT.md is the contract
in prose. The notes table's schema is in :mod:`comgra_like.format.notes`.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..vocabulary import STATISTICS
from .layout import HISTOGRAMS, KPIS, METRICS, MODULE_STEPS, NOTES_DIR, STEPS, TENSORS
from .notes import NOTES_SCHEMA

SCHEMA_VERSION = 1
"""Bumped whenever a reader of an older version could misread new files."""

# A trial id is one folder name: no leading dot (readers skip hidden names, and '.' and
# '..' are not folders of their own), at most 128 characters (file systems allow 255
# bytes per name), and \Z rather than $, which would accept a trailing newline.
MAX_TRIAL_ID_LENGTH = 128
TRIAL_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}\Z")
TYPE_OF_EXECUTION_PATTERN = re.compile(r"^[A-Za-z0-9_-]+\Z")

_dict_str = pa.dictionary(pa.int32(), pa.string())

STEPS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("training_step", pa.int64()),
        ("type_of_execution", _dict_str),
        ("iteration", pa.int32()),
        ("graph_hash", _dict_str),
        ("batch_size", pa.int32()),
        ("sample_indices", pa.list_(pa.int32())),
        ("sample_categories", pa.list_(pa.string())),
        ("wall_time", pa.float64()),
    ]
)

TENSORS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("training_step", pa.int64()),
        ("type_of_execution", _dict_str),
        ("iteration", pa.int32()),
        ("node", _dict_str),
        ("role", _dict_str),
        ("tensor_name", _dict_str),
        ("kind", _dict_str),
        ("recording_type", _dict_str),
        ("aggregation", _dict_str),
        ("sample_index", pa.int32()),
        ("shape", pa.list_(pa.int32())),
        *[(name, pa.float32()) for name in STATISTICS],
        ("numel", pa.int64()),
        ("svd_top", pa.float32()),
        ("update_ratio", pa.float32()),
        ("values", pa.list_(pa.float32())),
    ]
)

KPIS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("kpi_group", _dict_str),
        ("kpi_name", _dict_str),
        ("type_of_execution", _dict_str),
        ("timepoint", pa.int64()),
        ("value", pa.float64()),
        ("wall_time", pa.float64()),
    ]
)

# watch(): one histogram per (step, iteration, module invocation, role, recording type,
# what). ``module`` is the module invocation (``model.fc1``, ``model.block#1``; older
# files call it ``node``, see OLD_COLUMN_NAMES), ``time`` the step's ``time_log`` value
# (watch()'s x axis, by default the step; not a wall time). ``what``: io, io_grad (of
# the per-sample l2 norms), params, params_grad. The
# bins are ``len(counts)`` equal bins from ``lo`` to ``hi`` (the last one includes
# ``hi``); ``vmin``/``vmax`` are the extremes of all values before sampling and outlier
# rejection; ``n`` the number of values counted.
HISTOGRAMS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("training_step", pa.int64()),
        ("type_of_execution", _dict_str),
        ("iteration", pa.int32()),
        ("module", _dict_str),
        ("role", _dict_str),
        ("recording_type", _dict_str),
        ("what", _dict_str),
        ("time", pa.float64()),
        ("lo", pa.float64()),
        ("hi", pa.float64()),
        ("counts", pa.list_(pa.int64())),
        ("n", pa.int64()),
        ("vmin", pa.float64()),
        ("vmax", pa.float64()),
    ]
)

# watch(): the module graph structure (module_graphs/<sha256>.json) of each recorded step x
# iteration (one root-module forward).
MODULE_STEPS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("training_step", pa.int64()),
        ("type_of_execution", _dict_str),
        ("iteration", pa.int32()),
        ("graph_hash", _dict_str),
    ]
)

# Per-module metrics (Taiyi's quantities, monitorch's lenses, user metrics): one row per
# (step, module, metric, backward pass). They run on their own schedule, so a step here
# need not be a recorded step. ``module`` is the module's qualified name in the watched
# model ("" for the model itself); ``backward_pass`` counts the backward passes of the
# step for quantities of one pass (output gradients), and is 0 for the others. ``value``
# is the number; a vector metric (a spectrum) stores its vector in ``vector`` and a
# scalar summary of it (its first element) in ``value``; ``vector`` is null otherwise.
METRICS_SCHEMA = pa.schema(
    [
        ("trial_id", _dict_str),
        ("training_step", pa.int64()),
        ("type_of_execution", _dict_str),
        ("module", _dict_str),
        ("module_class", _dict_str),
        ("metric", _dict_str),
        ("backward_pass", pa.int32()),
        ("value", pa.float64()),
        ("vector", pa.list_(pa.float64())),
        ("wall_time", pa.float64()),
    ]
)

#: The schema of each table in ``layout.TABLES``: the rows the writer builds (and what
#: readers that need no rank read; a file's extra ``rank`` column is then left out).
SCHEMAS = {STEPS: STEPS_SCHEMA, TENSORS: TENSORS_SCHEMA, KPIS: KPIS_SCHEMA,
           HISTOGRAMS: HISTOGRAMS_SCHEMA, MODULE_STEPS: MODULE_STEPS_SCHEMA,
           METRICS: METRICS_SCHEMA}
#: Every table written as shards (compacted alike): ``layout.TABLES`` and the notes,
#: whose rows stay in the order the notes were taken.
SHARD_SCHEMAS = {**SCHEMAS, NOTES_DIR: NOTES_SCHEMA}

#: One word per thing in every table (docs/FORMAT.md, "Vocabulary"): ``wall_time`` for a
#: row's wall-clock (unix) time (steps, kpis, notes, metrics; ``time`` is only the
#: histograms' ``time_log`` value, which is no wall time), ``module`` for a module
#: (invocation) of watch() and the metrics (``node`` is a node of the recorded graph, in
#: the tensors table). Files written before the words were settled use these older
#: names; readers accept both (:func:`current_names`), writers write the current ones.
OLD_COLUMN_NAMES: dict[str, dict[str, str]] = {
    HISTOGRAMS: {"node": "module"},
    METRICS: {"time": "wall_time"},
}


def current_names(table: pa.Table, kind: str) -> pa.Table:
    """``table`` (a file of the table ``kind``) with the column names of older files
    (:data:`OLD_COLUMN_NAMES`) replaced by the current ones; unchanged when it has
    none of them."""
    old = OLD_COLUMN_NAMES.get(kind)
    names = table.column_names
    if not old or not any(n in old and old[n] not in names for n in names):
        return table
    return table.rename_columns([old[n] if n in old and old[n] not in names else n
                                 for n in names])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the columns of ``schema`` in its order and types (a column the
    table lacks is null; others are left out), as ``pq.read_table(schema=...)`` gives."""
    columns = []
    for f in schema:
        index = table.schema.get_field_index(f.name)
        if index < 0:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        column = table.column(index)
        columns.append(column if column.type == f.type else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)


#: The rank that recorded a row (0 in a single-process recording), the second column of
#: every shard file. Added by the shard writer, so the builders of rows need not know it;
#: files written before it existed have no such column and are rank 0's (their names
#: carry no rank either, see ``layout.shard_rank``).
RANK = "rank"
RANK_FIELD = pa.field(RANK, pa.int32())
#: The schema of each table's files: ``SHARD_SCHEMAS`` with ``rank`` after ``trial_id``.
FILE_SCHEMAS = {kind: schema.insert(1, RANK_FIELD) for kind, schema in SHARD_SCHEMAS.items()}


def with_rank(table: pa.Table, rank: int) -> pa.Table:
    """``table`` with the ``rank`` column of its files: added as the second column when
    missing (rows of a builder, or a file written before ranks), nulls filled with
    ``rank``."""
    index = table.schema.get_field_index(RANK)
    column = pa.array(np.full(table.num_rows, rank, np.int32))
    if index < 0:
        return table.add_column(1, RANK_FIELD, column)
    if table.column(index).null_count:
        return table.set_column(index, RANK_FIELD,
                                pc.fill_null(table.column(index).cast(pa.int32()), rank))
    return table

# Sort keys inside one shard (and inside a compacted file).
SORT_KEYS = {
    STEPS: [("training_step", "ascending"), ("iteration", "ascending")],
    TENSORS: [
        ("training_step", "ascending"),
        ("iteration", "ascending"),
        ("recording_type", "ascending"),
        ("node", "ascending"),
        ("role", "ascending"),
        ("aggregation", "ascending"),
        ("sample_index", "ascending"),
    ],
    KPIS: [("timepoint", "ascending")],
    HISTOGRAMS: [
        ("training_step", "ascending"),
        ("iteration", "ascending"),
        ("what", "ascending"),
        ("module", "ascending"),
        ("role", "ascending"),
        ("recording_type", "ascending"),
    ],
    MODULE_STEPS: [("training_step", "ascending"), ("iteration", "ascending")],
    METRICS: [
        ("training_step", "ascending"),
        ("module", "ascending"),
        ("metric", "ascending"),
        ("backward_pass", "ascending"),
    ],
}

MAX_ROWS_PER_ROW_GROUP = 128 * 1024
# Tensor files use smaller row groups: reading one step touches one or two of them.
TENSOR_ROW_GROUP = 16 * 1024
#: Bytes (uncompressed) a row group holds at most, unless one row is larger: a reader's
#: memory follows the row groups it reads. By rows alone, 16,384 rows of a tensor whose
#: per-neuron values have 50 million elements would be 3 TB in one row group.
ROW_GROUP_BYTES = 64 * 2**20


def row_group_size(table: str, bytes_per_row: float | None = None) -> int:
    """Rows per row group of a table's files (shards and compacted files alike): by rows,
    and with ``bytes_per_row`` (the rows' mean size) by :data:`ROW_GROUP_BYTES` as well.
    Files written before the byte bound read as before (readers take any row groups)."""
    rows = TENSOR_ROW_GROUP if table == TENSORS else MAX_ROWS_PER_ROW_GROUP
    if bytes_per_row and bytes_per_row > 0:
        rows = max(1, min(rows, int(ROW_GROUP_BYTES // bytes_per_row)))
    return rows


def mean_row_bytes(table: pa.Table) -> float:
    """The mean size of a row of ``table`` in memory (for :func:`row_group_size`)."""
    return table.nbytes / table.num_rows if table.num_rows else 0.0
