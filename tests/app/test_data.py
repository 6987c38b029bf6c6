"""The GUI's data layer (comgra_like.app.data) on data written by the real recorder."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from comgra_like.app import create_app
from comgra_like.app import selection as sel
from comgra_like.app.data import AppData
from comgra_like.app.pages.tensors import is_complete


def test_options_follow_the_recording(tiny_group):
    data = AppData(tiny_group)
    source = data.option_source()
    assert source.options("trial", {}) == ["trial_a", "trial_b"]
    up = {"trial": "trial_a"}
    assert source.options("type_of_execution", up) == ["any", "long", "short"]
    up["type_of_execution"] = "long"
    assert source.options("training_step", up) == [1, 5, 9]
    up["training_step"] = 5
    assert source.options("iteration", up) == [0, 1, 2]
    up["iteration"] = 2
    nodes = source.options("node", up)
    assert {"input", "memory", "memory@1", "loss", "net.cell.weight", "outer"} <= set(nodes)
    up["node"] = "net.cell.weight"
    assert source.options("role", up) == ["net.cell.weight"]
    up["role"] = "net.cell.weight"
    assert source.options("recording_type", up) == ["forward", "gradient:main_loss", "update"]
    up["recording_type"] = "update"
    assert source.options("aggregation", up) == ["none"]
    up |= {"node": "memory", "role": "new", "recording_type": "forward"}
    aggregations = source.options("aggregation", up)
    assert aggregations[:3] == ["batch_mean", "batch_abs_max", "batch_std"]
    assert aggregations[3:] == [f"sample:{i}" for i in range(12)]


def test_import_nodes_read_the_earlier_iteration(tiny_group):
    data = AppData(tiny_group)
    current = {
        "trial": "trial_a",
        "type_of_execution": "any",
        "training_step": 5,
        "iteration": 2,
        "node": "memory@1",
        "role": "new",
        "recording_type": "forward",
        "aggregation": "sample:3",
    }
    imported = data.read_tensor(current)
    assert imported.iteration == 1 and imported.node == "memory"
    at_one = data.read_tensor(current | {"iteration": 1, "node": "memory"})
    np.testing.assert_array_equal(imported.values, at_one.values)
    assert imported.values.shape == (3,)


def test_series_and_tensor_reads(tiny_group):
    data = AppData(tiny_group)
    current = sel.refresh(None, data.option_source())["current"]
    assert is_complete(current)
    record = data.read_tensor(current)
    assert set(record.stats) >= {"mean", "std", "abs_max"}
    series = data.read_series(current, "mean")
    assert list(series["training_step"]) == [0, 1, 4, 5, 8, 9, 10]
    assert series.loc[series.training_step == current["training_step"], "value"].iloc[
        0
    ] == pytest.approx(record.stats["mean"])


def test_a_missing_group_is_waited_for(tmp_path, tiny_group):
    target = tmp_path / "later"
    app = create_app(target)
    data = app.comgra_parts.data
    status = data.refresh(force=True)
    assert status.problem and "does not exist" in status.problem
    assert data.option_source().options("trial", {}) == []
    shutil.copytree(tiny_group, target)
    status = data.refresh(force=True)
    assert status.problem is None and dict(status.trial_statuses) == {
        "trial_a": "finished",
        "trial_b": "finished",
    }
    assert data.trial_version("trial_a") >= 1


def test_an_empty_group_says_so(tmp_path):
    (tmp_path / "trials").mkdir()
    status = AppData(tmp_path).status()
    assert "No trials" in status.problem


def test_create_app_builds_independent_apps(tiny_group):
    first, second = create_app(tiny_group), create_app(tiny_group)
    assert first.comgra_parts.data is not second.comgra_parts.data
    assert len(first.callback_map) == len(second.callback_map) > 5


def test_refreshes_and_cache_usage_are_reported(tmp_path, tiny_group):
    target = tmp_path / "later"
    data = AppData(target, refresh_seconds=0)  # its first refresh: the path is not there
    data.refresh(force=True)
    assert [r.version for r in data.refreshes()] == [0, 0]
    shutil.copytree(tiny_group, target)
    data.refresh(force=True)
    opened = data.refreshes()[-1]
    assert opened.version == data.group.version > 0
    assert 0 < opened.group_seconds <= opened.seconds
    before = data.cache_usage()["bytes"]
    data.tensor_index("trial_a", 0)
    usage = data.cache_usage()
    assert before < usage["bytes"] <= usage["limit"]
    # One cache: the group's tables and the GUI's derived values share the bound.
    assert data.group.cache is data.cache
    assert data.is_indexed("trial_a", 0) and data.group.cache_bytes_used == usage["bytes"]
