"""Thinning of KPI curves: dense early, geometrically sparser later, outliers always kept."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from ..errors import ConfigurationError


@dataclass
class KpiThinner:
    """Decides which points of one KPI curve are stored.

    A point is kept when its timepoint reached the next scheduled one (the schedule
    grows by ``growth`` each time: 0, 1, 2, ..., then ~10% apart), or when its value
    lies outside the range of the last ``window`` kept values by more than
    ``outlier_factor`` times that range.
    """

    growth: float = 1.1
    window: int = 10
    outlier_factor: float = 0.5
    _next: float = 0.0
    _last_timepoint: int | None = None
    _recent: deque = field(init=False)

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)

    def offer(self, timepoint: int, value: float, name: str = "") -> bool:
        if self._last_timepoint is not None and timepoint <= self._last_timepoint:
            raise ConfigurationError(
                f"record_kpi_in_graph({name!r}): timepoint {timepoint} is not after the "
                f"previous one ({self._last_timepoint}); pass increasing timepoints or "
                "leave timepoint=None to use the training step"
            )
        self._last_timepoint = timepoint
        keep = timepoint >= self._next or self._is_outlier(value)
        if keep:
            while timepoint >= self._next:
                self._next = max(self._next + 1.0, self._next * self.growth)
            self._recent.append(value)
        return keep

    def _is_outlier(self, value: float) -> bool:
        if len(self._recent) < self._recent.maxlen:
            return False
        lo, hi = min(self._recent), max(self._recent)
        margin = (hi - lo) * self.outlier_factor
        return value > hi + margin or value < lo - margin or math.isnan(value)


class KpiBuffer:
    """The KPI points of one trial on their way to the writer: thinned per curve, kept
    here and handed over in batches (``take``) about once a second or with a step."""

    def __init__(self) -> None:
        self._thinners: dict[tuple[str, str, str], KpiThinner] = {}
        self.rows: list[tuple] = []
        self.last_take = time.monotonic()

    def offer(self, group: str, name: str, type_of_execution: str, timepoint: int,
              value: float) -> None:
        key = (group, type_of_execution, name)
        thinner = self._thinners.get(key)
        if thinner is None:
            thinner = self._thinners[key] = KpiThinner()
        if thinner.offer(timepoint, value, name=f"{group}/{name}"):
            self.rows.append((group, name, type_of_execution, timepoint, value, time.time()))

    def due(self) -> bool:
        """Whether rows wait for longer than a second."""
        return bool(self.rows) and time.monotonic() - self.last_take > 1.0

    def take(self) -> list[tuple]:
        """The rows buffered so far (group, name, type of execution, timepoint, value,
        wall time); the buffer starts empty again."""
        rows, self.rows = self.rows, []
        self.last_take = time.monotonic()
        return rows
