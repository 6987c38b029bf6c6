"""The storage contract: folder layout, file names and parquet schemas.

A *group* folder holds one sub-folder per *trial*::

    <group>/trials/<trial_id>/
        trial.json                    schema_version, settings, status running|finished
        modules.json                  module and parameter tree
        notes.jsonl                   one JSON object per line
        graphs/<sha256>.json          dependency-graph structures, content-addressed
        steps/part-<seq>.parquet      one row per recorded step x iteration
        tensors/part-<seq>.parquet    statistics and per-neuron values
        kpis/part-<seq>.parquet       KPI points

Shards are written under a name starting with ``.`` and renamed into place, and never
modified afterwards. ``<seq>`` is an 8-digit number that grows strictly per writer.
Compaction replaces ``part-<a>`` ... ``part-<b>`` by one ``compact-<a>-<b>.parquet``;
readers skip any ``part`` whose number a ``compact`` file covers.
"""

from __future__ import annotations

import re

import pyarrow as pa

SCHEMA_VERSION = 1
"""Bumped whenever a reader of an older version could misread new files."""

# A trial id is one folder name: no leading dot (readers skip hidden names, and '.' and
# '..' are not folders of their own), at most 128 characters (file systems allow 255
# bytes per name), and \Z rather than $, which would accept a trailing newline.
MAX_TRIAL_ID_LENGTH = 128
TRIAL_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}\Z")
TYPE_OF_EXECUTION_PATTERN = re.compile(r"^[A-Za-z0-9_-]+\Z")

TABLES = ("steps", "tensors", "kpis")

PART_RE = re.compile(r"^part-(\d{8})\.parquet$")
COMPACT_RE = re.compile(r"^compact-(\d{8})-(\d{8})\.parquet$")

KINDS = ("input", "calculated", "parameter", "target", "loss")
AGGREGATIONS = ("batch_mean", "batch_abs_max", "batch_std", "sample", "none")
BATCH_AGGREGATIONS = ("batch_mean", "batch_abs_max", "batch_std")

# Order matters: the recorder fills the statistics in this order.
STATISTICS = ("mean", "abs_mean", "std", "abs_max", "min", "max", "norm", "nan_count", "inf_count")
EXTRA_STATISTICS = ("numel", "svd_top", "update_ratio")
ALL_STATISTICS = STATISTICS + EXTRA_STATISTICS

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

SCHEMAS = {"steps": STEPS_SCHEMA, "tensors": TENSORS_SCHEMA, "kpis": KPIS_SCHEMA}

# Sort keys inside one shard (and inside a compacted file).
SORT_KEYS = {
    "steps": [("training_step", "ascending"), ("iteration", "ascending")],
    "tensors": [
        ("training_step", "ascending"),
        ("iteration", "ascending"),
        ("recording_type", "ascending"),
        ("node", "ascending"),
        ("role", "ascending"),
        ("aggregation", "ascending"),
        ("sample_index", "ascending"),
    ],
    "kpis": [("timepoint", "ascending")],
}

MAX_ROWS_PER_ROW_GROUP = 128 * 1024


def part_name(seq: int) -> str:
    return f"part-{seq:08d}.parquet"


def compact_name(first: int, last: int) -> str:
    return f"compact-{first:08d}-{last:08d}.parquet"
