"""Server times of the GUI's callbacks, kept for the debug log and the benchmarks."""

from __future__ import annotations

import threading


class Timings:
    """The last server times of named callbacks. Thread-safe."""

    def __init__(self, keep: int = 200):
        self.keep = keep
        self._values: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def record(self, name: str, seconds: float) -> None:
        with self._lock:
            values = self._values.setdefault(name, [])
            values.append(seconds)
            del values[: -self.keep]

    def summary(self) -> dict[str, dict[str, float]]:
        """name -> count, median and max in milliseconds."""
        with self._lock:
            out = {}
            for name, values in self._values.items():
                ordered = sorted(values)
                out[name] = {
                    "count": len(values),
                    "median_ms": 1000 * ordered[len(ordered) // 2],
                    "max_ms": 1000 * ordered[-1],
                }
            return out
