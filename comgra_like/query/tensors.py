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
from ..format.files import files_for
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


def _read_table(path: Path, **options: Any) -> pa.Table:
    """``pq.read_table`` from where the file is: the local disk or an object store."""
    fs, where = files_for(path).arrow(path)
    return pq.read_table(where, filesystem=fs, **options)


def read_step(f: TensorFile, step: int) -> pa.Table:
    """Every row of one step in one file, values included (one or two row groups)."""
    return _read_table(f.path, filters=[("training_step", "=", int(step))],
                         schema=TENSORS_SCHEMA)


class Footer:
    """The footer of a tensors file and each row group's steps, read once: a compacted
    trial of 100,000 steps has ~1,000 row groups and a 3 MB footer, which a filtered
    read parsed again for every step (0.5 s; from the footer, the step's row group
    reads in ~5 ms)."""

    def __init__(self, path: Path):
        fs, where = files_for(path).arrow(path)
        self.source, self.filesystem = where, fs
        self.metadata = pq.read_metadata(where, filesystem=fs)
        column = self.metadata.schema.to_arrow_schema().get_field_index("training_step")
        groups = self.metadata.num_row_groups
        self.lo = np.full(groups, np.iinfo(np.int64).min, np.int64)  # no statistics:
        self.hi = np.full(groups, np.iinfo(np.int64).max, np.int64)  # read it always
        for i in range(groups):
            stats = self.metadata.row_group(i).column(column).statistics
            if stats is not None and stats.has_min_max:
                self.lo[i], self.hi[i] = stats.min, stats.max
        self.nbytes = 3 * self.metadata.serialized_size + self.lo.nbytes + self.hi.nbytes

    def read_step(self, step: int) -> pa.Table:
        """Every row of one step, values included (the row groups that may hold it)."""
        groups = np.flatnonzero((self.lo <= step) & (step <= self.hi)).tolist()
        if not groups:
            return TENSORS_SCHEMA.empty_table()
        file = pq.ParquetFile(self.source, metadata=self.metadata, filesystem=self.filesystem)
        table = file.read_row_groups(groups)
        table = table.filter(pc.equal(table["training_step"], int(step)))
        if table.schema == TENSORS_SCHEMA:
            return table
        # a file written before a column was added: nulls there, as a dataset read gives
        return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names
                         else pa.nulls(table.num_rows, f.type) for f in TENSORS_SCHEMA],
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
    """Which rows of one tensors file belong to which tensor (no statistics, no values).

    Rows are grouped once, by the dictionary codes of node, role, recording type and
    aggregation plus the sample index, so a series is a lookup and a ``take`` instead of
    a scan that compares strings over the whole trial. It keeps 4 bytes per row (the
    grouped row order) and one entry per (step, iteration): the file's rows are sorted
    by step and iteration (docs/FORMAT.md), so a row's step is found by bisection. The
    statistics are read column by column when asked for (:meth:`read_statistic`): a
    trial of 100,000 steps has ~15 million rows, and holding every statistic of every
    row took ~2 GB, more than any cache bound.
    """

    KEY_COLUMNS = ("training_step", "type_of_execution", "iteration", "node", "role",
                   "recording_type", "aggregation", "sample_index")
    KEYS = ("node", "role", "recording_type", "aggregation")

    def __init__(self, path: Path, codes: dict[str, dict[str, int]], radix: list[int],
                 order: np.ndarray, keys: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 pair_starts: np.ndarray, pair_steps: np.ndarray, pair_iterations: np.ndarray,
                 pair_toe: np.ndarray):
        self.path = path
        self.codes, self.radix = codes, radix
        self.order, self.keys, self.starts, self.ends = order, keys, starts, ends
        self.pair_starts, self.pair_steps = pair_starts, pair_steps
        self.pair_iterations, self.pair_toe = pair_iterations, pair_toe
        self.num_rows = len(order)
        self.nbytes = sum(a.nbytes for a in (order, keys, starts, ends, pair_starts,
                                               pair_steps, pair_iterations)) + 64 * len(pair_toe)

    @classmethod
    def build(cls, path: Path) -> SeriesIndex:
        columns, dictionaries = {}, {}
        n = 0
        for name in cls.KEY_COLUMNS:  # one at a time: the peak is one column, not eight
            col = _read_table(path, columns=[name], schema=TENSORS_SCHEMA).column(0)
            n = len(col)
            if pa.types.is_dictionary(col.type):
                columns[name], dictionaries[name] = _dictionary_codes(col)
            else:
                columns[name] = col.to_numpy()
            del col
        steps, iterations = columns.pop("training_step"), columns.pop("iteration")
        pair_change = np.ones(n, bool)
        if n > 1:
            pair_change[1:] = (steps[1:] != steps[:-1]) | (iterations[1:] != iterations[:-1])
        pair_starts = np.flatnonzero(pair_change)
        pair_steps, pair_iterations = steps[pair_starts], iterations[pair_starts]
        toe = np.asarray(dictionaries["type_of_execution"], dtype=object)
        toe_codes = columns.pop("type_of_execution")
        pair_toe = toe[toe_codes[pair_starts]]
        sorted_pairs = bool(np.all((pair_steps[1:] > pair_steps[:-1]) | (
            (pair_steps[1:] == pair_steps[:-1]) & (pair_iterations[1:] > pair_iterations[:-1]))))
        if not sorted_pairs:  # not the writer's order: one entry per row instead
            pair_starts = np.arange(n)
            pair_steps, pair_iterations = steps, iterations
            pair_toe = toe[toe_codes]
        del steps, iterations, toe_codes
        samples = columns["sample_index"].astype(np.int64) + 1  # -1 -> 0
        radix = [len(dictionaries[k]) for k in cls.KEYS] + [int(samples.max(initial=0)) + 1]
        key = np.zeros(n, np.int64)
        for part, size in zip([columns[k] for k in cls.KEYS] + [samples], radix):
            key = key * size + part
        del columns, samples
        order, keys, counts = _stable_group_order(key)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        index_type = np.int32 if n < 2**31 else np.int64
        return cls(path, {k: {v: i for i, v in enumerate(dictionaries[k])} for k in cls.KEYS},
                   radix, order.astype(index_type), keys, starts, starts + counts,
                   pair_starts, pair_steps, pair_iterations, pair_toe)

    def rows(self, node: str, role: str, recording_type: str, aggregation: str,
             sample_index: int) -> np.ndarray | None:
        """The rows of one tensor, in file order; None if the file has none."""
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
        return self.order[self.starts[pos]:self.ends[pos]]

    def read_statistic(self, statistic: str) -> np.ndarray:
        """One statistic of every row of the file, as float32 as stored (NaN where null;
        4 bytes a row, 58 MB for 100,000 steps)."""
        column = _read_table(self.path, columns=[statistic], schema=TENSORS_SCHEMA).column(0)
        if column.null_count:
            column = column.fill_null(float("nan"))
        return column.to_numpy().astype(np.float32, copy=False)

    def series(self, rows: np.ndarray, values: np.ndarray) -> pd.DataFrame:
        """The series of ``rows`` (from :meth:`rows`) with ``values`` (from
        :meth:`read_statistic`)."""
        pair = np.searchsorted(self.pair_starts, rows, side="right") - 1
        return pd.DataFrame({
            "training_step": self.pair_steps[pair].astype(np.int64),
            "type_of_execution": self.pair_toe[pair],
            "iteration": self.pair_iterations[pair].astype(np.int32),
            "value": values[rows].astype(np.float64),
        })


def _dictionary_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """The codes of a dictionary column into one dictionary for all its chunks (each row
    group has its own; most are the same, so each distinct one is mapped once)."""
    words: dict[str, int] = {}
    mappings: dict[tuple, np.ndarray] = {}
    parts = []
    for chunk in column.chunks:
        names = tuple(chunk.dictionary.to_pylist())
        mapping = mappings.get(names)
        if mapping is None:
            mapping = mappings[names] = np.array(
                [words.setdefault(w, len(words)) for w in names] or [0], dtype=np.int32)
        parts.append(mapping[chunk.indices.to_numpy(zero_copy_only=False)])
    codes = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return codes, list(words)


def _stable_group_order(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the rows ordered by ``key``, file order kept within a key; the distinct keys,
    ascending; how many rows each has). With few distinct keys they are numbered densely
    first, so that numpy sorts 16-bit numbers (a radix sort) instead of 64-bit ones."""
    if len(key) and 0 <= int(key.min()) and int(key.max()) < 2**26:
        counts = np.bincount(key)
        present = np.flatnonzero(counts)
        if len(present) < 2**16:
            dense = np.zeros(len(counts), np.uint16)
            dense[present] = np.arange(len(present), dtype=np.uint16)
            return np.argsort(dense[key], kind="stable"), present, counts[present]
    order = np.argsort(key, kind="stable")
    keys, counts = np.unique(key[order], return_counts=True)
    return order, keys, counts


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
    fs = files_for(files[0].path).arrow(files[0].path)[0] if files else None
    dataset = ds.dataset([files_for(f.path).arrow(f.path)[1] for f in files], filesystem=fs,
                         schema=TENSORS_SCHEMA, format="parquet")
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
