"""FlightRecorder(keep_state=True) and replay(): the failing step replayed from the kept
parameters names the operation that made the first non-finite value (issue 30, "Going
further")."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comgra_like import ConfigurationError, FlightRecorder, NotFoundError, watch


class Root(nn.Module):
    def forward(self, h):
        return torch.sqrt(h)  # NaN where h < 0: made by one bad batch


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.root = Root()
        self.out = nn.Linear(6, 1)

    def forward(self, x):
        h = torch.relu(self.lin(x)) + x[:, :1]  # finite; negative only if x[:, 0] is
        return self.out(self.root(h))


def _batch(step, gen):
    x = torch.rand(8, 6, generator=gen)
    if step == 25:
        x[0, 0] = -50.0  # the bad batch
    return x, x.sum(dim=1, keepdim=True)


def test_replay_names_the_operation_and_module_of_the_first_nan(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fr = FlightRecorder(window=16, keep_state=True)
    gen = torch.Generator().manual_seed(1)
    batches = {}
    with watch(model, log_freq=1000, standalone_dir=tmp_path, trial_id="r", verbose=False,
               flight_recorder=fr):
        for step in range(40):
            x, y = batches[step] = _batch(step, gen)
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if fr.fired:
                break
    assert [(f["kind"], f["step"]) for f in fr.fired] == [("non_finite", 25)]
    trained = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()

    def run_step(m):
        x, y = batches[25]
        ((m(x) - y) ** 2).mean().backward()

    torch.manual_seed(0)
    fresh = Net()
    result = fr.replay(fresh, run_step)
    assert (result.step, result.op, result.module, result.phase) == (
        25, "aten.sqrt.default", "root", "forward"), result
    # the kept state is the one before step 25: its forward reproduces the NaN, the
    # trained model and the random number generator are untouched
    assert all(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
               for a, b in zip(trained, model.parameters()))
    assert torch.equal(rng, torch.get_rng_state())
    # a clean step replayed: nothing found, said so
    clean = fr.replay(Net(), lambda m: ((m(batches[24][0]) - 1) ** 2).mean().backward(),
                      step=25)
    assert clean.op is None and "no non-finite" in clean.message


def test_replay_needs_keep_state_and_a_matching_model(tmp_path):
    with pytest.raises(ConfigurationError, match="keep_state=True"):
        FlightRecorder().replay(Net(), lambda m: None)
    fr = FlightRecorder(keep_state=True)
    model = Net()
    with watch(model, log_freq=1000, standalone_dir=tmp_path, trial_id="m", verbose=False,
               flight_recorder=fr):
        for _ in range(3):
            model(torch.rand(2, 6)).sum().backward()
    with pytest.raises(ConfigurationError, match="do not match"):
        fr.replay(nn.Linear(6, 1), lambda m: None, step=1)


class Scaled(nn.Module):
    """loss = 1e38 * sum(w): finite, with a gradient of 1e38 per element; SGD's momentum
    buffer grows 1e38, 1.9e38, 2.71e38 and overflows at the fourth step (step 3): the
    first non-finite value is made by the optimizer, from its state."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Module()
        self.scale.w = nn.Parameter(torch.full((2,), 0.5))

    def forward(self):
        return self.scale.w.sum() * 1e38


def test_replay_of_the_optimizer_step_names_the_state_that_overflowed(tmp_path):
    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=1e-39, momentum=0.9)
    fr = FlightRecorder(window=8, keep_state=True)
    after: dict[int, torch.Tensor] = {}
    with watch(model, optimizer=opt, log_freq=1000, standalone_dir=tmp_path, trial_id="o",
               verbose=False, flight_recorder=fr):
        assert fr.state.optimizers == [opt]  # watch(optimizer=) handed it over
        for step in range(8):
            opt.zero_grad()
            model().backward()
            opt.step()
            after[step] = model.scale.w.detach().clone()
            if fr.fired:
                break
    assert [(f["kind"], f["step"]) for f in fr.fired] == [("non_finite", 3)]
    assert torch.isinf(after[3]).all() and torch.isfinite(after[2]).all()

    def run_step(m):
        m().backward()

    # forward and backward alone are finite: the cause lies in the optimizer's step
    alone = fr.replay(Scaled(), run_step)
    assert alone.op is None and "no non-finite" in alone.message
    fresh = Scaled()
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=1e-39, momentum=0.9)
    result = fr.replay(fresh, run_step, optimizer=fresh_opt)
    assert (result.step, result.op, result.module, result.phase, result.tensor) == (
        3, "aten.add_.Tensor", "scale", "optimizer", "scale.w (momentum_buffer)"), result
    assert "optimizer's step (SGD)" in result.message
    # the replayed step is the trained one: the same value after it (-inf here)
    assert torch.equal(fresh.scale.w.detach(), after[3])
    # replayed twice, the same: the kept state was not changed by the first replay
    again = Scaled()
    again_opt = torch.optim.SGD(again.parameters(), lr=1e-39, momentum=0.9)
    assert fr.replay(again, run_step, optimizer=again_opt).tensor == result.tensor
    assert torch.equal(again.scale.w.detach(), after[3])


def test_replay_with_adam_state_reproduces_the_trained_step_bitwise(tmp_path):
    # a ComgraRecorder loop, the optimizer given to the flight recorder: the replayed
    # step (state loaded, a learning rate a scheduler changed) gives the trained values
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    fr = FlightRecorder(window=8, keep_state=True, optimizer=opt)
    rec = ComgraRecorder(tmp_path, "g", "adam", DecisionMakerForRecordingsFrequencyPerType(1000),
                         flight_recorder=fr)
    rec.track_module("net", model)
    gen = torch.Generator().manual_seed(0)
    batches, after = [], []
    for step in range(6):
        x = torch.randn(5, 4, generator=gen)
        batches.append(x)
        rec.start_batch(step, 5)
        rec.start_iteration()
        loss = model(x).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        sched.step()
        rec.finish_iteration()
        rec.finish_batch()
        after.append([p.detach().clone() for p in model.parameters()])
    rec.finalize()
    kept = fr.state.optimizer_states_of(5)[0]
    assert kept["param_groups"][0]["lr"] == pytest.approx(1e-2 * 0.25)  # the step's lr
    assert int(kept["state"][0]["step"]) == 5  # five Adam steps before step 5

    def run_step(m):
        m(batches[5]).pow(2).mean().backward()

    torch.manual_seed(99)
    fresh = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1.0)  # the kept lr is loaded
    result = fr.replay(fresh, run_step, step=5, optimizer=fresh_opt)
    assert result.op is None
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), after[5]))
    # the state of a step that is not kept, a wrong optimizer count, no optimizer kept
    with pytest.raises(NotFoundError):
        fr.replay(fresh, run_step, step=1, optimizer=fresh_opt)
    with pytest.raises(ConfigurationError, match="optimizer"):
        fr.replay(fresh, run_step, step=5, optimizer=[fresh_opt, fresh_opt])
    with pytest.raises(ConfigurationError, match="keep_state=True"):
        FlightRecorder(optimizer=opt)
