"""The GUI's cache of derived data, bounded by bytes."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import pandas as pd


class ByteLRU:
    """A least-recently-used cache bounded by the (estimated) bytes of its values. Thread-safe."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            if size > self.max_bytes:
                return  # larger than the whole cache: not worth evicting everything
            self._items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self.bytes -= evicted

    def __len__(self) -> int:
        return len(self._items)


def estimate_bytes(value: Any) -> int:
    """A rough size for the cache bound (frames and arrays exactly, the rest by count)."""
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True, deep=False).sum()) + 256
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes + 128
    if isinstance(value, Mapping):
        return 256 + sum(estimate_bytes(k) + estimate_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 64 + sum(estimate_bytes(v) for v in value)
    return sys.getsizeof(value, 64)
