"""Per-step computations of the writer: where a new one (histograms, per-module metrics)
plugs in, one module each.

For every recorded step the ``Worker`` calls each processor's ``reduce`` while the
step's tensors are in shared memory, frees the slot once every processor has read what
it needs, then asks each for its ``tables`` (rows to add, by table name). The tensor
statistics are the first processor (``statistics.TensorStatistics``).

To add one:

1. a module in ``comgra_like/writer/`` with a class that has ``presorted``, ``reduce``
   and ``tables`` as :class:`StepProcessor` describes, made from the writer's
   configuration (``protocol.Start``);
2. its table's name in ``format.layout.TABLES`` and its schema and sort keys in
   ``format.schema.SCHEMAS`` and ``SORT_KEYS`` (a new folder of shards per trial, written
   and compacted like the others), and the table in docs/FORMAT.md;
3. the class in :data:`PROCESSORS` below.

Optional: ``configure(msg)`` takes a ``protocol.Watch`` message, ``step_time(step,
time)`` a ``protocol.WatchStep``'s time (``histograms.Histograms`` uses both).

``reduce`` runs while training may wait for the slot: take only what must be read from
shared memory there, and do the rest in ``tables``. ``pause()`` (given to both) lets the
writer give way to the training process's threads between units of ~50-100 us of work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..protocol import CaptureSpec, Start, Step
from .histograms import Histograms
from .statistics import TensorStatistics


@dataclass
class StepInput:
    """A recorded step as the processors see it."""

    trial_id: str
    message: Step  # step, type of execution, samples, batch size, ...
    specs: list[CaptureSpec]  # one per array
    arrays: list[np.ndarray]  # flat float32 views of the shared memory (read-only)
    # Stand for the layout (the same object for the same specs) and for the memory of
    # the arrays (the same key: the same buffers with new numbers): for caches.
    layout_key: object
    arrays_key: object


class StepProcessor(Protocol):
    #: tables whose rows come sorted, after the rows of the steps before (no sort needed)
    presorted: tuple[str, ...]

    def reduce(self, step: StepInput, pause: Callable[[], None]) -> Any:
        """Read what is needed from ``step.arrays`` (valid during this call only)."""

    def tables(self, reduced: Any, pause: Callable[[], None]) -> dict[str, pa.Table | None]:
        """Rows to add per table, from what ``reduce`` returned."""


#: The per-step computations, in the order they run.
PROCESSORS: list[Callable[[Start], StepProcessor]] = [TensorStatistics, Histograms]


def make_processors(start: Start) -> list[StepProcessor]:
    return [make(start) for make in PROCESSORS]
