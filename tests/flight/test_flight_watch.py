"""watch(model, flight_recorder=...): the flight recorder on every training step while
watch records one step in log_freq (issue 30)."""

from __future__ import annotations

import json

import pytest
import torch

from comgra_like import ConfigurationError, FlightRecorder, watch
from comgra_like.analysis import find
from comgra_like.format.trial import flight_triggers
from comgra_like.query import open_group

from .loops import make_model


def _loop(tmp_path, trial, steps, flight, nan_param_at=None, log_freq=1000):
    torch.set_num_threads(1)
    model = make_model(0)
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(12, 3, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    handle = watch(model, log_freq=log_freq, standalone_dir=tmp_path, trial_id=trial,
                   verbose=False, flight_recorder=flight)
    with handle:
        for step in range(steps):
            x = torch.randn(16, 12, generator=gen)
            opt.zero_grad(set_to_none=True)
            if nan_param_at == step:
                with torch.no_grad():
                    x[0, 0] = float("nan")
            loss = ((model(x) - x @ teacher) ** 2).mean()
            loss.backward()
            opt.step()
    return model, handle


def test_watch_flight_catches_a_nan_between_recorded_steps(tmp_path):
    threads = torch.get_num_threads()
    try:
        fr = FlightRecorder(window=16)
        _loop(tmp_path, "w", 80, fr, nan_param_at=57)
        # the NaN input at step 57 makes the output NaN, then every gradient and update
        assert [(f["kind"], f["step"]) for f in fr.fired] == [("non_finite", 57)]
        # the first module whose output is NaN, named as watch names it
        assert (fr.fired[0]["tensor"], fr.fired[0]["node"]) == ("model.0 output 0", "model.0")
        group = open_group(tmp_path)
        (trigger,) = group.list_flight_triggers("w")
        rows = group.read_flight("w")
        assert sorted(rows["training_step"].unique()) == list(range(42, 58))
        have = set(zip(rows["name"], rows["role"]))
        for name, _ in make_model(0).named_parameters():
            for role in ("value", "gradient", "update"):
                assert (f"model.{name}", role) in have
        # every module's output and its gradient, on every step of the window
        modules = ["model"] + [f"model.{n}" for n, _ in make_model(0).named_children()]
        for step, at in rows.groupby("training_step"):
            names = set(zip(at["name"], at["role"]))
            for node in modules:
                assert (f"{node} output 0", "value") in names, (step, node)
                assert (f"{node} output 0", "gradient") in names, (step, node)
        # the `after` steps (8) are recorded in full by watch, then log_freq again
        assert sorted(group.list_steps("w")["training_step"].unique()) == [
            0, *range(58, 66)]
        (finding,) = [f for f in find(group, "w") if f.kind == "flight_non_finite"]
        assert finding.steps == (57,) and finding.node == "model.0"
        # trial.json names the trigger (through the writer)
        info = json.loads((tmp_path / "trials" / "w" / "trial.json").read_text())
        (named,), dropped = flight_triggers(info)
        assert dropped == 0
        assert (named["kind"], named["training_step"], named["tensor"]) == (
            "non_finite", 57, "model.0 output 0")
        assert named["window_steps"] == list(range(42, 58))
        assert named["detail"]["name"] == trigger.name
    finally:
        torch.set_num_threads(threads)


def test_watch_flight_leaves_training_bitwise_identical_and_clean_runs_silent(tmp_path):
    threads = torch.get_num_threads()
    try:
        fr = FlightRecorder()
        armed, _ = _loop(tmp_path, "armed", 150, fr, log_freq=50)
        plain, _ = _loop(tmp_path, "plain", 150, None, log_freq=50)
        for a, b in zip(armed.parameters(), plain.parameters()):
            assert torch.equal(a, b)
        assert fr.fired == []
    finally:
        torch.set_num_threads(threads)


def test_watch_flight_with_a_users_recorder_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="pass flight_recorder= to your"):
        watch(make_model(0), recorder=object(), flight_recorder=FlightRecorder())
