"""The writer's computations, in the order they run: where a new one (histograms,
per-module metrics) plugs in, one module each.

For every recorded step the ``Worker`` calls each processor's ``reduce`` while the
step's tensors are in shared memory, frees the slot once every processor has read what
it needs, then asks each for its ``tables`` (rows to add, by table name). The other
hooks take watch()'s configuration and step times and the per-module metrics' data
(``step_processor.py`` lists them). The tensor statistics are the first processor
(``statistics.TensorStatistics``), watch()'s histograms the second
(``histograms.Histograms``), the per-module metrics the third (``metrics.Metrics``).

To add one:

1. a module in ``comgra_like/writer/`` with a subclass of
   :class:`~.step_processor.StepProcessor` overriding the hooks it needs, made from the
   writer's configuration (``protocol.Start``);
2. its table's name in ``format.layout.TABLES`` and its schema and sort keys in
   ``format.schema.SCHEMAS`` and ``SORT_KEYS`` (a new folder of shards per trial, written
   and compacted like the others), and the table in docs/FORMAT.md;
3. its class (or a function of ``Start``) in :data:`PROCESSORS` below.
"""

from __future__ import annotations

from collections.abc import Callable

from ..protocol import ProtocolError, Start
from .histograms import Histograms
from .metrics import Metrics
from .statistics import TensorStatistics
from .step_processor import StepInput, StepProcessor

__all__ = ["PROCESSORS", "StepInput", "StepProcessor", "make_processors"]

#: The writer's computations, in the order they run.
PROCESSORS: list[Callable[[Start], StepProcessor]] = [
    TensorStatistics, Histograms, Metrics.from_start]


def make_processors(start: Start) -> list[StepProcessor]:
    made = [make(start) for make in PROCESSORS]
    for p in made:
        if not isinstance(p, StepProcessor):
            raise ProtocolError(f"the writer's processor {type(p).__name__} is no subclass "
                                "of writer.step_processor.StepProcessor")
    return made
