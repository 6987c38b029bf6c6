"""Reads of the tensors table (docs/FORMAT.md, "tensors"): the rows of one step and the
statistics of one tensor over the steps of a file.

Only columns that are asked for are read: the per-neuron ``values`` only for one step's
rows; the series read the key and statistic columns alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.schema import SCHEMAS
from ..vocabulary import ALL_STATISTICS
from .index import TensorFile

TENSORS_SCHEMA = SCHEMAS["tensors"]

#: What ``list_tensors`` returns (no statistics, no values).
KEY_COLUMNS = ["training_step", "type_of_execution", "iteration", "node", "role", "tensor_name",
               "kind", "recording_type", "aggregation", "sample_index", "shape"]
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
