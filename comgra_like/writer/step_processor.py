"""What a computation of the writer is given and which hooks it has: :class:`StepInput`
(a recorded step as the processors see it) and :class:`StepProcessor` (every hook, each a
no-op by default). ``processors.py`` lists the processors the writer runs.

The ``Worker`` calls the hooks for the messages of the training process:

=====================  ==================================================================
message                hook
=====================  ==================================================================
``Step``               ``reduce(step, pause)`` while the step is in shared memory, then
                       ``tables(reduced, pause)`` once the slot is freed
``Watch``              ``configure(msg)``: watch()'s configuration (sent again as it grows)
``WatchStep``          ``step_time(step, time)``: a watched step's ``time_log`` value
``MetricData``         ``metric_data(msg)``: the per-module metrics' data of one step
=====================  ==================================================================

The rows a hook returns (``{table name: pa.Table or None}``) go into the trial's shards;
``presorted`` names the tables whose rows come sorted, after the rows before them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..protocol import CaptureSpec, MetricData, Step, Watch


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


class StepProcessor:
    """A computation of the writer: subclass it and override the hooks it needs (every
    hook does nothing by default)."""

    #: tables whose rows come sorted, after the rows of the steps before (no sort needed)
    presorted: tuple[str, ...] = ()

    def reduce(self, step: StepInput, pause: Callable[[], None]) -> Any:
        """Read what is needed from ``step.arrays`` (valid during this call only).

        Runs while training may wait for the slot: take only what must be read from
        shared memory here and do the rest in ``tables``. ``pause()`` lets the writer
        give way to the training process's threads between units of ~50-100 us."""
        return None

    def tables(self, reduced: Any, pause: Callable[[], None]) -> dict[str, pa.Table | None]:
        """Rows to add per table, from what ``reduce`` returned."""
        return {}

    def configure(self, msg: Watch) -> None:
        """watch()'s configuration (``protocol.Watch``), sent again when it grows."""

    def step_time(self, step: int, time: float) -> None:
        """The ``time_log`` value of a watched step (``protocol.WatchStep``)."""

    def metric_data(self, msg: MetricData) -> dict[str, pa.Table | None]:
        """Rows to add per table from the per-module metrics' data of one step."""
        return {}
