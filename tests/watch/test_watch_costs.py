"""What watch() costs the training thread, by counts rather than times: no submodule hook
on steps that are not recorded, the module graph hashed once per structure, and after
warm-up no new shared memory and no new capture plan for steps that repeat."""

from __future__ import annotations

import torch
from torch import nn

import comgra_like
from comgra_like.query import open_group

from .models import MLP, all_hooks


class _Probe(nn.Linear):
    """A Linear that notes, on every call, whether it has any forward hook."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[bool] = []

    def forward(self, x):
        self.seen.append(bool(self._forward_hooks or self._forward_pre_hooks))
        return super().forward(x)


def _watch(model, tmp_path, **kw):
    return comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                             verbose=False, **kw)


def _train(model, steps, batch=5, handle=None, flush=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(batch, 6, generator=gen)
        model(x).pow(2).mean().backward()
        opt.step()
        if flush:
            handle.flush()


def test_submodules_have_hooks_only_during_recorded_forwards(tmp_path):
    torch.manual_seed(0)
    probe = _Probe(6, 4)
    model = nn.Sequential(probe, nn.ReLU(), nn.Linear(4, 2))
    handle = _watch(model, tmp_path, log_freq=3)
    _train(model, 7)
    watcher = handle.watcher
    handle.unwatch()
    # steps 0, 3 and 6 are recorded: hooks then, none on the four steps between
    assert probe.seen == [True, False, False, True, False, False, True]
    assert watcher.hooks_installed == 3
    assert all_hooks(model) == []
    h = open_group(handle.group_path).read_histograms("t", modules="model.0", what="io")
    assert sorted(set(h.training_step)) == [0, 3, 6]


def test_module_graph_built_and_hashed_once_for_an_unchanged_structure(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    handle = _watch(model, tmp_path, log_freq=1)
    _train(model, 12)
    watcher = handle.watcher
    assert watcher.graphs_hashed == 1
    _train(model, 2, batch=7)  # a new key (shapes), the same structure (batch dim -1)
    assert watcher.graphs_hashed == 2
    handle.unwatch()
    steps = open_group(handle.group_path).list_module_graph_steps("t")
    assert len(steps) == 14 and steps.graph_hash.nunique() == 1


def test_after_warm_up_no_new_segment_and_every_capture_plan_reused(tmp_path):
    torch.manual_seed(0)
    model = MLP()
    handle = _watch(model, tmp_path, log_freq=2)
    # the writer takes in each recorded step before the next (flush), so that the slot
    # pool needs no growth however loaded the machine is
    _train(model, 6, handle=handle, flush=True)
    writer, capturer = handle.recorder.writer, handle.recorder.capturer
    segments, plans, captures = writer.segments_created, capturer.plans_made, capturer.captures
    assert segments >= 1 and plans >= 3
    _train(model, 100, handle=handle, flush=True)  # 50 recorded steps
    assert writer.segments_created == segments
    assert capturer.captures - captures == 50 * 3  # parameters, gradients, the step
    assert capturer.plans_made == plans
    assert writer.waits == 0
    handle.unwatch()
