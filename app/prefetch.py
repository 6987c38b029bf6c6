"""The neighbour prefetch: the steps before and after the one shown are read in the background.

With it, ◀ ▶ over the steps answer from the cache. It must not slow down the views of the
step just chosen, which are requested some 40 ms after the selection callback answered:
so a read starts only when no callback request has run for a quiet moment (the app tells
it through :meth:`NeighbourPrefetch.watch_requests`), and a newer wish replaces an older
one that has not started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .data import AppData

#: The prefetch starts only when no callback has run for this long ...
QUIET_SECONDS = 0.15
#: ... and at the latest this long after it was asked for, busy or not.
MAX_WAIT_SECONDS = 3.0
log = logging.getLogger("comgra_like.app")


class NeighbourPrefetch:
    """One background thread (started on the first wish) that indexes neighbouring steps."""

    def __init__(
        self,
        data: AppData,
        *,
        quiet_seconds: float = QUIET_SECONDS,
        max_wait_seconds: float = MAX_WAIT_SECONDS,
    ):
        self.data = data
        self.quiet_seconds = float(quiet_seconds)
        self.max_wait_seconds = float(max_wait_seconds)
        # the newest wish: (when it was made, (trial, step) pairs still to read)
        self._wish: tuple[float, list[tuple[str, int]]] | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition(threading.Lock())
        self._callbacks_running = 0
        self._last_callback_end = 0.0

    # --- what the app tells it ---------------------------------------------------------

    def callback_started(self) -> None:
        """A callback request begins."""
        with self._wake:
            self._callbacks_running += 1

    def callback_finished(self) -> None:
        with self._wake:
            self._callbacks_running = max(0, self._callbacks_running - 1)
            self._last_callback_end = time.monotonic()
            self._wake.notify_all()

    @property
    def callbacks_running(self) -> int:
        return self._callbacks_running

    @property
    def last_callback_end(self) -> float:
        """``time.monotonic()`` when the last callback request ended (0.0: none yet)."""
        return self._last_callback_end

    def watch_requests(self, server: Any) -> None:
        """Count the callback requests of a Flask ``server`` (Dash's ``app.server``)."""
        import flask

        @server.before_request
        def callback_started() -> None:
            if flask.request.path.endswith("/_dash-update-component"):
                flask.g.comgra_callback = True
                self.callback_started()

        @server.teardown_request
        def callback_finished(_exc: BaseException | None) -> None:
            if flask.g.pop("comgra_callback", False):
                self.callback_finished()

    def neighbours_of(self, trial_id: str | None, step: int | None, steps: Sequence[int]) -> None:
        """Read the steps before and after ``step`` (one of ``steps``) when it is quiet."""
        if trial_id is None or step is None or step not in steps:
            return
        position = list(steps).index(step)
        pairs = [(trial_id, steps[i]) for i in (position + 1, position - 1) if 0 <= i < len(steps)]
        with self._wake:
            self._wish = (time.monotonic(), pairs)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="comgra-prefetch", daemon=True
                )
                self._thread.start()
            self._wake.notify_all()

    # --- the thread --------------------------------------------------------------------

    def _next(self) -> tuple[str, int]:
        """Wait for a wish and for quiet; the (trial, step) to read next."""
        with self._wake:
            while True:
                wish = self._wish
                if wish is None:
                    self._wake.wait()
                    continue
                asked, pairs = wish
                pairs = [p for p in pairs if not self.data.is_indexed(*p)]
                if not pairs:
                    self._wish = None
                    continue
                now = time.monotonic()
                quiet_for = now - self._last_callback_end
                if now - asked >= self.max_wait_seconds or (
                    self._callbacks_running == 0 and quiet_for >= self.quiet_seconds
                ):
                    rest = pairs[1:]
                    self._wish = (asked, rest) if rest else None
                    return pairs[0]
                wait = self.max_wait_seconds - (now - asked)
                if self._callbacks_running == 0:
                    wait = min(wait, self.quiet_seconds - quiet_for)
                self._wake.wait(max(0.005, wait))

    def _loop(self) -> None:
        try:
            while True:
                trial_id, step = self._next()
                # a failed prefetch costs only the later read, which reports it
                try:
                    self.data.tensor_index(trial_id, step)
                except Exception as exc:  # noqa: BLE001
                    log.debug("prefetch of %s step %s failed: %s", trial_id, step, exc)
        except BaseException:  # noqa: BLE001 - stopped from outside (test servers kill threads)
            with self._wake:
                self._wish = None
