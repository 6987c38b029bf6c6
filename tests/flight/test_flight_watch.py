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


def test_bf16_outputs_reduced_on_the_device_path_without_a_copy_agree(tmp_path):
    # autocast bf16: the module outputs and their gradients are bf16; the device path
    # sums them in float32 without a float32 copy; the statistics are those the CPU path
    # computes from the float32 copy (up to the order of summation)
    from torch import nn

    from comgra_like.query.flight import read_flight

    stats = {}
    for device_path in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        fr = FlightRecorder(window=4, predicate=lambda s: s.step == 5)
        fr._force_batched = device_path
        gen = torch.Generator().manual_seed(1)
        trial = f"bf{int(device_path)}"
        with watch(model, log_freq=1000, standalone_dir=tmp_path, trial_id=trial,
                   verbose=False, flight_recorder=fr):
            for _ in range(6):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(torch.randn(8, 16, generator=gen))
                assert out.dtype is torch.bfloat16
                out.float().pow(2).mean().backward()
                opt.step()
        assert [f["kind"] for f in fr.fired] == ["predicate"]
        window = read_flight(tmp_path, trial)
        stats[device_path] = window[window["name"].str.contains("output")].sort_values(
            ["training_step", "name", "role"])
    a, b = stats[False], stats[True]
    assert len(a) == len(b) > 0 and list(a["name"]) == list(b["name"])
    for column in ("mean", "std", "abs_max", "l2_norm"):
        assert b[column].to_numpy() == pytest.approx(a[column].to_numpy(), rel=1e-4, abs=1e-6)
    assert (b["nan_count"] == 0).all()


def test_a_bf16_tensor_on_the_device_path_takes_three_reductions_and_no_copy():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    fr = FlightRecorder()
    fr._force_batched = True
    fr.begin(0, [])
    x = torch.randn(64, 32).bfloat16()
    with Ops() as ops:
        fr.observe_tensor("x", x, "x", "calculated")
    reductions = [n for n in ops.names if n not in ("detach", "view", "reshape", "alias")]
    assert sorted(reductions) == ["aminmax", "linalg_vector_norm", "sum"], ops.names


@pytest.mark.parametrize("case", ["accumulation", "two_forwards"])
def test_flight_steps_are_watchs_steps(tmp_path, case):
    # gradient accumulation (2 micro-batches per optimizer step, watch(optimizer=)) and
    # two forwards before one backward (delay_log_multi_backward=True): a step of the
    # flight recorder is a step of the trial; a NaN in the second forward of step 9
    # fires at step 9
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fr = FlightRecorder(window=32, after=0)
    kwargs = ({"optimizer": opt} if case == "accumulation"
              else {"delay_log_multi_backward": True})
    gen = torch.Generator().manual_seed(1)
    with watch(model, log_freq=3, standalone_dir=tmp_path, trial_id="s", verbose=False,
               flight_recorder=fr, **kwargs) as handle:
        for step in range(12):
            opt.zero_grad()
            x = torch.randn(2, 3, 4, generator=gen)
            if step == 9:
                x[1, 0, 0] = float("nan")
            if case == "accumulation":
                for micro in range(2):
                    model(x[micro]).pow(2).mean().backward()
            else:
                (model(x[0]) - model(x[1])).pow(2).mean().backward()
            opt.step()
    assert fr.steps_kept() == list(range(12))
    recorded = open_group(handle.group_path).read_statistics("s")["training_step"]
    assert sorted(set(recorded)) == [0, 3, 6, 9]
    assert [(f["kind"], f["step"]) for f in fr.fired] == [("non_finite", 9)]


def test_with_accumulation_the_step_is_judged_on_its_whole_gradient_and_loss(tmp_path):
    # two micro-batches per optimizer step: the gradient norm judged is the norm of the
    # accumulated gradient the optimizer used (each backward leaves a row; the last
    # counts), the loss the mean of the micro-batches' losses (the loss KPI of each)
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: list[tuple[float, float]] = []
    fr = FlightRecorder(window=8, predicate=lambda s: seen.append((s.grad_norm, s.loss)))
    want: list[tuple[float, float]] = []
    gen = torch.Generator().manual_seed(1)
    with watch(model, optimizer=opt, log_freq=1000, standalone_dir=tmp_path, trial_id="a",
               verbose=False, flight_recorder=fr) as handle:
        for _ in range(5):
            opt.zero_grad()
            losses = []
            for _ in range(2):
                loss = model(torch.randn(3, 4, generator=gen)).pow(2).mean()
                handle.log_loss(loss)
                loss.backward()
                losses.append(float(loss.detach()))
            norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters()))
            want.append((float(norm), sum(losses) / 2))
            opt.step()
    assert len(seen) == 5
    for (norm, loss), (want_norm, want_loss) in zip(seen, want):
        assert norm == pytest.approx(want_norm, rel=1e-5)
        assert loss == pytest.approx(want_loss, rel=1e-5)
