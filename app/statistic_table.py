"""One statistic of every tensor row of a trial as numpy columns (the painted graph's
data; ``AppData.statistic_table`` keeps one per trial and statistic)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.compute as pc

from comgra_like.vocabulary import BATCH_AGGREGATIONS, NO_BATCH


class StatisticTable:
    """One statistic of every tensor row of a trial (batch aggregations and tensors without
    a batch dimension, no single samples), with NaN and Inf counts: ONE
    ``read_statistics`` call, kept as numpy columns ordered by step, so that the painted
    graph reads a step by slicing (no query per step).
    """

    KEYS = ("iteration", "node", "role", "recording_type", "aggregation")

    def __init__(self, group: Any, trial_id: str, statistic: str):
        self.statistic = statistic
        names = list(dict.fromkeys([statistic, "nan_count", "inf_count"]))
        table = group.read_statistics(
            trial_id,
            aggregations=[*BATCH_AGGREGATIONS, NO_BATCH],
            statistics=names,
            as_pandas=False,
        )
        frame = table.select(["training_step", *self.KEYS, *names]).to_pandas()
        self.steps = frame["training_step"].to_numpy(np.int64)
        self.iterations = frame["iteration"].to_numpy(np.int64)
        # names as categorical codes: a step's lookup compares small ints, not strings
        self.codes: dict[str, np.ndarray] = {}
        self.names: dict[str, list[str]] = {}
        for key in self.KEYS[1:]:
            column = frame[key].astype("category")
            self.codes[key] = column.cat.codes.to_numpy()
            self.names[key] = [str(c) for c in column.cat.categories]
        value = frame[statistic]
        # null: not computed for that row (an update ratio of an activation); NaN is data
        self.missing = np.asarray(pc.is_null(table.column(statistic)), dtype=bool)
        self.values = value.to_numpy(np.float64, na_value=np.nan)
        counts = [frame[c].to_numpy(np.float64, na_value=0.0) for c in ("nan_count", "inf_count")]
        self.non_finite = (counts[0] > 0) | (counts[1] > 0)
        self._memo: dict[tuple, bool] = {}  # has_values

    @property
    def nbytes(self) -> int:
        """For the cache bound."""
        arrays = [self.steps, self.iterations, self.values, self.missing, self.non_finite,
                  *self.codes.values()]
        return sum(a.nbytes for a in arrays) + 1024

    def recording_types(self) -> list[str]:
        return list(self.names["recording_type"])

    def _code(self, key: str, name: str) -> int:
        try:
            return self.names[key].index(name)
        except ValueError:
            return -2  # never a code (pandas uses -1 for missing)

    def _rows(self, recording_type: str, aggregation: str,
              lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Row numbers in [lo, hi) of ``recording_type`` with ``aggregation`` or none."""
        hi = len(self.steps) if hi is None else hi
        rt = self.codes["recording_type"][lo:hi] == self._code("recording_type", recording_type)
        agg = self.codes["aggregation"][lo:hi]
        wanted = (agg == self._code("aggregation", aggregation)) | (
            agg == self._code("aggregation", NO_BATCH))
        return lo + np.flatnonzero(rt & wanted)

    def at_step(self, training_step: int, recording_type: str, aggregation: str
                ) -> dict[tuple[int, str, str], tuple[float | None, bool]]:
        """(iteration, node, role) -> (value or None, holds NaN/Inf) at one step, for one
        recording type and batch aggregation (tensors without a batch dimension too)."""
        lo, hi = np.searchsorted(self.steps, [training_step, training_step + 1])
        out: dict[tuple[int, str, str], tuple[float | None, bool]] = {}
        nodes, roles = self.names["node"], self.names["role"]
        for i in self._rows(recording_type, aggregation, int(lo), int(hi)):
            key = (int(self.iterations[i]), nodes[self.codes["node"][i]],
                   roles[self.codes["role"][i]])
            value = None if self.missing[i] else float(self.values[i])
            out[key] = (value, bool(self.non_finite[i]))
        return out

    def has_values(self, recording_type: str, aggregation: str) -> bool:
        """Whether any row of the recording type and aggregation has the statistic."""
        key = ("has", recording_type, aggregation)
        if key not in self._memo:
            self._memo[key] = bool(self.all_values(recording_type, aggregation).size)
        return self._memo[key]

    def all_values(self, recording_type: str, aggregation: str) -> np.ndarray:
        """Every recorded value of a recording type and aggregation over all steps (for
        a colour scale that stays the same while the steps change)."""
        rows = self._rows(recording_type, aggregation)
        return self.values[rows[~self.missing[rows]]]
