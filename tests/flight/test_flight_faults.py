"""Fault injection with watch(flight_recorder=...) (issue 30's "Done means"): a NaN made
at a seeded random step in a seeded random module while watch records 1 step in 1,000;
a learning-rate jump; clean runs of the real-model tests' tiny transformers fire
nothing."""

from __future__ import annotations

import random

import pytest
import torch

from comgra_like import FlightRecorder, watch
from comgra_like.analysis import find
from comgra_like.query import open_group

from .loops import make_model


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _watched_loop(tmp_path, trial, steps, flight, *, nan_at=None, lr_jump_at=None,
                  log_freq=1000):
    """The tests' MLP under watch(); ``nan_at=(step, child index)``: that module's output
    gets one NaN at that step (a forward hook of the test's own)."""
    model = make_model(0)
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(12, 3, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    state = {"step": -1}

    def poison(module, args, output):
        if nan_at is not None and state["step"] == nan_at[0]:
            mask = torch.zeros_like(output)
            mask.view(-1)[0] = float("nan")
            return output + mask
        return None

    if nan_at is not None:
        model[nan_at[1]].register_forward_hook(poison)
    handle = watch(model, log_freq=log_freq, standalone_dir=tmp_path, trial_id=trial,
                   verbose=False, flight_recorder=flight)
    with handle:
        for step in range(steps):
            state["step"] = step
            if lr_jump_at is not None and step == lr_jump_at:
                for group in opt.param_groups:
                    group["lr"] *= 20
            x = torch.randn(16, 12, generator=gen)
            opt.zero_grad(set_to_none=True)
            loss = ((model(x) - x @ teacher) ** 2).mean()
            loss.backward()
            opt.step()
            if step % 7 == 0:  # an eval forward now and then: not a step
                model.eval()
                with torch.no_grad():
                    model(torch.full((4, 12), 1e6))
                model.train()
    return handle


def test_watch_nan_at_a_random_step_and_module_is_found_there(tmp_path):
    rng = random.Random(300)
    step, child = rng.randrange(40, 200), rng.choice([0, 1, 2, 3, 4])
    node = f"model.{child}"
    fr = FlightRecorder(window=24, after=3)
    _watched_loop(tmp_path, "nan", step + 6, fr, nan_at=(step, child))
    assert [(f["kind"], f["step"], f["node"]) for f in fr.fired] == [
        ("non_finite", step, node)]
    group = open_group(tmp_path)
    (trigger,) = group.list_flight_triggers("nan")
    assert (trigger.step, trigger.node) == (step, node)
    rows = group.read_flight("nan")
    # the window holds the steps before it for every tensor: parameters (value,
    # gradient, update) and every module's output and gradient
    assert sorted(rows["training_step"].unique()) == list(range(step - 23, step + 1))
    expected = {(f"model.{n}", r) for n, _ in make_model(0).named_parameters()
                for r in ("value", "gradient", "update")}
    expected |= {(f"{m} output 0", r) for m in ["model"] + [f"model.{i}" for i in range(5)]
                 for r in ("value", "gradient")}
    for s, at in rows.groupby("training_step"):
        assert expected <= set(zip(at["name"], at["role"])), s
    # the eval forwards (huge inputs) are not in the window: every value is moderate
    before = rows[(rows["training_step"] < step) & (rows["role"] == "value")]
    assert before["abs_max"].max() < 1e3
    (finding,) = [f for f in find(group, "nan") if f.kind == "flight_non_finite"]
    assert finding.steps == (step,) and finding.node == node
    # the steps after it are recorded in full
    assert sorted(group.list_steps("nan")["training_step"].unique()) == [
        0, *range(step + 1, step + 4)]


def test_watch_learning_rate_jump_fires_a_spike_at_the_jump(tmp_path):
    fr = FlightRecorder(window=32)
    _watched_loop(tmp_path, "lr", 90, fr, lr_jump_at=70)
    assert fr.fired, "no trigger"
    first = fr.fired[0]
    assert first["step"] == 70 and first["kind"] in ("update_spike", "grad_norm_spike")


REAL_MODELS = ("gpt2", "bert", "t5")


@pytest.mark.parametrize("name", REAL_MODELS)
def test_clean_runs_of_the_tiny_real_models_fire_nothing(tmp_path, name):
    """The real-model tests' tiny transformers (built from configurations), watched with
    a flight recorder for 40 steps of AdamW (24 of them judged after the warm-up): no
    trigger, and the window was kept for every step."""
    models = pytest.importorskip("tests.realmodels.models")
    case = models.CASES[name]
    torch.manual_seed(0)
    model = case.build()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fr = FlightRecorder(window=32)
    handle = watch(model, log_freq=1000, standalone_dir=tmp_path, trial_id=name,
                   verbose=False, flight_recorder=fr)
    data = torch.Generator().manual_seed(1)
    with handle:
        for _ in range(40):
            loss = model(**case.batch(data)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert fr.fired == [] and fr.suppressed == 0
    assert fr.armed and len(fr.steps_kept()) == 32
