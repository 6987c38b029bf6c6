"""watch() and per-module metrics beside a FlowChain (issue 18): the flow's extra
backward passes run through watch's gradient hooks and the metrics collector's; they
must not count as the training's backward pass. A training loop watched with and without
flows records the same statistics, histograms and metrics, bitwise."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch
from torch import nn

from comgra_like.query import open_group
from comgra_like.record.flow import FlowChain

STEPS = 3
BATCH = 4


def _watched(root: Path, trial: str, flows: bool) -> None:
    """A training loop under watch() (with per-module metrics), its model's input and
    output the chain's nodes: every module in between is registered by watch, whose
    gradient hooks also see the flow's passes."""
    import comgra_like

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 5), nn.ReLU(),
                          nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = comgra_like.watch(model, standalone_dir=str(root / "g"), trial_id=trial,
                               log_freq=1, verbose=False,
                               metrics={"0": [["OutputGradSndNorm", "linear(1, 0)"]]})
    gen = torch.Generator().manual_seed(2)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 4, generator=gen)
        chain = FlowChain()
        x = chain.node("input", x)
        out = chain.node("output", model(x))
        chain.backward(out.pow(2).mean())
        if flows:
            chain.flows(sample=0)
        opt.step()
        opt.zero_grad()
        chain.release()
    handle.unwatch()


def test_watch_records_what_it_records_without_flows(tmp_path):
    _watched(tmp_path, "plain", flows=False)
    _watched(tmp_path, "flows", flows=True)
    group = open_group(tmp_path / "g")
    drop = ["wall_time"]
    plain = group.read_statistics("plain").drop(columns=drop, errors="ignore")
    with_flows = group.read_statistics("flows").drop(columns=drop, errors="ignore")
    assert set(with_flows.recording_type) == {"forward", "gradient:backward", "update"}
    assert (with_flows.recording_type == "gradient:backward").sum() > 20
    pd.testing.assert_frame_equal(plain, with_flows)
    pd.testing.assert_frame_equal(group.read_histograms("plain"),
                                  group.read_histograms("flows"))
    metrics = group.read_metrics("flows")
    assert len(metrics) == STEPS
    pd.testing.assert_frame_equal(group.read_metrics("plain").drop(columns=drop, errors="ignore"),
                                  metrics.drop(columns=drop, errors="ignore"))
