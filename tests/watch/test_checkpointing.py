"""Activation checkpointing under watch(): reentrant checkpointing (the modules inside
run under no_grad in the forward and again in the backward) records the io_grad
histograms and module graph edges of the run without checkpointing, from the
recomputation (issue 27.3: 10 of 43 edges and every io_grad inside were missing, and the
report said nothing); non-reentrant checkpointing records the same numbers as no
checkpointing; training is bitwise the bare loop's in every mode. Modules that run
without gradients and are never recomputed (a torch.no_grad() block in a forward) are
named in the report."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import comgra_like
from comgra_like.query import open_group

transformers = pytest.importorskip("transformers")

MODES = ("none", "reentrant", "non_reentrant")


def _gpt2(mode):
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=32)
    model = transformers.GPT2LMHeadModel(config)
    if mode != "none":
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": mode == "reentrant"})
    return model


def _gpt2_loss(model, gen):
    ids = torch.randint(0, 64, (4, 16), generator=gen)
    return model(input_ids=ids, labels=ids).loss


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class Plain(nn.Module):
    """torch.utils.checkpoint called directly: on modules, and on a function that calls
    two modules (whose input is also used outside it)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.inp = nn.Linear(6, 8)
        self.b1, self.b2 = Block(), Block()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = self.inp(x)
        if self.mode == "none":
            h = self.b2(self.b1(h))
            return self.head(h + self.b(torch.tanh(self.a(h))))
        reentrant = self.mode == "reentrant"
        h = checkpoint(self.b1, h, use_reentrant=reentrant)
        h = checkpoint(self.b2, h, use_reentrant=reentrant)
        h = h + checkpoint(lambda t: self.b(torch.tanh(self.a(t))), h,
                           use_reentrant=reentrant)
        return self.head(h)


def _plain_loss(model, gen):
    return model(torch.randn(4, 6, generator=gen)).pow(2).mean()


def _train(make, loss_of, mode, folder=None, steps=2):
    torch.manual_seed(0)
    model = make(mode)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    handle = None
    if folder is not None:
        handle = comgra_like.watch(model, standalone_dir=str(folder), trial_id="t",
                                   log_freq=1, verbose=False, sample_n=None,
                                   reject_outlier_proportion=0.0)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        loss = loss_of(model, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if handle is not None:
        handle.unwatch()
    return model, handle


def _runs(tmp_path_factory, make, loss_of):
    runs = {}
    for mode in MODES:
        bare, _ = _train(make, loss_of, mode)
        model, handle = _train(make, loss_of, mode, tmp_path_factory.mktemp(mode))
        for k, v in bare.state_dict().items():  # recording never changes training
            assert torch.equal(v, model.state_dict()[k]), (mode, k)
        runs[mode] = (model, open_group(handle.group_path))
    return runs


@pytest.fixture(scope="module")
def gpt2_runs(tmp_path_factory):
    return _runs(tmp_path_factory, _gpt2, _gpt2_loss)


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    return _runs(tmp_path_factory, Plain, _plain_loss)


def _io_grad(group):
    h = group.read_histograms("t")
    h = h[h.what == "io_grad"].sort_values(["training_step", "module", "role"])
    return h.reset_index(drop=True)


def _edges(group, step=0):
    return {tuple(e) for e in group.read_module_graph("t", step)["edges"]}


def _same_recording(group, reference):
    got, want = _io_grad(group), _io_grad(reference)
    assert list(zip(got.training_step, got.module, got.role)) == list(
        zip(want.training_step, want.module, want.role))
    assert (got.n == want.n).all()
    np.testing.assert_allclose(got.vmin, want.vmin, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(got.vmax, want.vmax, rtol=1e-5, atol=1e-12)
    for step in (0, 1):
        assert _edges(group, step) == _edges(reference, step)
    reasons = {s["reason"] for s in group.read_watch_report("t")["skipped"]}
    assert reasons == {s["reason"] for s in reference.read_watch_report("t")["skipped"]}


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_gpt2_checkpointing_records_what_no_checkpointing_records(gpt2_runs, mode):
    runs = gpt2_runs
    for k, v in runs["none"][0].state_dict().items():
        assert torch.allclose(v, runs[mode][0].state_dict()[k], rtol=1e-5, atol=1e-7), k
    group = runs[mode][1]
    nodes = set(_io_grad(group).module)
    assert "model.transformer.h.0.mlp.c_fc" in nodes and "model.transformer.h.1.attn" in nodes
    assert len(_edges(group)) == 43
    _same_recording(group, runs["none"][1])


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_torch_checkpoint_on_modules_and_a_function(plain_runs, mode):
    _same_recording(plain_runs[mode][1], plain_runs["none"][1])


class NoGradInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.frozen = nn.Linear(6, 6)

    def forward(self, x):
        with torch.no_grad():
            target = self.frozen(x)
        return (self.fc(x) - target).pow(2).mean()


def test_modules_run_without_gradients_are_named(tmp_path):
    torch.manual_seed(0)
    model = NoGradInside()
    handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                               log_freq=1, verbose=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(4, 6))
        opt.zero_grad()
        loss.backward()
        opt.step()
    handle.unwatch()
    skipped = open_group(handle.group_path).read_watch_report("t")["skipped"]
    assert [(s["module"], s["reason"]) for s in skipped] == [
        ("model.frozen", "ran without gradients")]


def test_with_a_recorder_reentrant_checkpoints_are_named(tmp_path):
    from comgra_like import ComgraRecorder, DecisionMakerForRecordingsFrequencyPerType

    torch.manual_seed(0)
    model = Plain("reentrant")
    bare = copy.deepcopy(model)
    _loop_bare(bare)
    rec = ComgraRecorder(tmp_path, "g", "mine", DecisionMakerForRecordingsFrequencyPerType(1),
                         max_num_batch_size_to_record=0)
    rec.track_module("net", model)
    handle = comgra_like.watch(model, recorder=rec, verbose=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for step in range(2):
        rec.start_batch(step, 4, "train")
        rec.start_iteration()
        loss = _plain_loss(model, gen)
        rec.finish_iteration()
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_batch()
    handle.unwatch()
    rec.finalize()
    for k, v in bare.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k
    skipped = open_group(tmp_path / "g").read_watch_report("mine")["skipped"]
    named = {s["module"] for s in skipped if s["reason"] == "ran without gradients"}
    assert {"net.b1.fc1", "net.b2.norm", "net.a", "net.b"} <= named


def _loop_bare(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        loss = _plain_loss(model, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
