"""The findings of a group's trials, scanned in a background thread.

``comgra_like.analysis`` scans one trial in tens of milliseconds to seconds; a group of
2,000 trials took two minutes, which a page callback cannot wait for. :class:`Findings`
keeps each trial's findings per data version in the GUI's cache (as ``AppData.findings``
did) and scans the trials a page asks for in one thread of its own, in the order asked:
:meth:`Findings.gather` waits a little (small groups show at once), then returns the
findings scanned so far and how many trials are still waiting, and the page asks again
at its next tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from comgra_like.query.cache import estimate_bytes
from comgra_like.vocabulary import RUNNING

#: A running trial's findings are scanned again at the earliest after this many times
#: the last scan took (a 2,000-step trial takes seconds: scanning at every refresh of a
#: live run would keep a core busy beside the training).
FINDINGS_PAUSE = 4.0


class Findings:
    """Findings per trial and data version; scans in the caller's thread (:meth:`of`)
    or in a background thread (:meth:`gather`)."""

    def __init__(self, data: Any, namespace: str):
        self._data = data
        self._namespace = namespace
        self.pause = FINDINGS_PAUSE
        # trial -> (cache key, data version, monotonic start, seconds) of its last scan
        self._scans: dict[str, tuple[tuple, int, float, float]] = {}
        self._lock = threading.Lock()  # one scan of a trial at a time
        self._queue: list[str] = []  # trials the background thread scans next, in order
        self._queued: set[str] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    # ----- one trial --------------------------------------------------------------------

    def ready(self, trial_id: str) -> list[dict[str, Any]] | None:
        """The findings of the trial's current data version if scanned (while the trial
        runs and its last scan is recent, the older findings), else None."""
        data = self._data
        key = (self._namespace, ("findings", trial_id, data.trial_version(trial_id)))
        missing = object()
        found = data.cache.get(key, missing)
        if found is not missing:
            return found
        last = self._scans.get(trial_id)
        if last is None:
            return None
        info = data.trial_info(trial_id)
        if info is not None and info.status == RUNNING and (
                time.monotonic() < last[2] + last[3] * (1 + self.pause)):
            older = data.cache.get(last[0], missing)
            if older is not missing:
                return older
        return None

    def of(self, trial_id: str) -> list[dict[str, Any]]:
        """The trial's findings, scanned now if they are not ready."""
        found = self.ready(trial_id)
        if found is not None:
            return found
        with self._lock:
            found = self.ready(trial_id)  # another thread scanned it meanwhile
            if found is not None:
                return found
            return self._scan(trial_id)

    def version(self, trial_id: str) -> int:
        """The data version of the trial that the last scan read (0: none)."""
        last = self._scans.get(trial_id)
        return last[1] if last is not None else 0

    def _scan(self, trial_id: str) -> list[dict[str, Any]]:
        data = self._data
        version = data.trial_version(trial_id)
        key = (self._namespace, ("findings", trial_id, version))

        def compute() -> list[dict[str, Any]]:
            from comgra_like.analysis import find_in_trial

            return [f.to_dict() for f in find_in_trial(data.group, trial_id)]

        started = time.monotonic()
        found = data.safely(f"findings of {trial_id}", compute, [])
        seconds = time.monotonic() - started
        data.cache.put(key, found, estimate_bytes(found))
        self._scans[trial_id] = (key, version, started, seconds)
        return found

    # ----- many trials ------------------------------------------------------------------

    def gather(self, trial_ids: Sequence[str], wait: float
               ) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
        """(the findings of the trials scanned, by trial; the trials still waiting).

        Trials not ready are handed to the background thread, in this order, and this
        waits at most ``wait`` seconds for them; ask again for the rest.
        """
        done: dict[str, list[dict[str, Any]]] = {}
        waiting: list[str] = []
        for trial_id in trial_ids:
            found = self.ready(trial_id)
            if found is None:
                waiting.append(trial_id)
            else:
                done[trial_id] = found
        if not waiting:
            return done, []
        self._enqueue(waiting)
        deadline = time.monotonic() + max(0.0, wait)
        with self._wake:
            while waiting:
                still = []
                for trial_id in waiting:
                    found = self.ready(trial_id)
                    if found is None:
                        still.append(trial_id)
                    else:
                        done[trial_id] = found
                waiting = still
                left = deadline - time.monotonic()
                if not waiting or left <= 0:
                    break
                self._wake.wait(left)
        return done, waiting

    def _enqueue(self, trial_ids: Sequence[str]) -> None:
        with self._wake:
            # the trials asked for now go first (a page waits for them), in their order
            asked = list(dict.fromkeys(trial_ids))
            chosen = set(asked)
            self._queue = asked + [t for t in self._queue if t not in chosen]
            self._queued = set(self._queue)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="comgra-findings",
                                                daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def _work(self) -> None:
        while True:
            with self._wake:
                if not self._queue:
                    self._thread = None
                    return
                trial_id = self._queue.pop(0)
                self._queued.discard(trial_id)
            self.of(trial_id)  # never raises: failures become [] (a banner entry if unforeseen)
            with self._wake:
                self._wake.notify_all()
