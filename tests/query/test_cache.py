"""ByteLRU (comgra_like/query/cache.py): the one byte-bounded cache."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pyarrow as pa

from comgra_like.query import ByteLRU, estimate_bytes, open_group


def test_the_least_recently_used_values_go_first_and_the_bound_holds():
    cache = ByteLRU(100)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3, 40)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert cache.bytes == 80 and len(cache) == 2
    cache.put("a", 10, 20)  # a new value under a key replaces the old one's size
    assert cache.get("a") == 10 and cache.bytes == 60


def test_a_value_larger_than_the_bound_is_not_kept_and_drops_its_older_value():
    cache = ByteLRU(100)
    cache.put("a", 1, 10)
    cache.put("big", 2, 50)
    cache.put("big", 3, 101)
    assert "big" not in cache and cache.get("a") == 1 and cache.bytes == 10
    assert cache.get("missing", "default") == "default"


def test_drop_and_clear():
    cache = ByteLRU(1000)
    for i in range(6):
        cache.put(("t", i), i, 10)
    assert cache.drop(lambda k: k[1] % 2 == 0) == 3
    assert [i for i in range(6) if ("t", i) in cache] == [1, 3, 5]
    assert cache.bytes == 30
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0
    assert "0 values" in repr(cache)


def test_estimates_follow_the_buffers():
    array = np.zeros(1000, np.float64)
    assert estimate_bytes(array) >= 8000
    assert estimate_bytes(pa.table({"x": array})) >= 8000
    assert estimate_bytes(pd.DataFrame({"x": array})) >= 8000
    assert estimate_bytes([array, array]) >= 16000
    assert estimate_bytes({"a": array}) >= 8000


def test_a_group_keeps_its_reads_within_the_bound_it_was_given(tiny_group):
    g = open_group(tiny_group, cache_bytes=60_000)
    for step in (0, 1, 4, 5, 8, 9, 10):
        g.list_tensors("trial_a", step)
        assert 0 < g.cache_bytes_used <= 60_000


def test_groups_and_the_gui_can_share_one_cache(tmp_path, tiny_group):
    """Two groups with a trial of the same name and the GUI's own keys, in one cache:
    each reads its own values."""
    other = tmp_path / "other"
    shutil.copytree(tiny_group / "trials" / "trial_b", other / "trials" / "trial_a")
    shared = ByteLRU(10**8)
    shared.put("a key of the GUI", "kept", 100)
    shared.put(7, "kept too", 100)
    first, second = open_group(tiny_group, cache=shared), open_group(other, cache=shared)
    key = ("trial_a", 0, 0, "input", "input", "forward", "batch_mean")
    a, b = first.read_tensor(*key), second.read_tensor(*key)
    assert not np.array_equal(a.values, b.values)
    np.testing.assert_array_equal(first.read_tensor(*key).values, a.values)  # from the cache
    np.testing.assert_array_equal(second.read_tensor(*key).values, b.values)
    # the GUI's two, and per group the step's table and its file's footer
    assert first.cache is shared and len(shared) == 6
    shutil.rmtree(other / "trials" / "trial_a")  # a deleted trial leaves the cache
    second.refresh()
    assert len(shared) == 4 and shared.get("a key of the GUI") == "kept"
    assert shared.get(7) == "kept too"
