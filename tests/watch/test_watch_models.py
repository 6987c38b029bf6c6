"""watch() on real architectures: training is bitwise the same with and without it,
every module invocation is recorded (in-place ReLUs and residual `+=`, keyword
arguments, dict and dataclass outputs, a cell called once per time step), the module
graph follows autograd, and unwatching leaves no hook behind."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import comgra_like
from comgra_like.query import open_group

from .models import LSTMLoop, ResNetLike, TransformerBlock, all_hooks

STEPS = 5


def _train(make, batch, loss_of, tmp_path=None, steps=STEPS, **watch_kwargs):
    """Train a fresh model; with ``tmp_path`` under watch(). Returns (model, handle)."""
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    handle = None
    if tmp_path is not None:
        handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "watched"),
                                   trial_id="t", verbose=False, **watch_kwargs)
    outputs = []
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        inputs, kwargs, target = batch(gen)
        out = model(*inputs, **kwargs)
        outputs.append(out)
        loss = loss_of(out, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if handle is not None:
        handle.unwatch()
    return model, handle, outputs


def _same_parameters(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def _resnet_batch(gen):
    return (torch.randn(4, 3, 8, 8, generator=gen),), {}, torch.randint(0, 5, (4,), generator=gen)


def _ce(out, target):
    return nn.functional.cross_entropy(out, target)


def test_resnet_like_inplace_relu_and_residual(tmp_path):
    bare, _, _ = _train(ResNetLike, _resnet_batch, _ce)
    model, handle, outputs = _train(ResNetLike, _resnet_batch, _ce, tmp_path, log_freq=2)
    _same_parameters(bare, model)
    assert all_hooks(model) == []
    # tensors of recorded steps had their gradients kept, the others were left alone
    assert outputs[0].retains_grad and not outputs[1].retains_grad

    group = open_group(handle.group_path)
    h = group.read_histograms("t")
    assert sorted(set(h.training_step)) == [0, 2, 4]
    assert set(h.what) == {"io", "io_grad", "params", "params_grad"}
    nodes = set(h.module)
    # the block's ReLU is called twice per forward: two invocations
    assert {"model.layer1.0.relu", "model.layer1.0.relu#1", "model.layer2.0.downsample.0",
            "model.fc", "model"} <= nodes
    # values as they were when the module returned, before the in-place ReLU changed them
    io = h[(h.what == "io") & (h.training_step == 0)].set_index(["module", "role"])
    assert io.loc[("model.layer1.0.bn1", "output 0"), "vmin"] < 0
    assert io.loc[("model.layer1.0.relu", "input 0"), "vmin"] < 0
    assert io.loc[("model.layer1.0.relu", "output 0"), "vmin"] >= 0
    assert io.loc[("model.layer1.0.bn2", "output 0"), "vmin"] < 0

    graph = group.read_module_graph("t", 0)
    edges = {tuple(e) for e in graph["edges"]}
    # the residual: the block's input reaches its second ReLU through `out += identity`
    assert ("model.layer1.0:input", "input 0", "model.layer1.0.relu#1", "input 0") in edges
    assert ("model.layer1.0.bn2", "output 0", "model.layer1.0.relu#1", "input 0") in edges
    assert ("model.layer2.0.downsample", "output 0", "model.layer2.0.relu#1", "input 0") in edges
    assert ("model.layer1", "output 0", "model.layer2", "input 0") in edges
    assert ("model.fc", "output 0", "model:output", "output 0") in edges
    inv = {i["id"]: i for i in graph["invocations"]}
    assert inv["model.layer1.0.conv1"]["parent"] == "model.layer1.0"
    assert inv["model.layer1.0.conv1"]["extra_repr"]["stride"] == "(1, 1)"
    assert inv["model.layer1.0.conv1"]["outputs"][0]["shape"] == [-1, 8, 8, 8]
    # the same structure every step: one file
    steps = group.list_module_graph_steps("t")
    assert list(steps.training_step) == [0, 2, 4] and steps.graph_hash.nunique() == 1

    report = group.read_watch_report("t")
    assert "model.layer2.1.conv2" in report["hooked"] and report["skipped"] == []
    # every existing view: the tensors are ordinary tensors of the step
    stats = group.read_statistics("t", nodes=["model.layer1.0.relu#1"])
    assert set(stats.role) >= {"input 0", "output 0"}


def _tokens_batch(gen):
    tokens = torch.randint(0, 11, (3, 7), generator=gen)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, -2:] = True
    return (tokens,), {"padding_mask": mask}, torch.randint(0, 3, (3,), generator=gen)


def _ce_logits(out, target):
    return nn.functional.cross_entropy(out.logits, target)


def test_transformer_block_keyword_arguments_and_dict_outputs(tmp_path):
    bare, _, _ = _train(TransformerBlock, _tokens_batch, _ce_logits)
    model, handle, _ = _train(TransformerBlock, _tokens_batch, _ce_logits, tmp_path,
                              log_freq=3)
    _same_parameters(bare, model)
    assert all_hooks(model) == []
    group = open_group(handle.group_path)
    h = group.read_histograms("t", steps=0)
    roles = set(zip(h.module, h.role, h.what))
    # keyword tensors of MultiheadAttention; its tuple output (attention, None)
    assert {("model.attn", "input query", "io"), ("model.attn", "input value", "io"),
            ("model.attn", "output 0", "io"), ("model.attn", "output 0", "io_grad")} <= roles
    # a dict output and keyword-only input; the dataclass output of the root
    assert {("model.head", "input hidden", "io"), ("model.head", "output logits", "io"),
            ("model.head", "output pooled", "io"), ("model", "output logits", "io"),
            ("model", "output hidden", "io")} <= roles
    assert ("model.attn", "in_proj_weight", "params_grad") in roles
    # the embedding's integer input is no value to histogram; its output is
    assert ("model.embed", "output 0", "io") in roles
    assert not any(n == "model.embed" and r.startswith("input") for n, r, _ in roles)
    graph = group.read_module_graph("t", 0)
    edges = {tuple(e) for e in graph["edges"]}
    assert ("model.embed", "output 0", "model.attn", "input query") in edges
    assert ("model.norm2", "output 0", "model.head", "input hidden") in edges
    assert ("model.head", "output logits", "model:output", "output logits") in edges
    inv = {i["id"]: i for i in graph["invocations"]}
    assert inv["model.attn"]["extra_repr"] == {}  # MultiheadAttention has none
    assert inv["model.head"]["outputs"][0]["shape"] == [-1, 16]


def _sequence_batch(gen):
    return (torch.randn(5, 4, 4, generator=gen),), {}, torch.randn(5, 1, generator=gen)


def _mse(out, target):
    return nn.functional.mse_loss(out, target)


def test_lstm_cell_called_once_per_time_step(tmp_path):
    bare, _, _ = _train(LSTMLoop, _sequence_batch, _mse)
    model, handle, _ = _train(LSTMLoop, _sequence_batch, _mse, tmp_path, log_freq=4)
    _same_parameters(bare, model)
    group = open_group(handle.group_path)
    h = group.read_histograms("t", what="io")
    assert sorted(set(h.training_step)) == [0, 4]
    cells = sorted({n for n in h.module if n.startswith("model.cell")})
    assert cells == ["model.cell", "model.cell#1", "model.cell#2", "model.cell#3"]
    assert {"input 0", "input 1.0", "input 1.1", "output 0", "output 1"} <= set(
        h[h.module == "model.cell#2"].role)
    graph = group.read_module_graph("t", 4)
    edges = {tuple(e) for e in graph["edges"]}
    for k, nxt in (("model.cell", "model.cell#1"), ("model.cell#1", "model.cell#2"),
                   ("model.cell#2", "model.cell#3")):
        assert (k, "output 0", nxt, "input 1.0") in edges
        assert (k, "output 1", nxt, "input 1.1") in edges
    assert ("model.cell#3", "output 0", "model.out", "input 0") in edges
    # the gradient reaches every time step: per-sample norms of 5 samples each
    g = group.read_histograms("t", what="io_grad", modules="model.cell", roles="output 0")
    assert list(g.n) == [5, 5] and all(np.asarray(c).sum() == 5 for c in g.counts)
