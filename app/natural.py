"""Natural order of names with numbers in them: ``h.2`` before ``h.10`` (legends,
options and rows of the Metrics page, issue 27)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBER = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """The sort key of ``name`` with its numbers as numbers: ``h.2`` < ``h.10``."""
    parts = _NUMBER.split(str(name))
    # text at even positions, numbers at odd ones: the tuples compare position by position
    return tuple(int(p) if i % 2 else p.lower() for i, p in enumerate(parts)) + (str(name),)


def natural_sorted(names: Iterable[str]) -> list[str]:
    """The distinct names in natural order."""
    return sorted(dict.fromkeys(str(n) for n in names), key=natural_key)
