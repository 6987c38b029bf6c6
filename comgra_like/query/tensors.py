"""Reads of the tensors table (docs/FORMAT.md, "tensors"): the rows of one step, the
statistics of one tensor over the steps of a file, and the statistics of many tensors.

Only columns that are asked for are read: a step's listing reads no ``values``; the
per-neuron values of a large step are read one row at a time (:meth:`Footer.read_row`),
those of a small step with its rows; every scan over many steps reads the key and
statistic columns alone.
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
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import ConfigurationError, NotFoundError
from ..format.files import files_for
from ..format.schema import SCHEMAS
from ..vocabulary import AGGREGATIONS, ALL_STATISTICS
from .trial_index import TensorFile

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
#: Every column but the per-neuron values (a row's statistics and what it is).
NO_VALUES = [f.name for f in TENSORS_SCHEMA if f.name != "values"]
#: A step whose row groups hold more than this (uncompressed, by the footer) is not read
#: whole: its rows without values, then the values of the one row asked for. A step with
#: a tensor of 20 million values per sample held ~1.3 GB of values, and read whole it
#: took the GUI to 4.9 GB (benchmarks/benchmark_large_tensor.py).
LARGE_STEP_BYTES = 64 * 2**20
#: Bytes of rows decoded at once while a large step's row is looked for.
ROW_BATCH_BYTES = 16 * 2**20


def row_mask(table: pa.Table, key: dict[str, Any]) -> pa.ChunkedArray | pa.Array:
    """Rows of ``table`` whose columns equal ``key``'s values (dictionary columns
    compared as strings)."""
    mask = None
    for name, value in key.items():
        column = table[name]
        if pa.types.is_dictionary(column.type):
            column = column.cast(pa.string())
        term = pc.equal(column, value)
        mask = term if mask is None else pc.and_(mask, term)
    return mask


def _conform(table: pa.Table, columns: Sequence[str] | None) -> pa.Table:
    """``table`` with the types of TENSORS_SCHEMA (of ``columns``, or all): a file written
    before a column was added has nulls there, as a dataset read gives."""
    schema = TENSORS_SCHEMA if columns is None else pa.schema(
        [TENSORS_SCHEMA.field(c) for c in columns])
    if table.schema == schema:
        return table
    return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


def _read_table(path: Path, **options: Any) -> pa.Table:
    """``pq.read_table`` from where the file is: the local disk or an object store."""
    fs, where = files_for(path).arrow(path)
    return pq.read_table(where, filesystem=fs, **options)


def read_step(f: TensorFile, step: int) -> pa.Table:
    """Every row of one step in one file, values included (one or two row groups)."""
    return _read_table(f.path, filters=[("training_step", "=", int(step))],
                         schema=TENSORS_SCHEMA)


#: Bytes a parsed footer holds per column chunk (the Thrift structures and statistics in
#: pyarrow's FileMetaData: ~900 measured for the tensors table, 889 row groups x 26
#: columns = 20 MB, ten times the footer's size on disk).
FOOTER_BYTES_PER_CHUNK = 1024


class Footer:
    """The footer of a tensors file and each row group's steps, read once: a compacted
    trial of 100,000 steps has ~1,000 row groups and a 3 MB footer, which a filtered
    read parsed again for every step (0.5 s; from the footer, the step's row group
    reads in ~5 ms). Parsed it takes ~1 KB per column chunk (:attr:`nbytes`)."""

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
        chunks = groups * self.metadata.num_columns
        self.nbytes = (self.metadata.serialized_size + FOOTER_BYTES_PER_CHUNK * chunks
                       + self.lo.nbytes + self.hi.nbytes)

    def groups(self, step: int) -> list[int]:
        """The row groups that may hold ``step``."""
        return np.flatnonzero((self.lo <= step) & (step <= self.hi)).tolist()

    def step_bytes(self, step: int) -> int:
        """Uncompressed bytes of the row groups that may hold ``step`` (the footer's)."""
        return sum(self.metadata.row_group(g).total_byte_size for g in self.groups(step))

    def _file(self, **options: Any) -> pq.ParquetFile:
        return pq.ParquetFile(self.source, metadata=self.metadata, filesystem=self.filesystem,
                              **options)

    def read_step(self, step: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Every row of one step (the row groups that may hold it): the ``columns``
        named (``training_step`` among them), or all, values included."""
        groups = self.groups(step)
        names = None if columns is None else list(columns)
        if not groups:
            return _conform(TENSORS_SCHEMA.empty_table().select(names or TENSORS_SCHEMA.names),
                            names)
        present = set(self.metadata.schema.to_arrow_schema().names)
        read = None if names is None else [c for c in names if c in present]
        table = self._file().read_row_groups(groups, columns=read)
        table = table.filter(pc.equal(table["training_step"], int(step)))
        return _conform(table, names)

    def read_values(self, step: int, key: dict[str, Any]) -> pa.ListScalar | None:
        """The per-neuron values of the first row of ``step`` whose columns equal ``key``
        (None: no such row in this file). Only that row's row group is read, its
        ``values`` alone and a few rows at a time (:data:`ROW_BATCH_BYTES`), so that a
        step of large rows is never in memory at once."""
        # column chunks streamed, not read whole: on a local disk not pre-buffered either
        # (pyarrow's pre_buffer reads the row group's whole compressed values chunk
        # first: 148 -> 101 MB of Arrow memory for a 20 MB row); an object store keeps
        # it (one ranged request instead of one per MB)
        local = self.filesystem is None or isinstance(self.filesystem, pafs.LocalFileSystem)
        file = self._file(buffer_size=1 << 20, pre_buffer=not local)
        key = {"training_step": int(step), **key}
        for g in self.groups(step):
            keys = file.read_row_group(g, columns=list(key))
            hits = np.flatnonzero(row_mask(keys, key).to_numpy(zero_copy_only=False))
            if not hits.size:
                continue
            offset = int(hits[0])
            group = self.metadata.row_group(g)
            per_row = group.total_byte_size / max(group.num_rows, 1)
            rows = int(max(1, min(1 << 16, ROW_BATCH_BYTES // max(per_row, 1.0))))
            seen = 0
            for batch in file.iter_batches(batch_size=rows, row_groups=[g],
                                           columns=["values"], use_threads=False):
                if offset < seen + batch.num_rows:
                    return batch.column(0)[offset - seen]
                seen += batch.num_rows
        return None


def drop_repeated(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The table without rows whose ``keys`` repeat an earlier row's (two writers of one
    trial wrote them; the first is kept, as for the steps table)."""
    repeated = table.select(list(keys)).to_pandas().duplicated(keep="first").to_numpy()
    return table.filter(pa.array(~repeated)) if repeated.any() else table


def overlapping(files: Iterable[TensorFile]) -> bool:
    """Whether two of these files serve a common step (then rows may repeat)."""
    ranges = sorted(f.served for f in files)
    return any(a[1] >= b[0] for a, b in itertools.pairwise(ranges))


#: Rows per batch while a series index is built or a statistic column is read: the peak
#: of a build is what the index keeps plus one batch, not the file's key columns (8
#: columns of 15 million rows and their grouping took 1.1 GB at 100,000 steps).
BATCH_ROWS = 1 << 16
#: Rows of a layout matrix compared at once while the layouts are found (2 bytes each).
_LAYOUT_CHUNK_ROWS = 1 << 20


class _Words:
    """Dense codes of the names of one dictionary column over many batches (each row
    group has a dictionary of its own; most are the same, so each is mapped once)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self._mappings: dict[tuple, np.ndarray] = {}

    def encode(self, array: pa.Array) -> np.ndarray:
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()  # a file written with plain strings
        names = tuple(array.dictionary.to_pylist())
        mapping = self._mappings.get(names)
        if mapping is None:
            mapping = self._mappings[names] = np.array(
                [self.codes.setdefault(w, len(self.codes)) for w in names] or [0], np.int32)
        return mapping[array.indices.to_numpy(zero_copy_only=False)]

    @property
    def names(self) -> list[str]:
        return list(self.codes)


class SeriesIndex:
    """Which rows of one tensors file belong to which tensor (no statistics, no values).

    The writer writes a file as blocks of rows, one per (step, iteration), and almost
    every block of a trial lists its tensors in one of a few orders (its *layout*). So
    the index keeps one entry per block (where it starts, its step, iteration, type of
    execution and layout) and each distinct layout once, as the tensor of each of its
    rows: the rows of a tensor are each block's start plus the tensor's place in the
    block's layout, found without a scan (~25 bytes a block and 2 a layout row: 3 MB
    for 100,000 steps of 146 rows, where the grouped row order took 4 bytes a row, 60
    MB). A file in another order (blocks of one row, every layout different) still
    works: its layouts are then the rows themselves. The statistics are read column by
    column when asked for (:meth:`read_statistic`). Built in batches
    (:data:`BATCH_ROWS`), so the build's peak is the index plus one batch.
    """

    KEY_COLUMNS = ("training_step", "type_of_execution", "iteration", "node", "role",
                   "recording_type", "aggregation", "sample_index")
    KEYS = ("node", "role", "recording_type", "aggregation")

    def __init__(self, path: Path, num_rows: int, codes: dict[str, dict[str, int]],
                 groups: dict[tuple[int, ...], int], toe_names: list[str],
                 pair_starts: np.ndarray, pair_steps: np.ndarray, pair_iterations: np.ndarray,
                 pair_toe: np.ndarray, pair_layout: np.ndarray, layout_rows: np.ndarray,
                 layout_starts: np.ndarray):
        self.path = path
        self.num_rows = int(num_rows)
        self.codes, self.groups = codes, groups  # names -> codes; codes -> tensor number
        self.toe_names = np.asarray(toe_names, dtype=object)
        self.pair_starts, self.pair_steps = pair_starts, pair_steps
        self.pair_iterations, self.pair_toe = pair_iterations, pair_toe
        self.pair_layout = pair_layout
        # the tensor number of each row of each layout; where each layout starts there
        self.layout_rows, self.layout_starts = layout_rows, layout_starts
        words = sum(len(c) for c in codes.values()) + len(toe_names)
        self.nbytes = (sum(a.nbytes for a in (pair_starts, pair_steps, pair_iterations,
                                              pair_toe, pair_layout, layout_rows,
                                              layout_starts))
                       + 200 * len(groups) + 120 * words + 1024)

    @classmethod
    def build(cls, path: Path) -> SeriesIndex:
        fs, where = files_for(path).arrow(path)
        file = pq.ParquetFile(where, filesystem=fs)
        absent = [c for c in cls.KEY_COLUMNS if c not in file.schema_arrow.names]
        if absent:
            raise ValueError(f"a tensors file without the column(s) {', '.join(absent)}")
        words = {k: _Words() for k in ("type_of_execution", *cls.KEYS)}
        groups: dict[tuple[int, ...], int] = {}
        seen: dict[tuple, np.ndarray] = {}
        # the tensor number of every row, 2 bytes a row while there are few tensors
        tensors = np.empty(file.metadata.num_rows, np.uint16)
        pairs: list[list[np.ndarray]] = [[], [], [], []]  # starts, steps, iterations, types
        last: tuple[int, int, int] | None = None
        n = 0
        for batch in file.iter_batches(batch_size=BATCH_ROWS, columns=list(cls.KEY_COLUMNS),
                                        use_threads=False):
            m = batch.num_rows
            if not m:
                continue
            col = dict(zip(batch.schema.names, batch.columns))
            steps = col["training_step"].to_numpy(zero_copy_only=False).astype(np.int64)
            iterations = col["iteration"].to_numpy(zero_copy_only=False).astype(np.int64)
            toe = words["type_of_execution"].encode(col["type_of_execution"])
            change = np.empty(m, bool)
            change[0] = last != (steps[0], iterations[0], toe[0])
            change[1:] = ((steps[1:] != steps[:-1]) | (iterations[1:] != iterations[:-1])
                          | (toe[1:] != toe[:-1]))
            starts = np.flatnonzero(change)
            for part, values in zip(pairs, (starts + n, steps[starts],
                                            iterations[starts].astype(np.int32), toe[starts])):
                part.append(values)
            last = (int(steps[-1]), int(iterations[-1]), int(toe[-1]))
            samples = col["sample_index"].to_numpy(zero_copy_only=False).astype(np.int64) + 1
            keys = [words[k].encode(col[k]) for k in cls.KEYS] + [samples]
            numbers = _tensor_numbers(keys, groups, seen)
            if len(groups) > 2**16 and tensors.dtype == np.uint16:
                tensors = tensors.astype(np.int32)
            if n + m > len(tensors):
                raise ValueError(f"{path} has more rows than its footer says")
            tensors[n:n + m] = numbers
            n += m
        tensors = tensors[:n]
        starts, steps, iterations, toe = (_concatenate(p, t) for p, t in
                                          zip(pairs, (np.int64, np.int64, np.int32, np.int32)))
        pair_layout, layout_rows, layout_starts = _layouts(tensors, starts)
        index_type = np.int32 if n < 2**31 else np.int64
        return cls(path, n, {k: dict(words[k].codes) for k in cls.KEYS}, groups,
                   words["type_of_execution"].names, starts.astype(index_type), steps,
                   iterations, toe, pair_layout, layout_rows, layout_starts)

    def rows(self, node: str, role: str, recording_type: str, aggregation: str,
             sample_index: int) -> np.ndarray | None:
        """The rows of one tensor, in file order; None if the file has none."""
        codes = []
        for name, value in zip(self.KEYS, (node, role, recording_type, aggregation)):
            code = self.codes[name].get(value)
            if code is None:
                return None
            codes.append(code)
        tensor = self.groups.get((*codes, int(sample_index) + 1))
        if tensor is None:
            return None
        hits = np.flatnonzero(self.layout_rows == tensor)  # its places in the layouts
        layout = np.searchsorted(self.layout_starts, hits, side="right") - 1
        places = hits - self.layout_starts[layout]
        per_layout = np.bincount(layout, minlength=len(self.layout_starts))
        first = np.cumsum(per_layout) - per_layout  # of each layout's places in ``places``
        count = per_layout[self.pair_layout]  # the tensor's rows in each block
        if count.max(initial=0) <= 1:  # the writer's files: at most one row per block
            blocks = np.flatnonzero(count)
            return (self.pair_starts[blocks].astype(np.int64)
                    + places[first[self.pair_layout[blocks]]])
        blocks = np.repeat(np.arange(len(count)), count)
        within = np.arange(len(blocks)) - np.repeat(np.cumsum(count) - count, count)
        return (self.pair_starts[blocks].astype(np.int64)
                + places[first[self.pair_layout[blocks]] + within])

    def read_statistic(self, statistic: str,
                       metadata: pq.FileMetaData | None = None) -> np.ndarray:
        """One statistic of every row of the file, as float32 as stored (NaN where null;
        4 bytes a row, 58 MB for 100,000 steps), read in batches into one array.

        ``metadata``: the file's parsed footer when the caller has it (:class:`Footer`):
        parsing the 3 MB footer of a 100,000-step file again was about half of a new
        statistic's read."""
        fs, where = files_for(self.path).arrow(self.path)
        file = pq.ParquetFile(where, filesystem=fs, metadata=metadata)
        out = np.empty(self.num_rows, np.float32)
        if statistic not in file.schema_arrow.names:  # written before it was computed
            out.fill(np.nan)
            return out
        done = 0
        for batch in file.iter_batches(batch_size=BATCH_ROWS, columns=[statistic]):
            column = batch.column(0)
            if column.null_count:
                column = column.fill_null(float("nan"))
            if done + len(column) > self.num_rows:
                break
            out[done:done + len(column)] = column.to_numpy(zero_copy_only=False)
            done += len(column)
        if done != self.num_rows or file.metadata.num_rows != self.num_rows:
            raise ValueError(f"{self.path} has {file.metadata.num_rows} rows, its series index "
                             f"{self.num_rows}: the file changed since it was indexed")
        return out

    def series(self, rows: np.ndarray, values: np.ndarray) -> pd.DataFrame:
        """The series of ``rows`` (from :meth:`rows`) with ``values`` (from
        :meth:`read_statistic`)."""
        pair = np.searchsorted(self.pair_starts, rows, side="right") - 1
        return pd.DataFrame({
            "training_step": self.pair_steps[pair].astype(np.int64),
            "type_of_execution": self.toe_names[self.pair_toe[pair]],
            "iteration": self.pair_iterations[pair].astype(np.int32),
            "value": values[rows].astype(np.float64),
        })


def _concatenate(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _tensor_numbers(keys: list[np.ndarray], groups: dict[tuple[int, ...], int],
                    seen: dict[tuple, np.ndarray]) -> np.ndarray:
    """The tensor number of each row of a batch, from its key codes (node, role,
    recording type, aggregation, sample + 1); ``groups`` numbers the tensors seen so far
    and learns the new ones (``seen``: the numbers of the key sets of earlier batches,
    which most batches repeat)."""
    radix = [int(k.max()) + 1 for k in keys]
    if min(int(k.min()) for k in keys) < 0 or float(np.prod(radix, dtype=float)) >= 2**62:
        raise ValueError("a tensors file with a sample index below -1")
    key = np.zeros(len(keys[0]), np.int64)
    for part, size in zip(keys, radix):
        key = key * size + part
    if key.max() < 2**22:  # dense: count instead of sorting
        present = np.flatnonzero(np.bincount(key))
        inverse = None
    else:
        present, inverse = np.unique(key, return_inverse=True)
    memo = (tuple(radix), present.tobytes())
    numbers = seen.get(memo)
    if numbers is None:
        numbers = np.empty(len(present), np.int32)
        for j, value in enumerate(present.tolist()):
            code = []
            for size in reversed(radix):
                value, part = divmod(value, size)
                code.append(part)
            numbers[j] = groups.setdefault(tuple(reversed(code)), len(groups))
        seen[memo] = numbers
    if inverse is not None:
        return numbers[inverse.reshape(-1)]
    lookup = np.zeros(int(present[-1]) + 1, np.int32)
    lookup[present] = numbers
    return lookup[key]


def _layouts(tensors: np.ndarray, starts: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each block's layout, the layouts' rows one after another, where each starts).

    Blocks of one length are compared a chunk at a time as the rows of a matrix, by a
    hash of each row (sorting the rows themselves took seconds); rows whose hashes
    match are checked equal, and a chunk where two differ is sorted row by row."""
    lengths = np.diff(np.append(starts, len(tensors)))
    pair_layout = np.zeros(len(starts), np.int32)
    found: dict[bytes, int] = {}
    layouts: list[np.ndarray] = []
    rng = np.random.default_rng(0)
    for length in np.unique(lengths).tolist():
        blocks = np.flatnonzero(lengths == length)
        chunk = max(1, _LAYOUT_CHUNK_ROWS // max(length, 1))
        weights = rng.integers(1, 2**63, size=length, dtype=np.uint64) | np.uint64(1)
        for c in range(0, len(blocks), chunk):
            chosen = blocks[c:c + chunk]
            matrix = tensors[starts[chosen, None] + np.arange(length)]
            hashes = (matrix.astype(np.uint64) * weights).sum(axis=1)  # wraps around
            _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            distinct = matrix[first]
            if not np.array_equal(distinct[inverse], matrix):  # a collision
                distinct, inverse = np.unique(matrix, axis=0, return_inverse=True)
                inverse = inverse.reshape(-1)
            numbers = np.empty(len(distinct), np.int32)
            for j, row in enumerate(distinct):
                number = found.setdefault(row.tobytes(), len(found))
                if number == len(layouts):
                    layouts.append(row.copy())
                numbers[j] = number
            pair_layout[chosen] = numbers[inverse]
    sizes = np.array([len(x) for x in layouts], np.int64)
    layout_starts = np.cumsum(sizes) - sizes
    return pair_layout, _concatenate(layouts, tensors.dtype), layout_starts


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
