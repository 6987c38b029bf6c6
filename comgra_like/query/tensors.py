"""Reads of the tensors table (docs/FORMAT.md, "tensors"): the rows of one step, the
statistics of one tensor over the steps of a file, and the statistics of many tensors.

Only columns that are asked for are read: the per-neuron ``values`` only for one step's
rows; every scan over many steps reads the key and statistic columns alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..errors import ConfigurationError, NotFoundError
from ..format.schema import SCHEMAS
from ..vocabulary import AGGREGATIONS, ALL_STATISTICS
from .index import TensorFile

TENSORS_SCHEMA = SCHEMAS["tensors"]

#: What ``list_tensors`` returns (no statistics, no values).
KEY_COLUMNS = ["training_step", "type_of_execution", "iteration", "node", "role", "tensor_name",
               "kind", "recording_type", "aggregation", "sample_index", "shape"]
#: The columns that say which tensor a row of ``read_statistics`` is about.
STATISTICS_KEY_COLUMNS = ["training_step", "type_of_execution", "iteration", "node", "role",
                          "tensor_name", "kind", "recording_type", "aggregation", "sample_index"]
#: The columns that tell a tensor row from every other row of the same trial.
ROW_KEY = ["training_step", "iteration", "node", "role", "recording_type", "aggregation",
           "sample_index"]


def read_step(f: TensorFile, step: int) -> pa.Table:
    """Every row of one step in one file, values included (one or two row groups)."""
    return pq.read_table(f.path, filters=[("training_step", "=", int(step))],
                         schema=TENSORS_SCHEMA)


def drop_repeated(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The table without rows whose ``keys`` repeat an earlier row's (two writers of one
    trial wrote them; the first is kept, as for the steps table)."""
    repeated = table.select(list(keys)).to_pandas().duplicated(keep="first").to_numpy()
    return table.filter(pa.array(~repeated)) if repeated.any() else table


def overlapping(files: Iterable[TensorFile]) -> bool:
    """Whether two of these files serve a common step (then rows may repeat)."""
    ranges = sorted(f.served for f in files)
    return any(a[1] >= b[0] for a, b in itertools.pairwise(ranges))


class SeriesIndex:
    """The statistics of one tensors file, grouped by tensor (no values).

    Rows are grouped once, by the dictionary codes of node, role, recording type and
    aggregation plus the sample index, so a series is a lookup and a ``take`` instead of
    a scan that compares strings over the whole trial.
    """

    COLUMNS = ("training_step", "type_of_execution", "iteration", "node", "role",
               "recording_type", "aggregation", "sample_index", *ALL_STATISTICS)
    KEYS = ("node", "role", "recording_type", "aggregation")

    def __init__(self, columns: dict[str, np.ndarray], dictionaries: dict[str, list[str]],
                 order: np.ndarray, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 radix: list[int]):
        self.columns = columns
        self.codes = {k: {v: i for i, v in enumerate(d)} for k, d in dictionaries.items()}
        self.toe_values = np.asarray(dictionaries["type_of_execution"], dtype=object)
        self.order, self.keys, self.starts, self.ends, self.radix = order, keys, starts, ends, radix
        self.nbytes = (sum(c.nbytes for c in columns.values()) + order.nbytes + keys.nbytes
                       + starts.nbytes + ends.nbytes)

    @classmethod
    def build(cls, path: Path) -> SeriesIndex:
        table = pq.read_table(path, columns=list(cls.COLUMNS), schema=TENSORS_SCHEMA)
        table = table.unify_dictionaries().combine_chunks()
        columns, dictionaries = {}, {}
        for name in cls.COLUMNS:
            col = table.column(name)
            arr = col.chunk(0) if col.num_chunks else pa.array([], col.type)
            if pa.types.is_dictionary(col.type):
                dictionaries[name] = arr.dictionary.to_pylist()
                columns[name] = arr.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                columns[name] = arr.to_numpy(zero_copy_only=False)
        samples = columns["sample_index"].astype(np.int64) + 1  # -1 -> 0
        radix = [len(dictionaries[k]) for k in cls.KEYS] + [int(samples.max(initial=0)) + 1]
        key = np.zeros(table.num_rows, np.int64)
        for part, size in zip([columns[k] for k in cls.KEYS] + [samples], radix):
            key = key * size + part
        order = np.argsort(key, kind="stable")  # keeps the file's step order in a group
        keys, starts, counts = np.unique(key[order], return_index=True, return_counts=True)
        return cls(columns, dictionaries, order, keys, starts, starts + counts, radix)

    def series(self, node: str, role: str, recording_type: str, aggregation: str,
               sample_index: int, statistic: str) -> pd.DataFrame | None:
        key = 0
        for name, value, size in zip(self.KEYS, (node, role, recording_type, aggregation),
                                     self.radix):
            code = self.codes[name].get(value)
            if code is None:
                return None
            key = key * size + code
        sample = sample_index + 1
        if not 0 <= sample < self.radix[-1]:
            return None
        key = key * self.radix[-1] + sample
        pos = int(np.searchsorted(self.keys, key))
        if pos >= len(self.keys) or self.keys[pos] != key:
            return None
        rows = self.order[self.starts[pos]:self.ends[pos]]
        return pd.DataFrame({
            "training_step": self.columns["training_step"][rows].astype(np.int64),
            "type_of_execution": self.toe_values[self.columns["type_of_execution"][rows]],
            "iteration": self.columns["iteration"][rows].astype(np.int32),
            "value": self.columns[statistic][rows].astype(np.float64),
        })


def empty_series() -> pd.DataFrame:
    return pd.DataFrame({"training_step": pd.Series(dtype="int64"),
                         "type_of_execution": pd.Series(dtype="object"),
                         "iteration": pd.Series(dtype="int32"),
                         "value": pd.Series(dtype="float64")})


# ----- read_statistics: the selection, as a filter pushed down to the files ---------------


def _names(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(v, str) for v in names):
        raise ConfigurationError(f"{what} should be a name or a list of names, not {value!r}")
    return names


def _ints(value: Any, what: str) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)]
    try:
        values = list(value)
    except TypeError:
        values = None
    if values is None or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                 for v in values):
        raise ConfigurationError(f"{what} should be an int or a list of ints, not {value!r}")
    return [int(v) for v in values]


def statistic_names(statistics: Any) -> list[str]:
    """The statistic columns to read (all when None); NotFoundError for unknown names."""
    names = _names(statistics, "statistics")
    if names is None:
        return list(ALL_STATISTICS)
    unknown = [n for n in names if n not in ALL_STATISTICS]
    if unknown:
        raise NotFoundError(f"unknown statistic {unknown[0]!r}; choose from {ALL_STATISTICS}")
    return list(dict.fromkeys(names))


def step_selection(steps: Any) -> tuple[int, int, int] | None:
    """``steps`` as (first, last, every): a ``range`` (its stop excluded, as always) or a
    ``(first, last)`` pair (both included)."""
    if steps is None:
        return None
    if isinstance(steps, range):
        if steps.step < 1:
            raise ConfigurationError(f"steps={steps!r}: a range of steps must count upwards")
        if len(steps) == 0:
            return 0, -1, 1
        return steps[0], steps[-1], steps.step
    if (isinstance(steps, (tuple, list)) and len(steps) == 2
            and all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in steps)):
        return int(steps[0]), int(steps[1]), 1
    raise ConfigurationError(
        f"steps={steps!r}: pass a range (range(100, 200): steps 100 to 199) or a pair "
        "(first, last) with both included")


def statistics_filter(*, nodes: Any = None, roles: Any = None, recording_types: Any = None,
                      aggregations: Any = None, iterations: Any = None,
                      types_of_execution: Any = None) -> pc.Expression | None:
    """The selection of ``read_statistics`` (steps apart) as one dataset expression."""
    aggregations = _names(aggregations, "aggregations")
    unknown = [a for a in aggregations or () if a not in AGGREGATIONS]
    if unknown:
        raise ConfigurationError(f"unknown aggregation {unknown[0]!r}; choose from {AGGREGATIONS}")
    parts = []
    for column, values in (("node", _names(nodes, "nodes")), ("role", _names(roles, "roles")),
                           ("recording_type", _names(recording_types, "recording_types")),
                           ("aggregation", aggregations),
                           ("type_of_execution", _names(types_of_execution,
                                                        "types_of_execution")),
                           ("iteration", _ints(iterations, "iterations"))):
        if values is not None:
            # typed, also when empty (an empty list would be a set of nulls)
            value_type = TENSORS_SCHEMA.field(column).type
            if pa.types.is_dictionary(value_type):
                value_type = value_type.value_type
            parts.append(pc.field(column).isin(pa.array(values, value_type)))
    expr = None
    for part in parts:
        expr = part if expr is None else expr & part
    if expr is not None:
        # A filter that cannot be evaluated fails here, not on a file (which would then
        # be reported as damaged).
        TENSORS_SCHEMA.empty_table().filter(expr)
    return expr


def step_filter(first: int, last: int, every: int = 1) -> pc.Expression:
    expr = (pc.field("training_step") >= first) & (pc.field("training_step") <= last)
    if every > 1:
        expr = expr & _every(first, every)
    return expr


def _every(first: int, every: int) -> pc.Expression:
    """Steps ``first + k * every``, as an expression: Arrow has no modulo kernel, and
    integer division truncates, so (s - first) // every * every == s - first tests it."""
    offset = pc.subtract(pc.field("training_step"), pc.scalar(first))
    return pc.equal(pc.multiply(pc.divide(offset, pc.scalar(every)), pc.scalar(every)), offset)


def read_columns(files: Sequence[TensorFile], columns: list[str],
                 expr: pc.Expression | None) -> pa.Table:
    """The rows of ``files`` that match ``expr``, in file order (one dataset scan)."""
    dataset = ds.dataset([str(f.path) for f in files], schema=TENSORS_SCHEMA, format="parquet")
    return dataset.to_table(columns=columns, filter=expr)


def served_filter(f: TensorFile) -> pc.Expression | None:
    """The steps of a file that may be served, when that is not all of them."""
    lo, hi = f.served
    if (lo, hi) == (f.min_step, f.max_step):
        return None
    return step_filter(lo, hi)


def statistics_frame(table: pa.Table) -> pd.DataFrame:
    """``read_statistics``'s table as a frame: names as ``str``, statistics float64 (NaN
    where the file has null)."""
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        elif name in ALL_STATISTICS:
            col = col.cast(pa.float64())
        cols[name] = col
    frame = pa.table(cols).to_pandas()
    for name in ALL_STATISTICS:
        if name in frame:
            frame[name] = frame[name].astype(np.float64)  # null -> NaN
    return frame
