"""The workloads of ``benchmark_watch.py``: three models, one training loop, and the
contenders that hook a model.

Imported by every interpreter the benchmark runs (the project's venv, a venv with
torchexplorer 1.1.2, a venv with TensorBoard), so it needs plain torch only at import
time; each contender's own package is imported when that contender is attached.

Models (fixed seeds, ``torch.set_num_threads(1)`` in the worker):

* ``mlp``: the recorder benchmark's MLP (``benchmark_recorder.py``: 4 Linear layers of
  width 256, input 256, batch 64, MSE against a random target, SGD lr 1e-3), with its
  ReLUs as ``nn.ReLU`` modules and a ``forward``, so that watching the model sees them.
* ``cnn``: two 3x3 convolutions (3->8->16 channels) with ReLU and 2x2 max-pooling, then a
  Linear classifier over 10 classes; 32x32 RGB images, batch 16, cross-entropy.
* ``transformer``: a token embedding, two pre-norm blocks (LayerNorm, self-attention of 4
  heads through ``scaled_dot_product_attention`` with its q/k/v and output projections as
  Linear modules, LayerNorm, a GELU MLP of width 256), a final LayerNorm and a Linear head;
  width 64, vocabulary 128, 8 sequences of 32 tokens, next-token cross-entropy. Written
  with plain modules and out-of-place residual additions so that torchexplorer, whose full
  backward hooks refuse ``nn.MultiheadAttention``'s tuple with a ``None`` and in-place
  additions, can watch it too.

Contenders (``attach``): ``bare`` (nothing; the A/A run), ``floor`` (the unavoidable work
of watching at a given log_freq, see ``FloorWatch``), ``tensorboard`` (``add_histogram``
on the same tensors, see ``TensorBoardHooks``), ``torchexplorer_none`` (torchexplorer
1.1.2's ``watch(backend='none')``), ``watch_none`` and ``watch`` (``comgra_like.watch``
with ``backend='none'`` and with its recording backend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

MODELS = ("mlp", "cnn", "transformer")
CONTENDERS = ("bare", "floor", "tensorboard", "torchexplorer_none", "watch_none", "watch")

SIZES: dict[str, dict[str, int]] = {
    "mlp": {"width": 256, "layers": 4, "batch": 64},
    "cnn": {"channels": 8, "image": 32, "batch": 16, "classes": 10},
    "transformer": {"width": 64, "heads": 4, "blocks": 2, "vocab": 128, "seq": 32, "batch": 8},
}


def scale_sizes(factor: float) -> None:
    """Shrink every model (for the smoke test): widths and batches times ``factor``."""
    for sizes in SIZES.values():
        for key in ("width", "batch", "channels"):
            if key in sizes:
                sizes[key] = max(4, int(sizes[key] * factor))
    SIZES["transformer"]["width"] -= SIZES["transformer"]["width"] % SIZES["transformer"]["heads"]


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, width: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.acts = nn.ModuleList(nn.ReLU() for _ in range(layers - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.acts):
                x = self.acts[i](x)
        return x


class CNN(nn.Module):
    def __init__(self, channels: int, image: int, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(2 * channels * (image // 4) ** 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        return self.fc(self.flatten(x))


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        h = self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, h, w // h).transpose(1, 2)

        y = F.scaled_dot_product_attention(
            split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True
        )
        return self.out(y.transpose(1, 2).reshape(b, s, w))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, width: int, heads: int, blocks: int, vocab: int, seq: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(blocks)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        return self.head(self.norm(self.blocks(x)))


@dataclass
class Workload:
    model: nn.Module
    batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    lr: float


def build(name: str) -> Workload:
    """The model ``name`` (one of MODELS), its data and its loss."""
    s = SIZES[name]
    if name == "mlp":
        w, bs = s["width"], s["batch"]
        return Workload(
            MLP(w, s["layers"]),
            lambda g: (torch.randn(bs, w, generator=g), torch.randn(bs, w, generator=g)),
            F.mse_loss,
            1e-3,
        )
    if name == "cnn":
        bs, im, k = s["batch"], s["image"], s["classes"]
        return Workload(
            CNN(s["channels"], im, k),
            lambda g: (torch.randn(bs, 3, im, im, generator=g),
                       torch.randint(k, (bs,), generator=g)),
            F.cross_entropy,
            1e-2,
        )
    if name == "transformer":
        bs, seq, vocab = s["batch"], s["seq"], s["vocab"]

        def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
            tokens = torch.randint(vocab, (bs, seq + 1), generator=g)
            return tokens[:, :-1], tokens[:, 1:]

        return Workload(
            Transformer(s["width"], s["heads"], s["blocks"], vocab, seq),
            batch,
            lambda logits, target: F.cross_entropy(logits.flatten(0, 1), target.flatten()),
            1e-3,
        )
    raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")


def train_step(model: nn.Module, opt: torch.optim.Optimizer, work: Workload,
               gen: torch.Generator) -> torch.Tensor:
    """One training step, the same for every contender: hooks do all the watching."""
    opt.zero_grad(set_to_none=True)
    x, y = work.batch(gen)
    loss = work.loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


# --------------------------------------------------------------------------------------
# Contenders
# --------------------------------------------------------------------------------------


def _tensors(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors among a module's positional inputs or its output."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


class _StepCounter:
    """Counts training steps by forward calls of the root module in training mode, and
    says whether the current one is a logged one (step % log_freq == 0, as torchexplorer)."""

    def __init__(self, root: nn.Module, log_freq: int):
        self.log_freq = log_freq
        self.step = -1
        self.logging = False
        self.handles = [root.register_forward_pre_hook(self._pre)]

    def _pre(self, module: nn.Module, _inputs: Any) -> None:
        self.step += 1
        self.logging = module.training and self.step % self.log_freq == 0

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class FloorWatch(_StepCounter):
    """The least that watching every module at ``log_freq`` costs the training thread.

    A forward hook on every module that returns at once on steps that are not logged; on
    a logged step it copies the module's floating-point inputs and outputs (detached)
    into memory allocated once, registers a hook on those that require a gradient which
    copies their gradient the same way, copies the parameters at the root's forward and
    registers a hook on each parameter that copies its gradient. No histograms, no norms,
    no names, no graph, no writer: whatever computes those can do it elsewhere from the
    copies. ``copied`` counts the elements copied (the smoke test checks it).
    """

    def __init__(self, root: nn.Module, log_freq: int):
        super().__init__(root, log_freq)
        self.params = [p for p in root.parameters() if p.requires_grad]
        self.buffers: dict[tuple, list[torch.Tensor]] = {}
        self.slot = 0
        self.copied = 0
        self.param_hooks: list = []
        self.handles.append(root.register_forward_pre_hook(self._root_pre))
        for m in root.modules():
            self.handles.append(m.register_forward_hook(self._post))

    def _copy(self, tensors: list[torch.Tensor]) -> None:
        # Destinations are planned once per call site and shapes, as the recorder does.
        key = (self.slot, tuple(t.shape for t in tensors))
        self.slot += 1
        dst = self.buffers.get(key)
        if dst is None:
            dst = self.buffers[key] = [torch.empty_like(t) for t in tensors]
        with torch.no_grad():
            torch._foreach_copy_(dst, [t.detach() for t in tensors])
        self.copied += sum(t.numel() for t in tensors)

    def _grad_hook(self, grad: torch.Tensor) -> None:
        self._copy([grad])

    def _root_pre(self, _module: nn.Module, _inputs: Any) -> None:
        if self.param_hooks:  # the logged step before has had its backward
            for h in self.param_hooks:
                h.remove()
            self.param_hooks.clear()
        if not self.logging:
            return
        self.slot = 0
        self._copy(self.params)
        self.param_hooks = [p.register_hook(self._grad_hook) for p in self.params]

    def remove(self) -> None:
        super().remove()
        for h in self.param_hooks:
            h.remove()
        self.param_hooks.clear()

    def _post(self, _module: nn.Module, inputs: Any, output: Any) -> None:
        if not self.logging:
            return
        tensors = _tensors(inputs) + _tensors(output)
        if tensors:
            self._copy(tensors)
            for t in tensors:
                if t.requires_grad:
                    t.register_hook(self._grad_hook)


class TensorBoardHooks(_StepCounter):
    """TensorBoard's ``SummaryWriter.add_histogram`` on the tensors watch records, every
    ``log_freq`` steps: every module's floating-point inputs and outputs (forward hooks),
    the per-sample l2 norms of their gradients (tensor hooks; torchexplorer's io_grad), and
    every parameter and its gradient (a hook after the gradient is accumulated)."""

    def __init__(self, root: nn.Module, log_freq: int, logdir: str):
        from torch.utils.tensorboard import SummaryWriter

        super().__init__(root, log_freq)
        self.writer = SummaryWriter(logdir)
        names = {m: n or "root" for n, m in root.named_modules()}
        for m, name in names.items():
            self.handles.append(m.register_forward_hook(self._io_hook(name)))
        for pname, p in root.named_parameters():
            self.handles.append(p.register_post_accumulate_grad_hook(self._param_hook(pname)))

    def _io_hook(self, name: str) -> Callable:
        def hook(_module: nn.Module, inputs: Any, output: Any) -> None:
            if not self.logging:
                return
            for role, tensors in (("input", _tensors(inputs)), ("output", _tensors(output))):
                for i, t in enumerate(tensors):
                    tag = f"{name}/{role}_{i}"
                    self.writer.add_histogram(tag, t.detach(), self.step)
                    if t.requires_grad:
                        t.register_hook(self._grad_hook(tag + "_grad_norm"))
        return hook

    def _grad_hook(self, tag: str) -> Callable:
        def hook(grad: torch.Tensor) -> None:
            norms = grad.detach().reshape(grad.shape[0] if grad.dim() else 1, -1).norm(dim=1)
            self.writer.add_histogram(tag, norms, self.step)
        return hook

    def _param_hook(self, name: str) -> Callable:
        def hook(p: torch.Tensor) -> None:
            if not self.logging:
                return
            self.writer.add_histogram(f"params/{name}", p.detach(), self.step)
            self.writer.add_histogram(f"params_grad/{name}", p.grad.detach(), self.step)
        return hook

    def close(self) -> None:
        self.remove()
        self.writer.close()


class Attached:
    """What ``attach`` returns: ``close()`` ends the contender's work (flushes, stops
    its writer, removes its hooks)."""

    def __init__(self, close: Callable[[], None], obj: Any = None):
        self._close = close
        self.obj = obj

    def close(self) -> None:
        self._close()


def attach(contender: str, model: nn.Module, log_freq: int, out_dir: str) -> Attached:
    """Hook ``contender`` (one of CONTENDERS) into ``model``, logging every ``log_freq``
    steps; files, if any, go under ``out_dir``."""
    if contender == "bare":
        return Attached(lambda: None)
    if contender == "floor":
        floor = FloorWatch(model, log_freq)
        return Attached(floor.remove, floor)
    if contender == "tensorboard":
        tb = TensorBoardHooks(model, log_freq, out_dir)
        return Attached(tb.close, tb)
    if contender == "torchexplorer_none":
        import torchexplorer

        # backend='none' does all of torchexplorer's work on a logged step (histograms
        # of every module's io, io_grad, params and params_grad, and the layout of its
        # explorer) and only leaves out handing the result to wandb or to the standalone
        # app's data.json; its hooks stay in the model (torchexplorer cannot unwatch).
        wrapper = torchexplorer.watch(model, log_freq=log_freq, backend="none", verbose=False)
        return Attached(lambda: None, wrapper)
    if contender in ("watch_none", "watch"):
        import comgra_like

        kwargs: dict[str, Any] = {"log_freq": log_freq, "verbose": False}
        if contender == "watch_none":
            kwargs["backend"] = "none"
        else:
            kwargs["backend"] = "standalone"
            kwargs["standalone_dir"] = out_dir
        handle = comgra_like.watch(model, **kwargs)

        def close() -> None:
            for name in ("close", "finalize", "remove", "unwatch"):
                end = getattr(handle, name, None)
                if callable(end):
                    end()
                    return

        return Attached(close, handle)
    raise ValueError(f"unknown contender {contender!r}: choose one of {', '.join(CONTENDERS)}")
