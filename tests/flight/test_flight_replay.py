"""FlightRecorder(keep_state=True) and replay(): the failing step replayed from the kept
parameters names the operation that made the first non-finite value (issue 30, "Going
further")."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comgra_like import ConfigurationError, FlightRecorder, watch


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
