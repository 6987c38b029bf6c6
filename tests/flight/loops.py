"""A real training loop with the comgra API for the flight recorder's tests: an MLP with
named nodes, recorded 1 step in ``record_one_in``, faults injected on request."""

from __future__ import annotations

import torch

from comgra_like import ComgraRecorder, DecisionMakerForRecordingsFrequencyPerType

#: The registered forward nodes in the order the step computes them.
NODES = ("input", "layer1", "relu1", "layer2", "relu2", "output", "loss")
BATCH = 16


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 3))


def train(root, trial: str, steps: int, *, flight=None, record_one_in: int = 1000,
          nan_at: tuple[int, str] | None = None, lr_jump_at: int | None = None,
          sample_ids: bool = False, recorder: bool = True, on_step=None, seed: int = 0,
          lr: float = 0.05, recorders: list | None = None, outlier_at: int | None = None):
    """Train ``steps`` steps (targets from a fixed teacher, so the loss falls steadily).

    ``nan_at=(step, node)``: one value of that node becomes NaN at that step.
    ``lr_jump_at``: the learning rate is multiplied by 20 from that step on.
    ``outlier_at``: the targets of that step are 30 times as large (one bad batch).
    ``recorders``: the recorder is appended as soon as it exists (to finalize it after
    an exception). Returns (model, recorder)."""
    model = make_model(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    teacher = torch.randn(12, 3, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rec = None
    if recorder:
        rec = ComgraRecorder(root, "flight", trial,
                             DecisionMakerForRecordingsFrequencyPerType(record_one_in),
                             max_num_batch_size_to_record=2, flight_recorder=flight)
        rec.track_module("net", model)
        if recorders is not None:
            recorders.append(rec)
    for step in range(steps):
        if lr_jump_at is not None and step == lr_jump_at:
            for group in opt.param_groups:
                group["lr"] *= 20
        x = torch.randn(BATCH, 12, generator=gen)
        y = x @ teacher
        if outlier_at is not None and step == outlier_at:
            y = y * 30
        values = {}

        def reg(name, tensor, step=step, values=values, **kwargs):
            if nan_at is not None and nan_at == (step, name):
                mask = torch.zeros_like(tensor)
                mask.view(-1)[0] = float("nan")
                tensor = tensor + mask
            values[name] = tensor
            if rec is not None:
                rec.register_tensor(name, tensor, **kwargs)
            return tensor

        opt.zero_grad(set_to_none=True)
        if rec is not None:
            rec.start_batch(step, BATCH)
            rec.start_iteration()
            if sample_ids:
                rec.register_sample_ids(torch.arange(step * BATCH, (step + 1) * BATCH))
        h = reg("input", x, is_input=True)
        h = reg("layer1", model[0](h))
        h = reg("relu1", model[1](h))
        h = reg("layer2", model[2](h))
        h = reg("relu2", model[3](h))
        out = reg("output", model[4](h))
        loss = reg("loss", ((out - y) ** 2).mean(), is_loss=True)
        loss.backward()
        if rec is not None:
            rec.record_current_gradients("default")
            rec.finish_iteration()
        opt.step()
        if rec is not None:
            rec.record_kpi_in_graph("train", "loss", loss.detach())
            rec.finish_batch()
        if on_step is not None:
            on_step(step, values, rec)
    return model, rec
