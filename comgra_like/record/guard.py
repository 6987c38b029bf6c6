"""The rule for everything that runs on its own inside someone's training (``watch()``'s
module and gradient hooks, the per-module metrics' hooks): an internal failure is
logged once, the step's recording is dropped, and training goes on.

A :class:`Guard` counts the failures of one watcher or collector; the first is logged
with its traceback (a warning), the others only counted, with where they happened and
the first message, for the watch report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("comgra_like")


class Guard:
    """Failures of the hooks of one component (``what``: its name in the message).

    ``drop`` is called after each failure to forget the step being recorded; a failure
    inside it is swallowed too (it only counts once)."""

    def __init__(self, what: str, drop: Callable[[], None]):
        self.what = what
        self.drop = drop
        self.count = 0
        self.first: str | None = None
        self.places: dict[str, int] = {}

    def failed(self, where: str, error: BaseException) -> None:
        """Record a failure in ``where`` (a hook's name); never raises."""
        try:
            self.count += 1
            self.places[where] = self.places.get(where, 0) + 1
            if self.first is None:
                self.first = f"{where}: {type(error).__name__}: {error}"
                log.warning(
                    "%s: an internal error in %s; the recording of this step is dropped and "
                    "training goes on (further errors are counted in the watch report, not "
                    "logged): %s: %s", self.what, where, type(error).__name__, error,
                    exc_info=error)
        except Exception:  # noqa: BLE001, S110 - logging itself failed: nothing more to do
            pass
        try:
            self.drop()
        except Exception:  # noqa: BLE001, S110 - a failure while forgetting: the step is gone
            pass

    def summary(self) -> dict | None:
        """For the watch report: None when nothing failed."""
        if not self.count:
            return None
        return {"count": self.count, "first": self.first, "where": dict(self.places)}
