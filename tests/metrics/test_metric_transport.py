"""How the per-module metrics' arrays reach the writer: in the process writer (the
default on POSIX) through one shared-memory file per message, never as base64 inside the
JSON line (~30 ms per MB on the training thread); the values read back are the same.

A regression check: the collector once looked for the writer client's segment folder
under a private name that had moved (``WriterClient.slots.segment_dirs``), and every
array went through the pipe without anyone noticing, since the values were right."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like import open_group, protocol, watch
from comgra_like.transport.client import WriterClient


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


def test_process_writer_metric_arrays_go_through_shared_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", "process")
    sent: list[tuple[str | None, list]] = []
    submit = WriterClient.submit

    def spy(self, msg):  # what the collector hands the client, as it hands it
        if isinstance(msg, protocol.MetricData) and msg.modules:
            arrays = [packed for _m, _c, _n, a in msg.modules for packed in a.values()]
            sent.append((msg.path, [type(p[2]) for p in arrays]))
        return submit(self, msg)

    monkeypatch.setattr(WriterClient, "submit", spy)
    torch.manual_seed(0)
    net = Net()
    inputs = []
    handle = watch(net, standalone_dir=str(tmp_path / "g"), trial_id="t", verbose=False,
                   metrics={"fc": ["InputSndNorm"]})
    assert handle.recorder.writer.mode == "process"
    for _ in range(3):
        x = torch.randn(16, 8)
        inputs.append(x.double())
        net(x).pow(2).mean().backward()
        net.zero_grad()
    handle.unwatch()

    assert len(sent) == 3
    folders = set(handle.recorder.writer.slots.segment_dirs)
    for path, kinds in sent:
        # the arrays were written to a file in the writer's segment folder; the message
        # carries their offsets in it, not their bytes
        assert path is not None and any(path.startswith(f) for f in folders), path
        assert kinds == [int], kinds
    prefix = handle.recorder.writer.slots.segment_prefix
    for path, _ in sent:  # the writer unlinked each file once read
        assert not os.path.exists(path), path
    assert prefix and all(prefix in p for p, _ in sent)
    frame = open_group(tmp_path / "g").read_metrics("t", metric="InputSndNorm")
    stored = {int(r.training_step): r.value for r in frame.itertuples()}
    assert sorted(stored) == [0, 1, 2]
    for step, x in enumerate(inputs):
        assert stored[step] == pytest.approx(float(np.linalg.norm(x.numpy())), rel=1e-6)
