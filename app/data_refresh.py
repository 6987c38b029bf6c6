"""The group side of :class:`~app.data.AppData`: opening the group, refreshes, the status.

:class:`GroupRefresh` is a mixin of ``AppData`` (app/data.py): it opens the query API's
group (at once, or indexing it in a background thread), looks for new data at most twice
per refresh interval, keeps each trial's data version (what the derived caches are keyed
by), and says what the banners show (:class:`DataStatus`). ``safely`` is here too: it
turns a read nobody foresaw failing into a banner line instead of a broken page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comgra_like.errors import ComgraError
from comgra_like.query import StoreUnreachable
from comgra_like.query.cache import ByteLRU

#: At most this many unforeseen read failures are kept for the banner (the log has all).
MAX_READ_PROBLEMS = 50
#: How the banner begins a piece that the store could not give now (cleared once read).
UNREACHABLE_NOW = "could not be read now, read again at the next refresh"
#: The last this many refreshes are kept (:meth:`GroupRefresh.refreshes`).
KEEP_REFRESHES = 50
log = logging.getLogger("comgra_like.app")


@dataclass(frozen=True)
class DataStatus:
    """What the live-status badge and the banners show."""

    version: int
    trial_statuses: tuple[tuple[str, str], ...]
    last_data_time: float | None
    skipped: tuple[tuple[str, str], ...]
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "trials": dict(self.trial_statuses),
            "last_data": self.last_data_time,
            "skipped": [list(s) for s in self.skipped],
            "problem": self.problem,
        }


@dataclass(frozen=True)
class RefreshRecord:
    """One look for new data: when it ended, what it cost and the data version it left."""

    wall_time: float  # time.time() at its end
    seconds: float  # the whole refresh
    group_seconds: float  # of which in the query API (opening the group, Group.refresh)
    version: int  # the group's data version after it (0: no group yet)


class GroupRefresh:
    """The group (opened lazily), its refreshes, the trials' data versions and the status.

    A mixin: the class using it sets ``path``, ``refresh_seconds`` and ``cache`` and calls
    :meth:`_start_group`, then :meth:`_open_first`, from its ``__init__``.
    """

    path: Path
    refresh_seconds: float
    cache: ByteLRU

    def _start_group(self, open_group: Callable[..., Any] | None) -> None:
        """The state of this mixin (nothing is opened yet: :meth:`_open_first`)."""
        if open_group is None:
            from comgra_like.query import open_group
        self._open_group = open_group
        self._group: Any = None
        self._problem: str | None = None
        self._lock = threading.RLock()
        self._last_refresh = 0.0
        self._last_data_time: float | None = None
        self._trial_versions: dict[str, int] = {}
        # reads that failed in a way the query API did not foresee: where -> why
        self._read_problems: dict[str, str] = {}
        self._refreshes: deque[RefreshRecord] = deque(maxlen=KEEP_REFRESHES)
        self._indexer: threading.Thread | None = None

    def _open_first(self, index_wait: float | None) -> None:
        """The first look at the group: now, or in the background (``index_wait``)."""
        if index_wait is None:
            self.refresh(force=True)
        else:
            self._index_in_background(index_wait)

    @property
    def group(self) -> Any:
        """The query API's Group, or None while the path does not exist yet."""
        return self._group

    def _index_in_background(self, wait: float) -> None:
        """Open the group and index it in a thread of its own (the first index of
        thousands of trials takes tens of seconds); wait at most ``wait`` seconds for it.
        Meanwhile the pages show the trials indexed so far and the status says how far
        the index is."""
        started = time.perf_counter()
        try:
            self._group = self._open_group(self.path, cache=self.cache, refresh=False)
        except ComgraError as exc:
            self._problem = str(exc)
            return  # the next refresh tries again
        except OSError as exc:
            self._problem = f"{self.path} cannot be read: {exc}"
            return

        def index() -> None:
            # not under self._lock: status() and the pages go on meanwhile
            try:
                report = self._group.refresh()
            except (ComgraError, OSError) as exc:
                self._problem = f"Reading {self.path} failed: {exc}"
                return  # the next refresh tries again
            except Exception as exc:
                log.exception("indexing %s failed", self.path)
                self._problem = f"Indexing {self.path} failed ({type(exc).__name__}: {exc})"
                return
            with self._lock:
                self._note_report(report)
                seconds = time.perf_counter() - started
                self._refreshes.append(
                    RefreshRecord(time.time(), seconds, seconds, int(self._group.version)))

        self._indexer = threading.Thread(target=index, name="comgra-index", daemon=True)
        self._indexer.start()
        self._indexer.join(max(0.0, wait))

    @property
    def indexing(self) -> tuple[int, int] | None:
        """(trial folders indexed, listed) while the first index runs in the background
        (``index_wait``), else None."""
        indexer = self._indexer
        if indexer is None or not indexer.is_alive():
            return None
        progress = self._group.indexing if self._group is not None else None
        return progress or (0, 0)

    def refresh(self, force: bool = False) -> DataStatus:
        """Look for new data (at most twice per refresh interval, whoever asks) and report."""
        if self.indexing is not None and not force:
            return self.status()  # the first index is still running: report how far
        with self._lock:
            now = time.monotonic()
            if force or now - self._last_refresh >= self.refresh_seconds / 2:
                self._last_refresh = now
                started = time.perf_counter()
                group_seconds = self._refresh_now()
                version = int(self._group.version) if self._group is not None else 0
                self._refreshes.append(
                    RefreshRecord(
                        time.time(), time.perf_counter() - started, group_seconds, version
                    )
                )
            return self.status()

    def refreshes(self) -> list[RefreshRecord]:
        """The last refreshes that looked for new data, oldest first (for benchmarks and the
        debug log; a refresh asked for too soon after the last one is not among them)."""
        with self._lock:
            return list(self._refreshes)

    def _refresh_now(self) -> float:
        """Open or refresh the group; the seconds spent in the query API."""
        started = time.perf_counter()
        if self._group is None:
            try:
                self._group = self._open_group(self.path, cache=self.cache)
            except ComgraError as exc:
                self._problem = str(exc)
                return time.perf_counter() - started
            except OSError as exc:
                self._problem = f"{self.path} cannot be read: {exc}"
                return time.perf_counter() - started
            group_seconds = time.perf_counter() - started
            self._problem = None
            trials = [t.trial_id for t in self._group.list_trials()]
            for trial_id in trials:
                self._trial_versions[trial_id] = 1
            if trials:
                self._last_data_time = time.time()
            return group_seconds
        try:
            report = self._group.refresh()
        except (ComgraError, OSError) as exc:
            self._problem = f"Reading {self.path} failed: {exc}"
            return time.perf_counter() - started
        group_seconds = time.perf_counter() - started
        self._note_report(report)
        return group_seconds

    def _note_report(self, report: Any) -> None:
        """A refresh's report: the trials it found something in get a new data version."""
        self._problem = None
        touched = list(report.new_trials) + list(report.changed_trials)
        for trial_id in touched:
            self._trial_versions[trial_id] = self._trial_versions.get(trial_id, 0) + 1
        if touched:
            self._last_data_time = time.time()

    def status(self) -> DataStatus:
        group = self._group
        if group is None:
            return DataStatus(0, (), None, (), self._problem)
        skipped = tuple((self._shown_path(s.path), str(s.reason)) for s in group.skipped)
        with self._lock:
            skipped += tuple(self._read_problems.items())
        problem = self._problem
        trials = tuple((t.trial_id, str(t.status)) for t in group.list_trials())
        indexing = self.indexing
        if problem is None and indexing is not None:
            done, total = indexing
            problem = (f"Indexing {self.path}: {done} of {total} trial folders read; the "
                       f"{len(trials)} trials read so far are shown.")
        elif problem is None and not trials:
            problem = f"No trials in {self.path} yet; waiting for the recorder to write some."
        return DataStatus(int(group.version), trials, self._last_data_time, skipped, problem)

    def _shown_path(self, path: str) -> str:
        """A skipped file's path as the banner shows it: inside the group folder."""
        try:
            return Path(path).relative_to(self.path).as_posix()
        except ValueError:
            return str(path)

    def safely(self, where: str, read: Callable[[], Any], default: Any) -> Any:
        """``read()``, or ``default`` when the data is missing or damaged.

        The query API reports damaged files itself (``Group.skipped``); a store that could
        not be read now (``StoreUnreachable``) is said in the banner under ``where`` until
        a read there works again; anything else that fails is a problem nobody foresaw:
        it is logged and shown in the banner under ``where``, and the page goes on
        without that piece.
        """
        try:
            value = read()
        except StoreUnreachable as exc:
            text = " ".join(str(exc).split())
            with self._lock:
                if where in self._read_problems or len(self._read_problems) < MAX_READ_PROBLEMS:
                    self._read_problems[where] = f"{UNREACHABLE_NOW} ({text})"
            return default
        except ComgraError:
            return default
        except Exception as exc:  # one unreadable piece must not break the page
            log.exception("reading %s failed", where)
            text = " ".join(str(exc).split())
            with self._lock:
                if len(self._read_problems) < MAX_READ_PROBLEMS:
                    self._read_problems[where] = f"reading failed ({type(exc).__name__}: {text})"
            return default
        if self._read_problems:
            with self._lock:
                if self._read_problems.get(where, "").startswith(UNREACHABLE_NOW):
                    del self._read_problems[where]  # read again: the store is back
        return value

    def cache_usage(self) -> dict[str, int]:
        """Bytes held and allowed by the one cache (the query API's tables and what the
        GUI derives from them)."""
        return {"bytes": self.cache.bytes, "limit": self.cache.max_bytes}

    def trial_version(self, trial_id: str | None) -> int:
        """Grows whenever a refresh found something new in the trial (0: unknown trial)."""
        return self._trial_versions.get(trial_id, 0) if trial_id else 0
