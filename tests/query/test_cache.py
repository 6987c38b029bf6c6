"""ByteLRU (comgra_like/query/cache.py): the one byte-bounded cache."""

from __future__ import annotations

import gc
import importlib.util
import shutil
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from comgra_like.query import ByteLRU, estimate_bytes, open_group

ROOT = Path(__file__).resolve().parents[2]


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


# ----- the one budget at scale (issue 19): real index objects, evictions, one build -----

SYNTHETIC_STEPS = 1000


@pytest.fixture(scope="module")
def synthetic_group(tmp_path_factory) -> Path:
    """A trial of 1,000 steps (every 250th 5 iterations long) recorded by the real
    recorder through benchmarks/make_synthetic_group.py, compacted to one file a table."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "make_synthetic_group", ROOT / "benchmarks" / "make_synthetic_group.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("synthetic") / "group"
    return module.build(out, 1, SYNTHETIC_STEPS, 10, 250, 5)


def _answers(g, steps: list[int], tensors: list[tuple], statistics: list[str]) -> list:
    """What the GUI asks: each step's tensors, and series of tensors over all steps."""
    out = []
    for step in steps:
        out.append(g.list_tensors("trial_0", step).to_dict("list"))
    for tensor in tensors:
        for statistic in statistics:
            frame = g.read_series("trial_0", *tensor, statistic)
            out.append((len(frame), frame["value"].to_numpy().tobytes(),
                        frame["training_step"].to_numpy().tobytes()))
    return out


def test_real_footers_and_series_indexes_stay_within_the_bound_and_rebuild_the_same(
        synthetic_group):
    reference = open_group(synthetic_group, cache_bytes=2**31)
    frame = reference.read_statistics("trial_0", steps=(0, 0))
    tensors = list(frame[["node", "role", "recording_type", "aggregation"]]
                   .drop_duplicates().itertuples(index=False, name=None))[:6]
    statistics = ["mean", "abs_max", "std"]
    steps = [0, 1, 249, 500, 999]
    expected = _answers(reference, steps, tensors, statistics)
    sizes = {k[1]: v[1] for k, v in reference.cache._items.items()}
    # room for the series index, one statistic column, a step's table and half the
    # footer: a column's read needs all three of the others, so they evict each other
    # (and everything asked for takes more than twice that)
    bound = sizes["series_index"] + sizes["column"] + sizes["footer"] // 2 + 50_000
    assert reference.cache.bytes > 2 * bound

    class Watched(ByteLRU):
        def put(self, key, value, size):
            super().put(key, value, size)
            assert self.bytes <= self.max_bytes
            assert self.bytes == sum(s for _, s in self._items.values())
            self.kinds.append(key[1])

    cache = Watched(bound)
    cache.kinds = []
    g = open_group(synthetic_group, cache=cache)
    for _ in range(3):  # every round evicts and builds again what the last one kept
        assert _answers(g, steps, tensors, statistics) == expected
        assert cache.bytes <= bound
    # the footer and the series index were evicted and built again, with the same answers
    assert cache.kinds.count("column") > 3 * len(statistics)
    assert cache.kinds.count("footer") > 1 and cache.kinds.count("series_index") > 1


def test_a_series_index_is_far_smaller_than_a_row_order_and_accounted(synthetic_group):
    g = open_group(synthetic_group, cache_bytes=2**31)
    g.read_series("trial_0", "hidden_00", "hidden_00", "forward", "batch_mean", "mean")
    [index] = [v for k, (v, _) in g.cache._items.items() if k[1] == "series_index"]
    assert index.nbytes == g.cache._items[next(k for k in g.cache._items
                                               if k[1] == "series_index")][1]
    # one entry per (step, iteration) and a few layouts: not 4 bytes a row (~3.5 a row
    # for this narrow net; ~0.3 for the 146 rows a step of the 100,000-step benchmark)
    blocks = len(index.pair_starts)
    assert blocks < SYNTHETIC_STEPS * 3
    assert len(index.layout_starts) <= 8 and len(index.layout_rows) < index.num_rows / 50
    arrays = sum(a.nbytes for a in vars(index).values() if isinstance(a, np.ndarray))
    assert arrays <= 30 * blocks + 2 * len(index.layout_rows) + 1024
    assert index.nbytes >= arrays


def test_one_value_is_computed_once_for_threads_that_ask_at_the_same_time():
    cache = ByteLRU(10**6)
    calls, release = [], threading.Event()

    def compute():
        calls.append(1)
        release.wait(30)
        return np.zeros(10)

    results = []
    threads = [threading.Thread(target=lambda: results.append(
        cache.get_or_compute("k", compute))) for _ in range(3)]
    for t in threads:
        t.start()
    while cache._flights.get("k", [None, 0])[1] < 3:  # all three asked
        threading.Event().wait(0.01)
    release.set()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and len(results) == 3
    assert all(r is results[0] for r in results)
    assert cache.get_or_compute("k", compute) is results[0] and len(calls) == 1
    assert not cache._flights  # nothing left behind
    # too large to keep: each later ask computes it again; None is never kept
    assert cache.get_or_compute("big", lambda: "x", lambda v: 10**7) == "x"
    assert "big" not in cache
    assert cache.get_or_compute("none", lambda: None) is None and "none" not in cache


def _held_bytes(value: object) -> int:
    """The bytes of ``value`` and every object it refers to (numpy arrays with their
    data; classes and modules, which others share, left out)."""
    seen, total, stack = set(), 0, [value]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def test_the_compact_step_list_is_accounted_by_its_formula(synthetic_group):
    """The GUI's step list: numpy columns (BYTES_PER_STEP a step) and what steps share,
    and what it really holds (tracemalloc) is within what the cache counts."""
    from comgra_like.app.steps import BYTES_PER_STEP, StepList, step_list_bytes

    g = open_group(synthetic_group)
    frame = g.list_steps("trial_0").sort_values(["training_step", "iteration"], kind="stable")

    steps = StepList.from_frame(frame)
    half = StepList.from_frame(frame[frame["training_step"] < SYNTHETIC_STEPS // 2])
    n = SYNTHETIC_STEPS
    assert len(steps) == n and len(half) == n // 2 and list(steps)[:3] == [0, 1, 2]
    assert steps.nbytes == step_list_bytes(n, steps.samples, steps.graphs, steps.type_names)
    shared = steps.nbytes - BYTES_PER_STEP * n
    assert len(steps.samples) == 1 and len(steps.graphs) == 2 and 0 < shared < 4096
    assert steps.nbytes - half.nbytes == BYTES_PER_STEP * (n - n // 2)
    # what it holds, object by object, is within what the cache counts (the dict of
    # StepInfo objects it replaced held ~410 bytes a step)
    assert _held_bytes(steps) <= steps.nbytes
    assert _held_bytes(half) <= half.nbytes
    # the same steps as the table: the long steps have 5 iterations and their own type
    assert sorted(steps[249].graph_hashes) == [0, 1, 2, 3, 4]
    assert steps[249].type_of_execution == "05_iterations"
    assert steps[250].type_of_execution == "01_iterations" and steps.get(n) is None
    assert steps.types_of_execution() == ("01_iterations", "05_iterations")
    assert steps.steps_of("05_iterations") == (249, 499, 749, 999)
    assert steps[3].sample_indices == (0, 1, 2, 3) and steps[3].batch_size == 8
