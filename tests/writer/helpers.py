"""Recorders and training steps the writer and transport tests share."""

import torch

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder


def new_recorder(root, steps=range(100)):
    """A recorder of ``steps`` tracking a Linear(3, 2), which it returns too."""
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsHardcoded(steps))
    rec.track_module("net", net)
    return rec, net


def record_steps(recorder, net, steps, batch=4, width=3):
    """Steps of ``batch`` random inputs through ``net``; returns the inputs by step."""
    inputs = {}
    for step in steps:
        x = inputs[step] = torch.randn(batch, width)
        recorder.start_batch(step, batch)
        recorder.start_iteration()
        recorder.register_tensor("x", x, is_input=True)
        out = net(x)
        recorder.register_tensor("out", out)
        recorder.finish_iteration()
        recorder.finish_batch()
    return inputs


def train_step(rec, net, opt, step, x):
    """One recorded SGD step on the loss mean(net(x)^2), gradients recorded; returns
    the output (its .grad retained)."""
    rec.start_batch(step, x.shape[0])
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    out = net(x)
    rec.register_tensor("out", out)
    loss = out.pow(2).mean()
    rec.register_tensor("loss", loss, is_loss=True)
    opt.zero_grad()
    loss.backward()
    opt.step()
    rec.record_current_gradients("loss")
    rec.finish_iteration()
    rec.finish_batch()
    return out


def record_one_shard_per_step(root, steps):
    """A trial with one shard per recorded step (flushed after each), writer closed."""
    rec, net = new_recorder(root)
    rec.writer.flush_seconds = 0.0
    for s in range(steps):
        record_steps(rec, net, [s])
        rec.flush()
    rec.writer.close()
    return root / "g/trials/t"
