"""The GUI's byte-bounded cache (comgra_like.app.cache)."""

from __future__ import annotations

import numpy as np
from comgra_like.app.cache import ByteLRU, estimate_bytes


def test_byte_lru_is_bounded():
    cache = ByteLRU(100)
    for i in range(10):
        cache.put(i, np.zeros(4, dtype=np.float64), 40)
    assert cache.bytes <= 100 and len(cache) == 2
    assert cache.get(9) is not None and cache.get(0) is None
    cache.put("huge", b"x", 1000)  # larger than the cache: not stored, nothing evicted
    assert cache.get("huge") is None and len(cache) == 2
    assert estimate_bytes(np.zeros(10)) >= 80
