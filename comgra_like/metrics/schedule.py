"""When a metric is computed: Taiyi's ``linear(k, o)`` schedule (steps o, o+k, o+2k, ...).

Taiyi parses ``'linear(5, 0)'`` from the config; a quantity given without a schedule is
computed on every step (``linear(1, 0)``). No torch here: the writer and the GUI may read
schedules too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

_LINEAR = re.compile(r"^\s*linear\s*\(\s*([+-]?\d+)\s*(?:,\s*([+-]?\d+)\s*)?\)\s*$")
ACCEPTED = ("'linear(k, o)' with integers k >= 1 and o >= 0: computed on steps o, o+k, "
            "o+2k, ... (e.g. 'linear(5, 0)'); leave the schedule out for every step")


@dataclass(frozen=True)
class Schedule:
    """Steps ``offset + n * interval`` for n >= 0."""

    interval: int = 1
    offset: int = 0

    def due(self, step: int) -> bool:
        """Whether ``step`` is one of the schedule's steps."""
        shifted = step - self.offset
        return shifted >= 0 and shifted % self.interval == 0

    def __str__(self) -> str:
        return f"linear({self.interval}, {self.offset})"


EVERY_STEP = Schedule(1, 0)


def parse_schedule(text: object, where: str = "") -> Schedule:
    """The schedule of a config entry's ``'linear(k, o)'`` (``'linear(k)'``: o = 0).

    ``where`` names the config entry in the error message.
    """
    at = f" for {where}" if where else ""
    if isinstance(text, Schedule):
        return text
    if not isinstance(text, str):
        raise ConfigurationError(
            f"the schedule{at} must be a string, got {type(text).__name__} {text!r}; "
            f"the accepted form is {ACCEPTED}")
    m = _LINEAR.match(text)
    if m is None:
        raise ConfigurationError(
            f"bad schedule {text!r}{at}; the accepted form is {ACCEPTED}")
    interval, offset = int(m.group(1)), int(m.group(2) or 0)
    if interval < 1 or offset < 0:
        raise ConfigurationError(
            f"bad schedule {text!r}{at}: k must be >= 1 and o >= 0; the accepted form is "
            f"{ACCEPTED}")
    return Schedule(interval, offset)
