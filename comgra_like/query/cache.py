"""One least-recently-used cache bounded by bytes, for the query API and the GUI alike.

The bound is on the sizes callers declare (``put(key, value, size)``);
:func:`estimate_bytes` gives one for the values this project caches (Arrow tables,
pandas frames, numpy arrays, and containers of them), and values that know their size
better say so with an ``nbytes`` attribute (footers, series indexes, the GUI's step
lists). Thread-safe: Dash answers callbacks from several threads, and
:meth:`ByteLRU.get_or_compute` builds a missing value once however many ask for it at
the same time (two callbacks building the series index of a 100,000-step trial side by
side doubled the server's peak memory).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import pandas as pd

_MISSING = object()  # a value never cached


class ByteLRU:
    """A least-recently-used cache whose values' declared sizes stay within ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.bytes = 0  # the sum of the declared sizes of what is held
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        # key -> [its lock, how many threads want it, the value computed]: one thread
        # computes, the others wait for it
        self._flights: dict[Hashable, list] = {}

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Keep ``value``, evicting the least recently used values beyond the bound.

        A value larger than the whole bound is not kept (keeping it would evict all the
        rest for something used once); an older value under its key is dropped anyway.
        """
        size = int(size)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self.bytes -= evicted

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any],
                       size: Callable[[Any], int] | None = None) -> Any:
        """The value under ``key``, or ``compute()`` kept there (None is never kept).

        Threads that miss the same key at once wait for the first one's value instead of
        computing it again beside it (and get it even when it is too large to keep).
        ``compute`` may ask for other keys (the GUI's values are made of the query
        API's), never for a key whose computation waits for its own. ``size`` gives the
        value's size (by default :func:`estimate_bytes`).
        """
        value = self.get(key, _MISSING)
        if value is not _MISSING:
            return value
        with self._lock:
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = [threading.RLock(), 0, _MISSING]
            flight[1] += 1
        try:
            with flight[0]:
                value = flight[2]
                if value is _MISSING:
                    value = self.get(key, _MISSING)
                if value is _MISSING:
                    value = compute()
                    if value is not None:  # "not there yet" must be asked again
                        self.put(key, value, (size or estimate_bytes)(value))
                        flight[2] = value
                return value
        finally:
            with self._lock:
                flight[1] -= 1
                if flight[1] == 0:
                    del self._flights[key]

    def drop(self, predicate: Callable[[Hashable], bool]) -> int:
        """Forget every value whose key satisfies ``predicate``; how many were dropped."""
        with self._lock:
            keys = [k for k in self._items if predicate(k)]
            for key in keys:
                self.bytes -= self._items.pop(key)[1]
            return len(keys)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ByteLRU({len(self)} values, {self.bytes:,} of {self.max_bytes:,} bytes)"


def estimate_bytes(value: Any) -> int:
    """A size for the cache bound: Arrow tables, frames and arrays by their buffers, the
    rest by count (a rough figure, cheap to compute). Lists and tuples count their
    pointers too (8 bytes an item: a tuple of 100,000 step numbers is 0.8 MB of them)."""
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=False).sum()) + 256
    nbytes = getattr(value, "nbytes", None)  # pyarrow tables and arrays, numpy arrays
    if isinstance(nbytes, int):
        return nbytes + 128
    if isinstance(value, Mapping):
        return 256 + sum(estimate_bytes(k) + estimate_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 64 + 8 * len(value) + sum(estimate_bytes(v) for v in value)
    return sys.getsizeof(value, 64)
