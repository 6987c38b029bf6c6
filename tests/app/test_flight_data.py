"""The Flight page's reads (app/flight_data.py) on a real triggered group: the real
FlightRecorder armed on tests/flight/loops.py's MLP, recorded 1 step in 10, with one bad
batch at step 30 (a loss spike) and a NaN made in ``layer1`` at step 55."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from comgra_like.app.data import AppData

#: The triggered trial's name and what the recorder wrote for it (checked below).
TRIAL = "two"
SPIKE, NAN = "0000-r0-step30", "0001-r0-step55"
WINDOW = 16


def make_triggered_group(root: Path, trial: str = TRIAL) -> Path:
    """Train the MLP 70 steps with the flight recorder armed (window 16) and record 1 step
    in 10; returns the group folder. Two windows: a loss spike at step 30 (steps 15-30)
    and a non-finite value at step 55 (steps 40-55)."""
    torch = pytest.importorskip("torch")
    from comgra_like import FlightRecorder
    from tests.flight.loops import train

    torch.set_num_threads(1)
    flight = FlightRecorder(window=WINDOW, full_steps=1, after=2)
    _, recorder = train(root, trial, 70, flight=flight, nan_at=(55, "layer1"), outlier_at=30,
                        record_one_in=10, lr=0.02, sample_ids=True)
    recorder.finalize()
    return root / "flight"


@pytest.fixture(scope="module")
def triggered(tmp_path_factory) -> Path:
    return make_triggered_group(tmp_path_factory.mktemp("flight_gui"))


@pytest.fixture()
def data(triggered) -> AppData:
    return AppData(triggered)


def test_triggers_are_listed_with_kind_step_tensor_value_and_time(data):
    from comgra_like.app import flight_data as fd

    rows = fd.triggers(data, TRIAL)
    assert [(r.name, r.kind, r.step, r.tensor, r.window) for r in rows] == [
        (SPIKE, "loss_spike", 30, "loss", (15, 30)),
        (NAN, "non_finite", 55, "layer1", (40, 55)),
    ]
    assert rows[0].value > 100 and rows[1].value == 1.0  # the spike's loss, one NaN
    assert all(r.time is not None and r.time > 1.6e9 for r in rows)
    # the sample ids of every window step (the loop's register_sample_ids: 16 per step)
    assert sorted(rows[1].sample_ids) == list(range(40, 56))
    assert rows[1].sample_ids[55] == list(range(55 * 16, 56 * 16))
    assert fd.triggers(data, "no such trial") == [] and fd.triggers(data, None) == []
    assert fd.pick_trigger(rows, NAN).name == NAN
    assert fd.pick_trigger(rows, "gone").name == NAN  # the latest
    assert fd.trials_with_triggers(data) == [TRIAL]


def test_window_series_is_dense_and_the_recorded_series_is_sparse(data):
    from comgra_like.app import flight_data as fd

    rows = fd.window_rows(data, TRIAL, NAN)
    assert fd.window_roles(rows) == ["value", "gradient", "update", "kpi"]
    assert fd.window_tensors(rows, "value")[:7] == [
        "net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight",
        "net.4.bias", "input"]
    window = fd.window_series(rows, "layer1", "value", "nan_count")
    assert window["training_step"].tolist() == list(range(40, 56))
    assert window["value"].tolist() == [0.0] * 15 + [1.0]
    # a parameter: the recorded rows are the same number (no batch dimension)
    norm = fd.window_series(rows, "net.0.weight", "value", "norm")
    recorded, aggregation = fd.recorded_series(data, TRIAL, rows, "net.0.weight", "value",
                                               "norm")
    assert aggregation == "none"
    assert recorded["training_step"].tolist() == [0, 10, 20, 30, 31, 32, 42, 52, 56, 57, 67]
    # the parameter at step 42 and 52 is the flight recorder's number too (at start_batch)
    for step in (42, 52):
        a = norm.loc[norm["training_step"] == step, "value"].item()
        b = recorded.loc[recorded["training_step"] == step, "value"].item()
        assert a == pytest.approx(b, rel=1e-5)
    # an activation: its whole-tensor abs max is the batch abs max of the recorded samples
    # only when every sample is recorded; here 2 of 16 are: said by the aggregation
    _, agg = fd.recorded_series(data, TRIAL, rows, "layer1", "value", "abs_max")
    assert agg == "batch_abs_max"
    _, agg = fd.recorded_series(data, TRIAL, rows, "layer1", "value", "std")
    assert agg == "batch_mean"
    # a KPI from read_kpis
    kpi, agg = fd.recorded_series(data, TRIAL, rows, "train/loss", "kpi", "mean")
    assert agg == "none" and 42 in kpi["training_step"].tolist()
    flight_kpi = fd.window_series(rows, "train/loss", "kpi", "mean")
    assert flight_kpi.loc[flight_kpi["training_step"] == 42, "value"].item() == pytest.approx(
        kpi.loc[kpi["training_step"] == 42, "value"].item(), rel=1e-5)


def test_the_finding_names_the_origin_and_the_graph_is_a_recorded_step_after(data):
    from comgra_like.app import flight_data as fd

    rows = fd.triggers(data, TRIAL)
    nan = fd.trigger_finding(data, TRIAL, NAN)
    assert nan["kind"] == "flight_non_finite"
    movers = fd.first_movers(nan)
    assert movers[0]["name"] == "layer1" and movers[0]["step"] == 55 and movers[0]["non_finite"]
    spike = fd.trigger_finding(data, TRIAL, SPIKE)
    movers = fd.first_movers(spike)
    assert movers and all(m["step"] <= 30 for m in movers)
    step, model = fd.window_graph(data, TRIAL, rows[1])
    assert step == 56 and "layer1" in model.nodes
    step, _ = fd.window_graph(data, TRIAL, rows[0])
    assert step == 30  # the trigger's own step was recorded (1 in 10)


def test_a_damaged_window_is_a_missing_one(triggered, tmp_path):
    import shutil

    from comgra_like.app import flight_data as fd

    copy = tmp_path / "flight"
    shutil.copytree(triggered, copy)
    stats = next((copy / "trials" / TRIAL / "flight").glob(f"{NAN}.stats.parquet"))
    stats.write_bytes(b"not parquet")
    data = AppData(copy)
    assert [r.name for r in fd.triggers(data, TRIAL)] == [SPIKE, NAN]
    rows = fd.window_rows(data, TRIAL, NAN)
    assert rows.empty
    assert fd.window_series(rows, "layer1", "value", "mean").empty
    assert not fd.window_rows(data, TRIAL, SPIKE).empty
    assert np.isfinite(fd.window_series(fd.window_rows(data, TRIAL, SPIKE), "loss", "value",
                                        "mean")["value"]).all()
