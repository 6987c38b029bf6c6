"""One least-recently-used cache bounded by bytes, for the query API and the GUI alike.

The bound is on the sizes callers declare (``put(key, value, size)``);
:func:`estimate_bytes` gives one for the values this project caches (Arrow tables,
pandas frames, numpy arrays, and containers of them). Thread-safe: Dash answers
callbacks from several threads.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import pandas as pd


class ByteLRU:
    """A least-recently-used cache whose values' declared sizes stay within ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.bytes = 0  # the sum of the declared sizes of what is held
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

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
    rest by count (a rough figure, cheap to compute)."""
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=False).sum()) + 256
    nbytes = getattr(value, "nbytes", None)  # pyarrow tables and arrays, numpy arrays
    if isinstance(nbytes, int):
        return nbytes + 128
    if isinstance(value, Mapping):
        return 256 + sum(estimate_bytes(k) + estimate_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 64 + sum(estimate_bytes(v) for v in value)
    return sys.getsizeof(value, 64)
