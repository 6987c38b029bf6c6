"""How the writer shares the CPU with a training process that uses every core.

torch's CPU operators split their work over a pool of threads (one per core by
default) and wait for the slowest one. When the writer takes a core from one of those
threads, every parallel operator of the training step waits until the scheduler gives
that core back, which under Linux's fair scheduler happens at the end of the writer's
time slice (milliseconds), not after the ~50-100 us that a unit of the writer's work
takes. So the writer gives way (``sched_yield()``) between units of work: a training
thread that it pushed off the core gets it back at once, and the writer goes on when
that thread sleeps or its own turn comes. It stays runnable at normal priority and
still gets its share of the CPU (a writer at idle priority starved: torch's threads
spin between operators, the writer's slots filled up and training waited for it).

Giving way helps only while the writer keeps up. Once the training process waits for a
free slot, every yield makes that wait longer; so the training process says when it
starts to wait (the line ``h``, see ``worker.py``), and the step being reduced goes on
without yielding from then on. (Stopping whenever any message waited was measured too:
at one step in ten the next step often arrives while the writer still works on the last
one, and the recorded loop was back at x1.37-1.41 with two torch threads.)

Measured on the 2-core development machine with ``torch.set_num_threads(2)``
(``scripts/benchmark_recorder.py --threads 2``, README): at one recorded step in ten the
recorded loop took x1.42-1.63 the bare loop's time before and x1.07-1.25 after. With one
torch thread (a core left to the writer) the difference is within the noise.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_sched_yield = getattr(os, "sched_yield", None)  # not on Windows


def give_way() -> None:
    """Let a thread that waits for this core run first (a cheap call when none does)."""
    if _sched_yield is not None:
        _sched_yield()


class Courtesy:
    """Gives way between units of a step's work until the training process waits.

    ``training_waits()`` tells whether the training process has said (since it was last
    asked) that it waits for the writer. ``start()`` is called when a step's work begins
    and returns the ``pause`` callable for that step's units.
    """

    def __init__(self, training_waits: Callable[[], bool]):
        self._training_waits = training_waits
        self._behind = False

    def start(self) -> Callable[[], None]:
        self._behind = False
        return self._pause

    def _pause(self) -> None:
        if self._behind:
            return
        if self._training_waits():
            self._behind = True  # for the rest of this step
            return
        give_way()
