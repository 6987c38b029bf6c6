"""The painted graph's pure pieces: what is painted, its label, ▶ play's next step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from comgra_like import vocabulary as vocab

from ... import selection as sel
from .layout import PAINT_OFF, PAINT_STATISTICS


def paint_aggregation(current: Mapping[str, Any]) -> str:
    """The batch aggregation painted: the selected one, else the mean over the batch
    (a single sample's values are not painted; tensors without a batch dimension
    always show their own)."""
    aggregation = current.get("aggregation")
    return aggregation if aggregation in vocab.BATCH_AGGREGATIONS else vocab.BATCH_MEAN


def paint_label(statistic: str, recording_type: str) -> str:
    return (f"{vocab.STATISTIC_LABELS.get(statistic, statistic)} · "
            f"{sel.option_label('recording_type', recording_type)}")


def is_painting(statistic: str | None) -> bool:
    return statistic not in (None, PAINT_OFF) and statistic in PAINT_STATISTICS


def next_play_index(index: int | None, last: int | None) -> tuple[int, bool]:
    """▶ play: the slider position after ``index`` and whether to go on (it stops at the
    last recorded step)."""
    last = int(last or 0)
    position = min(last, int(index or 0) + 1)
    return position, position < last

