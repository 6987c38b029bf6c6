"""read_statistics (comgra_like/query/tensors.py and the provider): the statistics of many
tensors and steps at once, checked row by row against read_tensor on a recorded trial."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from comgra_like.errors import ConfigurationError, NotFoundError, StorageError
from comgra_like.query import STATISTICS_KEY_COLUMNS, open_group
from comgra_like.vocabulary import ALL_STATISTICS

from .helpers import copy_group

TRIAL = "trial_a"
ROW = ["training_step", "iteration", "node", "role", "recording_type", "aggregation",
       "sample_index"]


class Recorded(tuple):
    """(group, rows): every tensor row of TRIAL as read_tensor gives it, by its key."""

    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"<{len(self[1])} rows of {TRIAL}>"


@pytest.fixture(scope="module")
def recorded(tiny_group):
    g = open_group(tiny_group)
    rows = {}
    for step in g.list_steps(TRIAL)["training_step"].unique().tolist():
        for r in g.list_tensors(TRIAL, step).itertuples():
            record = g.read_tensor(TRIAL, step, r.iteration, r.node, r.role, r.recording_type,
                                   r.aggregation, r.sample_index)
            rows[(step, r.iteration, r.node, r.role, r.recording_type, r.aggregation,
                  r.sample_index)] = (r.type_of_execution, record)
    return Recorded((g, rows))


FILTERS = (("nodes", "node"), ("roles", "role"), ("recording_types", "recording_type"),
           ("aggregations", "aggregation"), ("iterations", "iteration"),
           ("types_of_execution", "type_of_execution"))


def _value(key, toe, column):
    return toe if column == "type_of_execution" else key[ROW.index(column)]


def _steps():
    return (st.none()
            | st.tuples(st.integers(-2, 12), st.integers(-2, 12))
            | st.builds(range, st.integers(-2, 12), st.integers(-2, 14), st.integers(1, 4)))


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_row_equals_what_read_tensor_gives(recorded, data):
    g, rows = recorded
    # Each filter on a third of the examples, its values drawn among the rows the filters
    # before it leave, so that most selections hold rows.
    chosen, pool = {}, list(rows.items())
    for arg, column in FILTERS:
        chosen[arg] = None
        if data.draw(st.integers(0, 2), f"filter {arg}") == 0:
            values = sorted({_value(k, toe, column) for k, (toe, _) in pool})
            chosen[arg] = data.draw(st.lists(st.sampled_from(values), min_size=1, max_size=3,
                                             unique=True), arg)
            pool = [(k, v) for k, v in pool if _value(k, v[0], column) in chosen[arg]]
    statistics = data.draw(st.none() | st.lists(st.sampled_from(ALL_STATISTICS), min_size=1,
                                                unique=True), "statistics")
    steps = data.draw(_steps(), "steps")
    as_pandas = data.draw(st.booleans(), "as_pandas")

    result = g.read_statistics(TRIAL, **chosen, statistics=statistics, steps=steps,
                               as_pandas=as_pandas)
    stats = list(statistics or ALL_STATISTICS)
    if not as_pandas:
        assert isinstance(result, pa.Table)
        assert pa.types.is_dictionary(result.schema.field("node").type)
        result = result.to_pandas()
    assert list(result.columns) == STATISTICS_KEY_COLUMNS + stats

    def wanted(key, toe):
        for arg, column in FILTERS:
            if chosen[arg] is not None and _value(key, toe, column) not in chosen[arg]:
                return False
        step = key[0]
        if isinstance(steps, range):
            return step in steps
        if isinstance(steps, tuple):
            return steps[0] <= step <= steps[1]
        return True

    expected = sorted(k for k, (toe, _) in rows.items() if wanted(k, toe))
    event("rows" if expected else "no rows")
    got = [tuple(r) for r in result[ROW].astype(object).itertuples(index=False)]
    assert sorted(got) == expected
    assert result["training_step"].is_monotonic_increasing
    for r in result.itertuples(index=False):
        key = tuple(getattr(r, c) for c in ROW)
        toe, record = rows[key]
        assert (r.type_of_execution, r.tensor_name, r.kind) == (toe, record.tensor_name,
                                                               record.kind)
        for name in stats:
            value = getattr(r, name)
            value = float("nan") if value is None else float(value)
            assert _same(value, record.stats[name]), (key, name, value, record.stats[name])


def _corrupt_values_column(path):
    """Overwrite every column chunk of ``values`` in a parquet file; the rest stays."""
    meta = pq.read_metadata(path)
    data = bytearray(path.read_bytes())
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    column = next(i for i, n in enumerate(names) if n.startswith("values."))
    for rg in range(meta.num_row_groups):
        chunk = meta.row_group(rg).column(column)
        start = (chunk.dictionary_page_offset if chunk.has_dictionary_page
                 else chunk.data_page_offset)
        data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))


def test_the_values_column_is_never_read(tmp_path, tiny_group):
    group = copy_group(tiny_group, tmp_path / "g")
    [shard] = (group / "trials" / TRIAL / "tensors").iterdir()
    _corrupt_values_column(shard)
    intact, broken = open_group(tiny_group), open_group(group)
    for kwargs in ({}, {"nodes": "memory", "steps": (4, 9)}, {"statistics": ["norm"]}):
        assert broken.read_statistics(TRIAL, **kwargs).equals(
            intact.read_statistics(TRIAL, **kwargs))
    assert broken.skipped == []
    with pytest.raises(StorageError, match="damaged"):  # the values are broken indeed
        broken.read_tensor(TRIAL, 1, 0, "input", "input", "forward", "batch_mean")


def test_selections_by_step(recorded):
    g, _ = recorded
    assert sorted(set(g.read_statistics(TRIAL, steps=range(0, 9, 4))["training_step"])) == [0, 4, 8]
    assert sorted(set(g.read_statistics(TRIAL, steps=(5, 9))["training_step"])) == [5, 8, 9]
    assert sorted(set(g.read_statistics(TRIAL, steps=range(4, 6))["training_step"])) == [4, 5]
    empty = g.read_statistics(TRIAL, steps=(100, 200), statistics="mean")
    assert empty.empty and list(empty.columns) == STATISTICS_KEY_COLUMNS + ["mean"]
    table = g.read_statistics(TRIAL, nodes=[], as_pandas=False)
    assert table.num_rows == 0 and table.column_names == STATISTICS_KEY_COLUMNS + list(
        ALL_STATISTICS)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"steps": 5}, ConfigurationError, "pass a range"),
    ({"steps": (1, 2, 3)}, ConfigurationError, "pass a range"),
    ({"steps": range(10, 0, -1)}, ConfigurationError, "count upwards"),
    ({"nodes": 3}, ConfigurationError, "nodes should be a name"),
    ({"iterations": ["0"]}, ConfigurationError, "iterations should be an int"),
    ({"aggregations": "mean"}, ConfigurationError, "unknown aggregation 'mean'"),
    ({"statistics": ["median"]}, NotFoundError, "unknown statistic 'median'"),
])
def test_a_wrong_selection_says_what_to_pass(recorded, kwargs, error, message):
    g, _ = recorded
    with pytest.raises(error, match=message):
        g.read_statistics(TRIAL, **kwargs)


def test_an_unknown_trial_is_not_found(recorded):
    g, _ = recorded
    with pytest.raises(NotFoundError, match="no trial 'nope'"):
        g.read_statistics("nope")
