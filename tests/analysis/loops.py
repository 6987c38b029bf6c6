"""Small training loops recorded with the real ComgraRecorder, each with a fault injected
at a known place (or none: the control). Every step is recorded.

Each function trains, finalizes the recorder and returns the group folder
``root/<group>``; the trial id is the function's name.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder

BATCH = 16


def _recorder(root: Path, group: str, trial: str, steps: int, samples: int = 4,
              every: int = 1):
    return ComgraRecorder(root, group, trial,
                          DecisionMakerForRecordingsHardcoded(range(0, steps, every)),
                          max_num_batch_size_to_record=samples,
                          calculate_svd_and_other_expensive_operations_of_parameters=False)


def _backward(rec, loss, optimizer) -> None:
    rec.register_tensor("loss", loss, is_loss=True)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    rec.record_current_gradients("gradients")


def log_of_zero(root: Path, steps: int = 12, zero_at: int | None = 7,
                group: str = "log_of_zero", record_every: int = 1, op: str = "log") -> Path:
    """``log`` of a value that shrinks linearly and reaches exactly 0 at step
    ``zero_at``: node ``z_log_positive`` is -inf there (its input ``positive`` is 0, finite);
    the loss is inf, the backward pass makes the gradients and then the weights NaN.
    ``record_every``: record only every n-th step (from step 0). ``op="sqrt"``: the square
    root instead (node ``z_sqrt_positive``), which is finite at 0 while its derivative is
    not: the forward pass of that step is finite, the gradient of ``positive`` is -inf."""
    torch.manual_seed(0)
    body, head = nn.Linear(4, 8), nn.Linear(8, 1)
    net = nn.ModuleDict({"body": body, "head": head})
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    rec = _recorder(root, group, "log_of_zero", steps, every=record_every)
    rec.track_module("net", net)
    function = {"log": torch.log, "sqrt": torch.sqrt}[op]
    for step in range(steps):
        x = torch.randn(BATCH, 4)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        hidden = torch.tanh(body(x))
        rec.register_tensor("hidden", hidden)
        scale = 1.0 if zero_at is None else max(0.0, 1.0 - step / zero_at)
        positive = torch.sigmoid(head(hidden)) * scale
        rec.register_tensor("positive", positive)
        result = function(positive)
        # Named to sort after "loss": the finder must follow the graph, not the alphabet.
        rec.register_tensor(f"z_{op}_positive", result)
        _backward(rec, -result.mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def dying_relu(root: Path, steps: int = 20, kill_at: int | None = 6, group: str = "dying_relu"
               ) -> Path:
    """A ReLU layer of 32 units whose first 16 biases are set to -100 before step
    ``kill_at``: those units output 0 for every input from then on (and get no gradient
    to recover)."""
    torch.manual_seed(1)
    layer_in, layer_out = nn.Linear(4, 32), nn.Linear(32, 1)
    net = nn.ModuleDict({"layer_in": layer_in, "layer_out": layer_out})
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    rec = _recorder(root, group, "dying_relu", steps)
    rec.track_module("net", net)
    for step in range(steps):
        if step == kill_at:
            with torch.no_grad():
                layer_in.bias[:16] = -100.0
        x = torch.randn(BATCH, 4)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        hidden = torch.relu(layer_in(x))
        rec.register_tensor("relu_out", hidden)
        prediction = layer_out(hidden)
        rec.register_tensor("prediction", prediction)
        target = x.sum(dim=1, keepdim=True)
        rec.register_tensor("target", target, is_target=True)
        _backward(rec, ((prediction - target) ** 2).mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def saturated_gate(root: Path, steps: int = 12, pin_at: int | None = 4,
                   group: str = "saturated_gate") -> Path:
    """A sigmoid gate of 8 units whose first 4 biases are set to +30 before step
    ``pin_at``: those units output 1.0 (to float32 precision) for every input."""
    torch.manual_seed(5)
    layer_in, layer_out = nn.Linear(4, 8), nn.Linear(8, 1)
    net = nn.ModuleDict({"layer_in": layer_in, "layer_out": layer_out})
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    rec = _recorder(root, group, "saturated_gate", steps)
    rec.track_module("net", net)
    for step in range(steps):
        if step == pin_at:
            with torch.no_grad():
                layer_in.bias[:4] = 30.0
        x = torch.randn(BATCH, 4)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        gate = torch.sigmoid(layer_in(x))
        rec.register_tensor("gate", gate)
        prediction = layer_out(gate)
        rec.register_tensor("prediction", prediction)
        target = x.sum(dim=1, keepdim=True)
        rec.register_tensor("target", target, is_target=True)
        _backward(rec, ((prediction - target) ** 2).mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def sigmoid_stack(root: Path, depth: int = 12, steps: int = 8, group: str = "sigmoid_stack"
                  ) -> Path:
    """``depth`` layers of Linear(16, 16) + sigmoid, each output registered
    (``layer_00`` first): every sigmoid passes at most a quarter of the gradient back."""
    torch.manual_seed(2)
    layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(depth))
    optimizer = torch.optim.SGD(layers.parameters(), lr=0.1)
    rec = _recorder(root, group, "sigmoid_stack", steps)
    rec.track_module("stack", layers)
    for step in range(steps):
        x = torch.randn(BATCH, 16)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        h = x
        for i, layer in enumerate(layers):
            h = torch.sigmoid(layer(h))
            rec.register_tensor(f"layer_{i:02d}", h)
        target = torch.rand(BATCH, 16)
        rec.register_tensor("target", target, is_target=True)
        _backward(rec, ((h - target) ** 2).mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def exploding_lr(root: Path, steps: int = 16, jump_at: int | None = 8,
                 group: str = "exploding_lr") -> Path:
    """A two-layer linear network trained with SGD at lr 0.005, until a schedule bug sets
    the learning rate to 100 from step ``jump_at`` on: gradient descent diverges."""
    torch.manual_seed(3)
    first, second = nn.Linear(4, 16), nn.Linear(16, 1)
    net = nn.ModuleDict({"first": first, "second": second})
    optimizer = torch.optim.SGD(net.parameters(), lr=0.005)
    rec = _recorder(root, group, "exploding_lr", steps)
    rec.track_module("net", net)
    for step in range(steps):
        if step == jump_at:
            for g in optimizer.param_groups:
                g["lr"] = 100.0
        x = torch.randn(BATCH, 4)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        hidden = first(x)
        rec.register_tensor("hidden", hidden)
        prediction = second(hidden)
        rec.register_tensor("prediction", prediction)
        target = x.sum(dim=1, keepdim=True)
        rec.register_tensor("target", target, is_target=True)
        _backward(rec, ((prediction - target) ** 2).mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def bad_batches(root: Path, steps: int = 30, spike_at: int | None = 20,
                outlier_at: int | None = 25, outlier_sample: int = 2,
                group: str = "bad_batches") -> Path:
    """A linear regression with a per-sample loss. At ``spike_at`` every target of the
    batch is 10 times too large (a loss spike); at ``outlier_at`` only sample
    ``outlier_sample`` (a recorded one) has a target of 100 (an outlier sample). The
    helper ``difficulty`` (the noise scale of each sample's target, registered as a
    step input) decides how large a sample's loss is: the correlation to find."""
    torch.manual_seed(4)
    model = nn.Linear(4, 1)
    with torch.no_grad():  # the solution already: what is left of the loss is the noise
        model.weight.fill_(1.0)
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    rec = _recorder(root, group, "bad_batches", steps, samples=8)
    rec.track_module("model", model)
    for step in range(steps):
        x = torch.randn(BATCH, 4)
        difficulty = torch.rand(BATCH, 1) * 2
        target = x.sum(dim=1, keepdim=True) + difficulty * torch.randn(BATCH, 1)
        if step == spike_at:
            target = target * 10
        if step == outlier_at:
            target[outlier_sample] = 100.0
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        rec.register_tensor("difficulty", difficulty, is_input=True)
        prediction = model(x)
        rec.register_tensor("prediction", prediction)
        rec.register_tensor("target", target, is_target=True)
        loss_per_sample = ((prediction - target) ** 2).mean(dim=1)
        rec.register_tensor("loss_per_sample", loss_per_sample)
        rec.add_tensor_connection(difficulty, loss_per_sample)
        _backward(rec, loss_per_sample.mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def nan_in_the_data(root: Path, steps: int = 6, bad_at: int = 3,
                    group: str = "nan_in_the_data") -> Path:
    """A batch whose input holds a NaN at step ``bad_at`` (a broken record in the data)."""
    torch.manual_seed(6)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rec = _recorder(root, group, "nan_in_the_data", steps)
    rec.track_module("model", model)
    for step in range(steps):
        x = torch.randn(BATCH, 4)
        if step == bad_at:
            x[5, 2] = float("nan")
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        prediction = model(x)
        rec.register_tensor("prediction", prediction)
        _backward(rec, (prediction ** 2).mean(), optimizer)
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def nothing_recorded(root: Path, group: str = "nothing_recorded") -> Path:
    """A trial whose recorder was finalized before any step."""
    rec = _recorder(root, group, "nothing_recorded", 0)
    rec.add_note("nothing to see")
    rec.finalize()
    return root / group
