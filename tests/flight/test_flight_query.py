"""query/flight.py's rows in read_statistics' shape (issue 30): the flight window beside
the regularly recorded steps, marked as flight data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from comgra_like import FlightRecorder
from comgra_like.query import open_group
from comgra_like.query.flight import (
    read_flight,
    read_flight_statistics,
    statistics_with_flight,
)
from comgra_like.query.tensors import STATISTICS_KEY_COLUMNS
from comgra_like.vocabulary import ALL_STATISTICS

from .loops import train


@pytest.fixture(scope="module")
def nan_trial(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("flightq")
    fr = FlightRecorder(window=8, full_steps=1, after=2)
    _, rec = train(root, "nan", 30, flight=fr, nan_at=(25, "layer1"), record_one_in=10)
    rec.finalize()
    return open_group(root / "flight")


def test_flight_rows_have_read_statistics_columns_and_the_window(nan_trial):
    group = nan_trial
    rows = read_flight_statistics(group.path, "nan")
    regular = group.read_statistics("nan")
    assert list(rows.columns) == list(regular.columns) + ["flight", "trigger"]
    assert list(rows.columns[:len(STATISTICS_KEY_COLUMNS)]) == STATISTICS_KEY_COLUMNS
    assert rows["flight"].all() and set(rows["trigger"]) == {"0000-r0-step25"}
    assert sorted(rows["training_step"].unique()) == list(range(18, 26))
    assert set(rows["recording_type"]) == {"forward", "gradient:default", "update"}
    # the same numbers as the raw window (its KPI rows are not statistics rows)
    raw = read_flight(group.path, "nan")
    raw = raw[raw["role"] != "kpi"]
    assert len(rows) == len(raw)
    np.testing.assert_array_equal(rows["norm"].to_numpy(), raw["l2_norm"].to_numpy())
    # a parameter's rows match the regular recording's keys (node, role, aggregation...)
    key = ["node", "role", "tensor_name", "kind", "recording_type", "aggregation",
           "iteration", "sample_index"]
    param = rows[rows["kind"] == "parameter"][key].drop_duplicates()
    have = regular[regular["kind"] == "parameter"][key].drop_duplicates()
    assert set(map(tuple, param.to_numpy())) <= set(map(tuple, have.to_numpy()))
    # the update ratio of an update row: ||update|| / ||value|| of its step
    upd = rows[(rows["recording_type"] == "update") & (rows["training_step"] == 20)
               & (rows["tensor_name"] == "net.0.weight")]
    val = rows[(rows["recording_type"] == "forward") & (rows["training_step"] == 20)
               & (rows["tensor_name"] == "net.0.weight")]
    assert upd["update_ratio"].item() == pytest.approx(upd["norm"].item() / val["norm"].item())
    # the NaN step is there, counted
    bad = rows[(rows["training_step"] == 25) & (rows["node"] == "layer1")
               & (rows["recording_type"] == "forward")]
    assert bad["nan_count"].item() == 1.0
    assert set(rows.columns) - {"flight", "trigger"} <= set(STATISTICS_KEY_COLUMNS) | set(
        ALL_STATISTICS)


def test_filters_like_read_statistics(nan_trial):
    group = nan_trial
    rows = read_flight_statistics(group.path, "nan", nodes=["layer1"],
                                  recording_types="forward", statistics=["norm"],
                                  steps=(20, 22))
    assert list(rows.columns) == STATISTICS_KEY_COLUMNS + ["norm", "flight", "trigger"]
    assert rows["training_step"].tolist() == [20, 21, 22]
    assert set(rows["node"]) == {"layer1"}


def test_statistics_with_flight_puts_the_window_among_the_recorded_steps(nan_trial):
    group = nan_trial
    both = statistics_with_flight(group, "nan", nodes="net.0.weight",
                                  statistics=["norm", "update_ratio"])
    assert both["training_step"].is_monotonic_increasing
    regular_steps = sorted(both.loc[~both["flight"], "training_step"].unique())
    flight_steps = sorted(both.loc[both["flight"], "training_step"].unique())
    assert regular_steps[:3] == [0, 10, 20] and 26 in regular_steps  # the `after` steps
    assert flight_steps == list(range(18, 26))
    assert both.loc[~both["flight"], "trigger"].isna().all()
    # the same parameter value at a step both recorded: the same L2 norm
    at20 = both[(both["training_step"] == 20) & (both["recording_type"] == "forward")]
    assert len(at20) == 2
    assert at20["norm"].iloc[0] == pytest.approx(at20["norm"].iloc[1], rel=1e-5)


def test_a_trial_without_windows_gives_empty_rows_with_the_columns(tmp_path):
    torch.set_num_threads(1)
    _, rec = train(tmp_path, "clean", 5, flight=FlightRecorder(), record_one_in=2)
    rec.finalize()
    group = open_group(tmp_path / "flight")
    rows = read_flight_statistics(group.path, "clean")
    assert rows.empty and "flight" in rows.columns and "norm" in rows.columns
    both = statistics_with_flight(group, "clean")
    assert len(both) == len(group.read_statistics("clean")) and not both["flight"].any()
