"""The flight recorder on a real training loop with the comgra API (issue 30): faults
injected at a seeded random step and node while recording 1 step in 1,000; a learning
rate jump; a clean run; bitwise identical training; on_trigger="raise"; a kill right
after a trigger."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from comgra_like import ConfigurationError, FlightRecorder, FlightTriggerError
from comgra_like.analysis import find
from comgra_like.format.trial import flight_triggers
from comgra_like.query import open_group
from comgra_like.query.flight import list_flight_triggers, read_flight, read_flight_values

from .loops import NODES, train

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight",
          "net.4.bias")


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: threads would only contend
    yield
    torch.set_num_threads(before)


def test_nan_at_a_random_step_and_node_is_caught_with_its_window(tmp_path):
    rng = random.Random(30)
    step, node = rng.randrange(40, 300), rng.choice(NODES[1:6])
    fr = FlightRecorder(window=32, full_steps=2, after=4)
    _, rec = train(tmp_path, "nan", step + 8, flight=fr, nan_at=(step, node))
    rec.finalize()
    assert [(f["kind"], f["step"], f["tensor"]) for f in fr.fired] == [
        ("non_finite", step, node)]
    group = open_group(tmp_path / "flight")
    # the regular recording has step 0 and the `after` steps only
    assert sorted(group.list_steps("nan")["training_step"].unique()) == [
        0, *range(step + 1, step + 5)]
    (trigger,) = group.list_flight_triggers("nan")
    assert group.read_flight("nan", trigger.name).equals(read_flight(group.path, "nan"))
    assert (trigger.kind, trigger.step, trigger.node, trigger.window) == (
        "non_finite", step, node, (step - 31, step))
    rows = read_flight(group.path, "nan")
    assert rows["flight"].all()
    assert sorted(rows["training_step"].unique()) == list(range(step - 31, step + 1))
    for s, at in rows.groupby("training_step"):
        have = set(zip(at["name"], at["role"]))
        assert {(n, "value") for n in NODES} <= have, s
        assert {(n, "gradient") for n in NODES[1:]} <= have, s
        for p in PARAMS:
            assert {(p, "value"), (p, "gradient"), (p, "update")} <= have, s
        bad = (at["nan_count"] > 0).any()
        assert bad == (s == step)
    # the finding names the node and the step
    (finding,) = [f for f in find(group, "nan") if f.kind == "flight_non_finite"]
    assert (finding.node, finding.steps, finding.role) == (node, (step,), "value")
    assert f"step {step}" in finding.explanation and repr(node) in finding.explanation
    assert finding.where["training_step"] == step + 1  # the first recorded step after it


def test_trial_json_names_each_trigger(tmp_path):
    fr = FlightRecorder(window=16, cooldown=5, after=0)
    _, rec = train(tmp_path, "named", 80, flight=fr, nan_at=(30, "relu2"), lr_jump_at=60)
    rec.finalize()
    info = json.loads((tmp_path / "flight" / "trials" / "named" / "trial.json").read_text())
    named, dropped = flight_triggers(info)
    assert dropped == 0
    assert [(n["kind"], n["training_step"]) for n in named] == [
        (f["kind"], f["step"]) for f in fr.fired]
    assert named[0]["tensor"] == "relu2" and named[0]["detail"]["node"] == "relu2"
    assert named[0]["window_steps"] == list(range(15, 31))
    assert math.isnan(named[0]["value"]) or named[0]["value"] >= 1


def test_full_values_of_the_last_steps_are_kept(tmp_path):
    kept = {}

    def on_step(step, values, _rec):
        if step in (58, 59):
            kept[step] = {k: v.detach().clone() for k, v in values.items()}

    fr = FlightRecorder(window=16, full_steps=2, after=0)
    _, rec = train(tmp_path, "full", 61, flight=fr, nan_at=(59, "layer2"), on_step=on_step,
                   sample_ids=True)
    rec.finalize()
    group = tmp_path / "flight"
    (trigger,) = list_flight_triggers(group, "full")
    values = read_flight_values(group, "full", trigger.name)
    assert {s for s, _, _ in values} == {58, 59}
    for s in (58, 59):
        for name in NODES:
            got = torch.tensor(values[(s, name, "value")])
            assert torch.equal(got, kept[s][name].float()) or (
                s == 59 and torch.equal(got.isnan(), kept[s][name].isnan())), (s, name)
    assert values[(59, "layer2", "value")].reshape(-1)[0] != values[(59, "layer2", "value")
                                                                   ].reshape(-1)[0]  # NaN
    for p in PARAMS:
        assert (58, p, "update") in values and (59, p, "gradient") in values
    # sample ids of every step in the window
    assert trigger.sample_ids[59] == list(range(59 * 16, 60 * 16))
    assert sorted(trigger.sample_ids) == list(range(44, 60))


def test_full_values_are_not_copies_and_one_changed_in_place_is_left_out(tmp_path, caplog):
    """The ring keeps the tensors themselves (no copy per step); a tensor changed in
    place after its step is left out of the window's full values and named."""
    def on_step(step, values, _rec):
        values["relu1"].detach().mul_(2.0)  # after the step: an in-place change

    fr = FlightRecorder(window=8, full_steps=2, after=0)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        _, rec = train(tmp_path, "inplace", 21, flight=fr, nan_at=(20, "layer2"),
                       on_step=on_step)
    rec.finalize()
    (trigger,) = list_flight_triggers(tmp_path / "flight", "inplace")
    values = read_flight_values(tmp_path / "flight", "inplace", trigger.name)
    assert (20, "relu1", "value") in values  # written before on_step changed it
    assert (19, "relu1", "value") not in values and (19, "relu2", "value") in values
    assert trigger.record["full_values_changed_in_place"] == ["relu1 (value, step 19)"]
    assert sum("changed in place" in r.message for r in caplog.records) == 1


def test_memory_bound_of_the_full_values(tmp_path, caplog):
    fr = FlightRecorder(window=8, full_steps=2, after=0, max_full_bytes=3 * 1500)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        _, rec = train(tmp_path, "bound", 22, flight=fr, nan_at=(20, "relu2"))
    rec.finalize()
    (trigger,) = list_flight_triggers(tmp_path / "flight", "bound")
    values = read_flight_values(tmp_path / "flight", "bound", trigger.name)
    for s in (19, 20):
        nbytes = sum(v.size * 4 for (step, _, _), v in values.items() if step == s)
        assert 0 < nbytes <= 1500
    assert sum("keeps full values of at most 1500 bytes" in r.message
               for r in caplog.records) == 1


def test_learning_rate_jump_fires_a_spike_at_the_jump(tmp_path):
    fr = FlightRecorder(window=64, full_steps=1, after=2)
    _, rec = train(tmp_path, "lr", 215, flight=fr, lr_jump_at=200)
    rec.finalize()
    assert fr.fired[0]["kind"] == "update_spike" and fr.fired[0]["step"] == 200
    assert fr.fired[0]["value"] > 10 * fr.fired[0]["median"]
    group = open_group(tmp_path / "flight")
    (finding,) = [f for f in find(group, "lr") if f.kind == "flight_update_spike"]
    assert finding.steps == (200, 200)  # the updates moved first, at the jump
    assert finding.role == "update" and finding.node in PARAMS


def test_a_clean_run_fires_nothing(tmp_path):
    fr = FlightRecorder()
    _, rec = train(tmp_path, "clean", 500, flight=fr, record_one_in=100)
    rec.finalize()
    assert fr.fired == [] and fr.suppressed == 0
    assert list_flight_triggers(tmp_path / "flight", "clean") == []
    assert not (tmp_path / "flight" / "trials" / "clean" / "flight").exists()
    assert not [f for f in find(open_group(tmp_path / "flight"), "clean")
                if f.kind.startswith("flight_")]


def test_training_is_bitwise_identical_with_the_flight_recorder(tmp_path):
    bare, _ = train(tmp_path, "bare", 40, recorder=False)
    plain, rec = train(tmp_path, "plain", 40, record_one_in=7)
    rec.finalize()
    armed, rec = train(tmp_path, "armed", 40, record_one_in=7,
                       flight=FlightRecorder(window=8, full_steps=2, predicate=lambda s: False))
    rec.finalize()
    for a, b, c in zip(bare.parameters(), plain.parameters(), armed.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_on_trigger_raise_stops_training_after_the_window_is_written(tmp_path):
    recorders = []
    fr = FlightRecorder(window=16, on_trigger="raise")
    with pytest.raises(FlightTriggerError, match=r"non_finite at training step 30 in 'layer1'"):
        train(tmp_path, "raise", 100, flight=fr, nan_at=(30, "layer1"), recorders=recorders)
    # written before the exception: readable while the recorder is still open
    (trigger,) = list_flight_triggers(tmp_path / "flight", "raise")
    assert trigger.step == 30 and len(read_flight(tmp_path / "flight", "raise")) > 0
    recorders[0].finalize()


def test_a_failing_predicate_disarms_the_flight_recorder_and_training_goes_on(tmp_path,
                                                                               caplog):
    def predicate(step):
        raise ZeroDivisionError("bug in the user's predicate")

    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        armed, rec = train(tmp_path, "broken", 30, flight=FlightRecorder(predicate=predicate),
                           nan_at=(20, "layer1"))
    rec.finalize()
    bare, _ = train(tmp_path, "bare", 30, recorder=False, nan_at=(20, "layer1"))
    assert sum("flight recorder failed" in r.message for r in caplog.records) == 1
    for a, b in zip(bare.parameters(), armed.parameters()):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())
    assert list_flight_triggers(tmp_path / "flight", "broken") == []


def test_bad_arguments_are_refused_clearly(tmp_path):
    with pytest.raises(ConfigurationError, match="window"):
        FlightRecorder(window=1)
    with pytest.raises(ConfigurationError, match="unknown trigger 'nan'"):
        FlightRecorder(triggers=("nan",))
    with pytest.raises(ConfigurationError, match="on_trigger"):
        FlightRecorder(on_trigger="stop")
    with pytest.raises(ConfigurationError, match="FlightRecorder"):
        train(tmp_path, "x", 1, flight="yes")
    fr = FlightRecorder()
    _, rec = train(tmp_path, "one", 1, flight=fr)
    with pytest.raises(ConfigurationError, match="one per recorder"):
        train(tmp_path, "two", 1, flight=fr)
    rec.finalize()


def test_window_reads_back_after_a_kill_right_after_the_trigger(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time, torch
        torch.set_num_threads(1)
        from comgra_like import FlightRecorder
        from tests.flight.loops import train
        fr = FlightRecorder(window=24)

        def on_step(step, values, rec):
            if fr.fired:
                print("TRIGGERED", step, flush=True)
                time.sleep(600)

        train({str(tmp_path)!r}, "killed", 200, flight=fr, nan_at=(70, "relu1"),
              on_step=on_step)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    try:
        line = child.stdout.readline()
        assert line.startswith("TRIGGERED 70"), line
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    (trigger,) = list_flight_triggers(tmp_path / "flight", "killed")
    assert (trigger.kind, trigger.step, trigger.node) == ("non_finite", 70, "relu1")
    rows = read_flight(tmp_path / "flight", "killed")
    assert sorted(rows["training_step"].unique()) == list(range(47, 71))
    assert read_flight_values(tmp_path / "flight", "killed", trigger.name)
    # trial.json names the trigger: the writer process had it before the kill and
    # writes it when it sees the training process gone
    trial_json = tmp_path / "flight" / "trials" / "killed" / "trial.json"
    named = []
    deadline = time.monotonic() + 60
    while not named and time.monotonic() < deadline:
        named = flight_triggers(json.loads(trial_json.read_text()))[0]
        time.sleep(0.2)
    assert [(n["kind"], n["training_step"], n["tensor"]) for n in named] == [
        ("non_finite", 70, "relu1")]
    assert named[0]["window_steps"] == list(range(47, 71))
    assert named[0]["detail"]["name"] == trigger.name


def test_batched_reductions_give_the_same_statistics(tmp_path):
    """The GPU's batched reductions (segment sums over the flattened parameters, one
    launch for many tensors), forced on the CPU, agree with the per-tensor ones."""
    windows = {}
    for batched, full_steps in ((False, 2), (True, 2), (True, 0)):
        fr = FlightRecorder(window=8, after=0, full_steps=full_steps)
        fr._force_batched = batched
        trial = f"b{int(batched)}{full_steps}"
        _, rec = train(tmp_path, trial, 12, flight=fr, nan_at=(10, "relu2"))
        rec.finalize()
        assert [(f["kind"], f["step"], f["tensor"]) for f in fr.fired] == [
            ("non_finite", 10, "relu2")]
        windows[batched, full_steps] = read_flight(tmp_path / "flight", trial)
    a, b, uncounted = windows[False, 2], windows[True, 2], windows[True, 0]
    assert list(a["name"]) == list(b["name"]) and list(a["role"]) == list(b["role"])
    stats = ["mean", "std", "abs_max", "l2_norm", "nan_count", "inf_count"]
    stats = ["mean", "std", "abs_max", "l2_norm"]
    assert (a[stats].isna() == b[stats].isna()).all().all()
    finite = a[stats].notna().to_numpy() & b[stats].notna().to_numpy()
    assert abs(a[stats].to_numpy()[finite] - b[stats].to_numpy()[finite]).max() < 1e-4
    # the GPU's rows (batched or not): no NaN/Inf where the abs max is finite (0); where
    # it is not, counted from the step's full values the full_steps ring keeps: the
    # same counts as the CPU's per-tensor path
    finite_max = np.isfinite(b["abs_max"].to_numpy())
    assert (b["nan_count"][finite_max] == 0).all() and (b["inf_count"][finite_max] == 0).all()
    assert (~finite_max).any() and not a["nan_count"].isna().any()
    np.testing.assert_array_equal(b["nan_count"], a["nan_count"])
    np.testing.assert_array_equal(b["inf_count"], a["inf_count"])
    assert (b["nan_count"][~finite_max] > 0).all()
    # without full values kept they cannot be counted: "not counted" (NaN), but for the
    # one-value rows (the loss, its KPI), which are their own count
    bad = ~np.isfinite(uncounted["abs_max"].to_numpy())
    one_value = uncounted["name"].isin(["loss", "train/loss"]).to_numpy()
    assert (bad & one_value).sum() >= 2 and (bad & ~one_value).sum() > 10
    assert (uncounted["nan_count"][bad & one_value] == 1).all()
    assert uncounted["nan_count"][bad & ~one_value].isna().all()


def test_a_nan_in_one_batched_gradient_is_not_spread_to_the_tensors_after_it(tmp_path):
    """The GPU's batched sums (a running sum over the concatenated gradients) are NaN
    for every tensor after a NaN in their chunk; those tensors are still finite: the
    trigger, its count of bad rows and the finding are those of the per-tensor path."""
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    found, spread = {}, {}
    for batched in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                              nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        fr = FlightRecorder(window=8, after=0)
        fr._force_batched = batched
        trial = f"c{int(batched)}"
        rec = ComgraRecorder(tmp_path, "g", trial, DecisionMakerForRecordingsFrequencyPerType(
            1000), flight_recorder=fr)
        rec.track_module("net", model)
        gen = torch.Generator().manual_seed(1)
        for step in range(6):
            rec.start_batch(step, 4)
            rec.start_iteration()
            loss = model(torch.randn(4, 4, generator=gen)).pow(2).mean()
            rec.register_tensor("loss", loss, is_loss=True)
            opt.zero_grad()
            loss.backward()
            if step == 4:  # one value of the first layer's gradient only
                model[0].weight.grad[0, 0] = float("nan")
            rec.record_current_gradients("loss")
            rec.finish_iteration()
            opt.step()
            rec.finish_batch()
        rec.finalize()
        (trigger,) = fr.fired
        window = read_flight(tmp_path / "g", trial)
        at4 = window[window["training_step"] == 4]
        grads = at4[(at4["role"] == "gradient") & (at4["kind"] == "parameter")]
        found[batched] = (trigger["kind"], trigger["step"], trigger["tensor"],
                          trigger["rows_non_finite"],
                          sorted(grads.loc[np.isfinite(grads["abs_max"]), "name"]))
        spread[batched] = grads.sort_values("name")[["mean", "std"]].to_numpy()
        finding = next(f for f in find(tmp_path / "g", trial) if f.kind == "flight_non_finite")
        assert finding.numbers["tensor"] == "net.0.weight", finding.explanation
        assert finding.steps[0] == 4 and finding.numbers["other_non_finite_rows"] == 1
    assert found[True] == found[False]
    assert found[True][:3] == ("non_finite", 4, "net.0.weight")
    # the gradient and the update of net.0.weight: nothing else was bad at step 4
    assert found[True][3] == 2
    assert found[True][4] == ["net.0.bias", "net.2.bias", "net.2.weight", "net.4.bias",
                              "net.4.weight"]
    # their mean and std too (the batched running sum is NaN after the NaN: summed again
    # from the step's full values); NaN only for net.0.weight's, as on the CPU
    np.testing.assert_allclose(spread[True], spread[False], rtol=1e-5, atol=1e-7)
    assert np.isnan(spread[True]).sum() == 2


def test_one_bad_batch_fires_a_loss_spike_at_its_step(tmp_path):
    fr = FlightRecorder(window=32, after=0)
    _, rec = train(tmp_path, "outlier", 130, flight=fr, outlier_at=120)
    rec.finalize()
    assert [f["step"] for f in fr.fired] == [120]
    kinds = {t["kind"] for t in fr.fired[0]["triggers"]}
    assert "loss_spike" in kinds and "grad_norm_spike" in kinds
    (trigger,) = list_flight_triggers(tmp_path / "flight", "outlier")
    assert trigger.kind == "loss_spike" and trigger.tensor == "loss"
    assert trigger.value > 100 * trigger.record["median"]


def test_predicate_and_cooldown(tmp_path):
    fr = FlightRecorder(window=8, after=0, cooldown=10,
                        predicate=lambda s: s.step % 5 == 0 and s.step > 0 and "every 5th")
    _, rec = train(tmp_path, "pred", 23, flight=fr)
    rec.finalize()
    assert [(f["kind"], f["step"], f["said"]) for f in fr.fired] == [
        ("predicate", 5, "every 5th"), ("predicate", 20, "every 5th")]
    assert fr.suppressed == 2  # steps 10 and 15, inside the cooldown after step 5
    assert [t.step for t in list_flight_triggers(tmp_path / "flight", "pred")] == [5, 20]


def test_sums_of_many_tensors_in_chunks_equal_their_own_sums(monkeypatch):
    """The batched sums (concatenation, float64 running sum, differences at the ends),
    also split into chunks, equal each tensor's sum."""
    from comgra_like.record import flight_stats

    gen = torch.Generator().manual_seed(3)
    ts = [torch.randn(n, generator=gen) * 100 for n in (50, 70, 300, 1, 20, 7)]
    want = torch.stack([t.sum() for t in ts])
    for chunk in (100, 2**25):
        monkeypatch.setattr(flight_stats, "SUM_CHUNK", chunk)
        got = flight_stats.batched_sums(ts, {})
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-3), chunk


class _Event:
    """A stand-in for a CUDA event: done or not yet."""

    def __init__(self, done: bool):
        self.done = done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


def test_device_steps_are_judged_when_their_copy_has_landed_oldest_first(tmp_path):
    """A GPU's steps wait in a queue: judged without waiting once their event says the
    copy landed, in order; the oldest is waited for only beyond the bound; settle()
    judges the rest (no CUDA needed: the events are stand-ins)."""
    from comgra_like.record import flight as flight_module

    fr = FlightRecorder(window=16)
    fr.attach(tmp_path)
    key = fr._key("t", "t", "value", "calculated", 0, None)

    def pending(step, done):
        # one row reduced on a device: its 4 numbers (sum, L2, min, max) in the host copy
        host = torch.tensor([float(step), 1.0, 0.0, 1.0])
        return (step, np.asarray([key]), [((), None, 1)], host, _Event(done), None)

    fr._pending.append(pending(0, True))
    fr._pending.append(pending(1, False))
    fr._pending.append(pending(2, True))
    fr._drain()
    assert fr.steps_kept() == [0]  # step 1 not landed: it and the later ones wait
    for s in range(3, 3 + flight_module._MAX_PENDING):
        fr._pending.append(pending(s, False))
        fr._drain()
    assert fr.steps_kept() == [0, 1, 2]  # beyond the bound: the oldest are waited for
    fr.settle()
    assert fr.steps_kept() == list(range(3 + flight_module._MAX_PENDING))
    assert [r.values[0, 0] for r in fr._ring] == [float(s) for s in fr.steps_kept()]


def test_finite_values_whose_float32_sums_overflow_are_no_false_alarm(tmp_path):
    # gradients of 1e30 (their float32 sum of squares overflows): finite, so no
    # non_finite trigger, and the L2 norm is the true one (summed again in float64);
    # a real Inf in the same run still fires
    from torch import nn

    from comgra_like import watch

    model = nn.Linear(4, 1, bias=False)
    seen: list[float] = []

    def look(step):
        seen.append(step.stats[("model.weight", "gradient")]["l2_norm"])

    fr = FlightRecorder(window=8, predicate=look)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with watch(model, log_freq=1000, standalone_dir=tmp_path, trial_id="big", verbose=False,
               flight_recorder=fr):
        for step in range(6):
            opt.zero_grad()
            scale = math.inf if step == 5 else 1e30
            (model(torch.ones(1, 4)).sum() * scale).backward()
            opt.step()
    assert seen[:5] == [pytest.approx(2e30)] * 5  # sqrt(4) x 1e30
    assert [(f["kind"], f["step"]) for f in fr.fired] == [("non_finite", 5)]


def test_the_device_path_counts_the_first_step_of_a_non_finite_stretch_only(tmp_path):
    """A NaN at step 10 spreads into the weights: every later step is non-finite too. The
    device path counts the bad rows of step 10 (the one the trigger names) from the
    kept full values, not those of every later step (a diverged run that goes on must
    not pay a pass over every tensor each step): they stay "not counted"."""
    fr = FlightRecorder(window=8, after=0)
    fr._force_batched = True
    _, rec = train(tmp_path, "stretch", 14, flight=fr, nan_at=(10, "relu2"))
    rec.finalize()
    by_step = {r.step: r.values for r in fr._ring}
    multi = next(r for r in fr._ring if r.step == 10).idx
    multi = np.array([fr._numel[k] > 1 for k in multi])
    bad10 = ~np.isfinite(by_step[10][:, 2]) & multi
    assert bad10.sum() > 10 and (by_step[10][bad10, 4] >= 1).all()
    for step in (11, 12, 13):
        bad = ~np.isfinite(by_step[step][:, 2]) & multi
        assert bad.sum() > 10 and np.isnan(by_step[step][bad, 4]).all(), step


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 24])
def test_counts_and_sums_in_chunks_are_those_of_the_whole_tensor(monkeypatch, chunk):
    from comgra_like.record import flight_observe

    monkeypatch.setattr(flight_observe, "_COMPLETE_CHUNK", chunk)
    g = torch.Generator().manual_seed(chunk)
    t = torch.randn(13, 11, generator=g)
    t[3, 4], t[7, 1], t[0, 0], t[12, 10] = float("nan"), float("inf"), float("-inf"), 1e30
    nan, inf, total, _squares = flight_observe._counts_and_sums(t)
    assert (nan, inf) == (1.0, 2.0)
    finite = t[torch.isfinite(t)].double()
    clean = t.clone()
    clean[~torch.isfinite(clean)] = 0.0
    assert math.isnan(total) or math.isinf(total)  # NaN and Inf are in the sums
    wide = clean.double()
    n2, i2, total2, squares2 = flight_observe._counts_and_sums(clean)
    assert (n2, i2) == (0.0, 0.0)
    assert total2 == pytest.approx(float(wide.sum()), rel=1e-12)
    assert squares2 == pytest.approx(float(torch.dot(wide.reshape(-1), wide.reshape(-1))),
                                     rel=1e-12)
    assert squares2 >= float(finite.max()) ** 2  # 1e30 squared: no float32 overflow


def test_the_device_path_leaves_a_tensor_of_several_iterations_not_counted(tmp_path):
    """Two iterations a step: a tensor has two rows and two kept values; a NaN in the
    first iteration's only must not be counted from the second's (finite) values."""
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fr = FlightRecorder(window=8, after=0)
    fr._force_batched = True
    rec = ComgraRecorder(tmp_path, "g", "iters", DecisionMakerForRecordingsFrequencyPerType(
        1000), flight_recorder=fr)
    rec.track_module("net", model)
    gen = torch.Generator().manual_seed(1)
    for step in range(5):
        rec.start_batch(step, 4)
        opt.zero_grad()
        for iteration in range(2):
            rec.start_iteration()
            h = model[0](torch.randn(4, 4, generator=gen)).detach()
            if step == 3 and iteration == 0:
                h[0, 0] = float("nan")
            rec.register_tensor("h", h)
            loss = model[2](torch.tanh(h)).nan_to_num().pow(2).mean()
            rec.register_tensor("loss", loss, is_loss=True)
            loss.backward()
            rec.record_current_gradients(f"loss{iteration}")
            rec.finish_iteration()
        opt.step()
        rec.finish_batch()
    rec.finalize()
    assert [(f["kind"], f["step"], f["tensor"]) for f in fr.fired] == [("non_finite", 3, "h")]
    values = next(r for r in fr._ring if r.step == 3)
    rows = [i for i, k in enumerate(values.idx) if fr._names[k] == "h"]
    assert len(rows) == 2
    first, second = values.values[rows[0]], values.values[rows[1]]
    assert np.isnan(first[2]) and np.isnan(first[4])  # bad, and not counted
    assert np.isfinite(second[2]) and second[4] == 0
