"""Gradient flow matrices between connected tensors (issue 18), in the training process.

What is computed. Let ``a`` (earlier) and ``b`` (later) be tensors of one forward pass,
``b`` computed from ``a``, and ``g_b = dL/db`` the gradient the loss sends to ``b``. For
one sample ``s``, with ``i`` a unit of ``b[s]`` and ``j`` a unit of ``a[s]`` (flat
indices of the per-sample shapes)::

    F[i, j] = g_b[s, i] * d b[s, i] / d a[s, j]

is the part of the gradient reaching unit ``j`` of ``a`` that passes through unit ``i``
of ``b``: the chain rule's term for that pair of units. It is the Jacobian weighted by
the upstream gradient (``weighting="gradient"``); ``weighting="none"`` stores the plain
Jacobian ``d b[s, i] / d a[s, j]``.

Conservation: ``sum_i F[i, j] = g_a[s, j]`` (the gradient of ``a``) exactly when every
path from ``a[s]`` to the loss goes through ``b[s]``: ``b`` is the only consumer of ``a``
on the way to the loss (no skip connection around ``b``, ``a`` not used by another loss
term) and samples do not interact between ``a`` and ``b`` (no batch norm in training
mode, no attention across the batch). Otherwise the sum is the share of ``g_a`` that
flows through ``b``. A chain ``a -> b -> c`` gives consecutive matrices whose target of
one is the source of the next.

Stored shapes keep the tensors' own: a full flow has shape ``b[s].shape + a[s].shape``
(like ``torch.autograd.functional.jacobian``), so a 2-D map stays a map on both sides;
a partial flow has shape ``(k,) + a[s].shape`` for the ``k`` target units asked for.

Cost. Row ``i`` of the Jacobian is one vector-Jacobian product from ``b`` back to ``a``
(``autograd.grad`` with a one-hot ``grad_outputs``, the graph retained); rows are batched
``chunk`` at a time with ``is_grads_batched`` (vmap over the backward pass), so all rows
of a flow cost ``numel(b[s]) / chunk`` batched backward passes through the layers between
``a`` and ``b`` for the whole batch. When the full matrix has more than ``max_entries``
entries it is not computed: the record says ``too_large`` with its size, and the caller
asks for single units (``rows``) instead, one backward pass each.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import ConfigurationError, GraphError
from ..format import flows as files_of_flows

#: Largest number of entries of a flow computed whole (64 MB of float32).
DEFAULT_MAX_ENTRIES = 2**24
#: Largest one-hot block handed to one batched backward pass (entries of the result).
_CHUNK_ENTRIES = 2**23
WEIGHTINGS = ("gradient", "none")
_UNSET: Any = object()
# Set while jacobian_rows runs its backward passes: they go through the chain's gradient
# hooks too, which must keep only the loss's gradient.
_flow_passes = threading.local()
# Who else has tensors retaining their gradient (the ComgraRecorder: its registrations),
# as weak methods, so that a recorder that is gone is not kept alive by this list.
_RETAINERS: list[weakref.WeakMethod] = []
_RETAINERS_LOCK = threading.Lock()


def in_flow_pass() -> bool:
    """Whether this thread is inside a flow's extra backward pass: gradient hooks of
    others (watch(), the metrics' collector) ignore those passes, which are not the
    training's and carry batched gradients."""
    return getattr(_flow_passes, "active", False)


def protect_retained(provider: Callable[[], Iterable[torch.Tensor]]) -> None:
    """Make every flow pass put back the ``.grad`` of the tensors ``provider()`` names
    (a bound method, held weakly), like the chain's own nodes'. The ComgraRecorder
    passes the registered tensors of its open step: one registered between two nodes
    lies on the flow's backward path, and autograd adds each pass's (batched) gradient
    to the ``.grad`` it retains for the recorder."""
    with _RETAINERS_LOCK:
        _RETAINERS[:] = [m for m in _RETAINERS if m() is not None]
        _RETAINERS.append(weakref.WeakMethod(provider))


def retained_tensors() -> list[torch.Tensor]:
    """The tensors the providers of :func:`protect_retained` name now."""
    with _RETAINERS_LOCK:
        providers = [m() for m in _RETAINERS]
    return [t for p in providers if p is not None for t in p()]


@dataclass
class Flow:
    """One flow between two nodes for one sample, as numpy arrays (see the module text)."""

    source: str
    target: str
    sample: int
    source_shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    status: str  # complete, partial or too_large (format.flows)
    weighting: str
    flow: np.ndarray | None  # None when too_large
    rows: np.ndarray | None  # flat target indices of a partial flow
    grad_source: np.ndarray
    grad_target: np.ndarray
    value_source: np.ndarray
    value_target: np.ndarray
    position: int = 0  # index in its chain

    @property
    def full_entries(self) -> int:
        return int(np.prod(self.target_shape, dtype=np.int64) * np.prod(self.source_shape,
                                                                        dtype=np.int64))

    def meta(self) -> dict:
        """The fields of record.json describing this flow."""
        return {"source": self.source, "target": self.target, "sample": self.sample,
                "source_shape": list(self.source_shape), "target_shape": list(self.target_shape),
                "status": self.status, "weighting": self.weighting,
                "full_entries": self.full_entries, "position": self.position,
                "rows": None if self.rows is None else [int(r) for r in self.rows]}

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"grad_source": self.grad_source, "grad_target": self.grad_target,
               "value_source": self.value_source, "value_target": self.value_target}
        if self.flow is not None:
            out["flow"] = self.flow
        if self.rows is not None:
            out["rows"] = self.rows
        return out


def _per_sample(t: torch.Tensor, batch_dim: int | None, sample: int) -> torch.Tensor:
    if batch_dim is None:
        return t
    if not 0 <= sample < t.shape[batch_dim]:
        raise ConfigurationError(
            f"sample {sample} is out of range: the batch dimension {batch_dim} has "
            f"{t.shape[batch_dim]} samples")
    return t.select(batch_dim, sample)


def jacobian_rows(source: torch.Tensor, target: torch.Tensor, rows: Sequence[int], *,
                  sample: int = 0, source_batch_dim: int | None = 0,
                  target_batch_dim: int | None = 0, names: tuple[str, str] = ("a", "b"),
                  chunk: int | None = None, keep_grads: Sequence[torch.Tensor] = ()
                  ) -> torch.Tensor:
    """Rows ``rows`` (flat indices into ``target[sample]``) of the Jacobian of
    ``target[sample]`` with respect to ``source[sample]``: shape ``(len(rows),) +
    source[sample].shape``. The graph from source to target must still exist (it is
    kept: call this as often as needed).

    A tensor between source and target that retains its gradient (``retain_grad()``,
    as the recorder does for registered tensors) would get each pass's gradients added
    to its ``.grad`` -- batched ones, which leak out of the batched pass and break the
    next one. The ``.grad`` of the tensors in ``keep_grads`` (FlowChain passes its
    nodes and the recorder's registrations it saw) and of those of
    :func:`retained_tensors` is put back after every pass.
    """
    if not target.requires_grad or target.grad_fn is None:
        raise GraphError(f"{names[1]!r} is not computed by a differentiable operation: "
                         "there is no graph from it back to any other node")
    if not source.requires_grad:
        raise GraphError(f"{names[0]!r} does not require a gradient: no flow reaches it")
    flat = _per_sample(target, target_batch_dim, sample).reshape(-1)
    n = flat.numel()
    rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64).reshape(-1))
    if rows_t.numel() and (int(rows_t.min()) < 0 or int(rows_t.max()) >= n):
        raise ConfigurationError(
            f"unit indices for {names[1]!r} must be in [0, {n}) (flat indices of one "
            f"sample's {tuple(_per_sample(target, target_batch_dim, sample).shape)})")
    if chunk is None:
        chunk = max(1, min(128, _CHUNK_ENTRIES // max(1, source.numel())))
    guarded = list({id(t): t for t in (*keep_grads, *retained_tensors())
                    if t.retains_grad}.values())
    parts = []
    for start in range(0, rows_t.numel(), chunk):
        idx = rows_t[start:start + chunk]
        onehot = torch.zeros(len(idx), n, dtype=flat.dtype, device=flat.device)
        onehot[torch.arange(len(idx)), idx.to(flat.device)] = 1
        _flow_passes.active = True
        saved = [(t, t.grad) for t in guarded]
        try:
            (g,) = torch.autograd.grad(flat, source, grad_outputs=onehot, retain_graph=True,
                                       is_grads_batched=True, allow_unused=True)
        except RuntimeError as e:
            if "second time" in str(e) or "freed" in str(e):
                raise GraphError(
                    f"the graph between {names[0]!r} and {names[1]!r} was freed by a backward "
                    "pass: call loss.backward(retain_graph=True) (or FlowChain.backward(loss)) "
                    "so that flows can be computed afterwards") from e
            raise
        finally:
            _flow_passes.active = False
            for t, grad in saved:
                t.grad = grad
        if g is None:
            raise GraphError(f"{names[1]!r} does not depend on {names[0]!r}: there is no "
                             "flow between them; pick connected nodes (earlier first)")
        sb = None if source_batch_dim is None else source_batch_dim + 1
        parts.append(_per_sample(g, sb, sample).detach())
    if not parts:
        shape = tuple(_per_sample(source, source_batch_dim, sample).shape)
        return torch.zeros((0, *shape), dtype=source.dtype)
    return torch.cat(parts)


def flow_between(source: torch.Tensor, target: torch.Tensor, grad_target: torch.Tensor | None,
                 *, sample: int = 0, source_batch_dim: int | None = 0,
                 target_batch_dim: int | None = 0, rows: Sequence[int] | None = None,
                 max_entries: int = DEFAULT_MAX_ENTRIES, weighting: str = "gradient",
                 names: tuple[str, str] = ("a", "b"), keep_grads: Sequence[torch.Tensor] = ()
                 ) -> tuple[str, np.ndarray | None, np.ndarray | None]:
    """(status, flow, rows) for one pair: the full flow (shape target[s] + source[s])
    when it has at most ``max_entries`` entries and no ``rows`` are asked for, the asked
    rows otherwise, or ``too_large`` without a matrix."""
    if weighting not in WEIGHTINGS:
        raise ConfigurationError(f"weighting must be one of {WEIGHTINGS}, not {weighting!r}")
    if weighting == "gradient" and grad_target is None:
        raise GraphError(f"no gradient reached {names[1]!r}: run the backward pass before "
                         "computing flows weighted by the gradient (or use weighting='none')")
    t_shape = tuple(_per_sample(target, target_batch_dim, sample).shape)
    s_shape = tuple(_per_sample(source, source_batch_dim, sample).shape)
    n_target = int(np.prod(t_shape, dtype=np.int64))
    full = rows is None
    if full:
        if n_target * int(np.prod(s_shape, dtype=np.int64)) > max_entries:
            return files_of_flows.TOO_LARGE, None, None
        rows = range(n_target)
    rows_np = np.asarray(list(rows), dtype=np.int64)
    jac = jacobian_rows(source, target, rows_np, sample=sample,
                        source_batch_dim=source_batch_dim, target_batch_dim=target_batch_dim,
                        names=names, keep_grads=keep_grads)
    if weighting == "gradient":
        g = _per_sample(grad_target, target_batch_dim, sample).reshape(-1)[rows_np]
        jac = jac * g.reshape((-1,) + (1,) * len(s_shape)).to(jac.dtype)
    flow = jac.to(torch.float32).cpu().numpy()
    if full:
        return files_of_flows.COMPLETE, flow.reshape(t_shape + s_shape), None
    return files_of_flows.PARTIAL, flow, rows_np


@dataclass
class _Node:
    name: str
    tensor: torch.Tensor
    batch_dim: int | None
    grad: torch.Tensor | None = None


@dataclass
class FlowChain:
    """A chain of nodes of one forward pass, earlier first, whose flows are wanted.

    Use it inside the function that runs forward and backward::

        chain = FlowChain()
        x = chain.node("input", x)             # a leaf: made to require a gradient
        h = chain.node("conv1", conv1(x))
        out = chain.node("conv2", conv2(h))
        chain.backward(loss_fn(out))           # = loss.backward(retain_graph=True)
        flows = chain.flows(sample=0)          # input->conv1, conv1->conv2

    Name the nodes as the recorder does (``register_tensor``) so a page finds them in the
    dependency graph. ``node`` registers a hook that keeps the gradient the loss sends to
    the node; the graph is kept until :meth:`release`.
    """

    batch_dim: int | None = 0
    _nodes: list[_Node] = field(default_factory=list)
    # the recorder's registrations seen at backward(): a recorder forgets them when its
    # step ends, which the probe loop's function does before the flows are computed
    _retained: dict[int, torch.Tensor] = field(default_factory=dict)

    def node(self, name: str, tensor: torch.Tensor, batch_dim: int | None = _UNSET
             ) -> torch.Tensor:
        """Add ``tensor`` as the next node of the chain; returns it (to use inline)."""
        if any(n.name == name for n in self._nodes):
            raise ConfigurationError(f"the chain has a node {name!r} already; names are unique")
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            raise ConfigurationError(f"node {name!r} must be a floating-point tensor")
        if not tensor.requires_grad:
            if tensor.grad_fn is not None or not tensor.is_leaf:
                raise GraphError(f"node {name!r} does not require a gradient")
            tensor.requires_grad_(True)  # an input: let the gradient reach it
        entry = _Node(name, tensor, self.batch_dim if batch_dim is _UNSET else batch_dim)

        def keep(grad: torch.Tensor, entry: _Node = entry) -> None:
            if in_flow_pass():
                return
            entry.grad = grad.detach() if entry.grad is None else entry.grad + grad.detach()

        tensor.register_hook(keep)
        self._nodes.append(entry)
        return tensor

    @property
    def names(self) -> list[str]:
        return [n.name for n in self._nodes]

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward(retain_graph=True)``: the gradients, and the graph kept for flows."""
        loss.backward(retain_graph=True)
        self._retained.update((id(t), t) for t in retained_tensors())

    def gradient(self, name: str) -> torch.Tensor | None:
        return self._get(name).grad

    def _get(self, name: str) -> _Node:
        for n in self._nodes:
            if n.name == name:
                return n
        raise ConfigurationError(f"the chain has no node {name!r}; it has {self.names}")

    def flows(self, sample: int = 0, *, rows: Mapping[str, Sequence[int]] | None = None,
              max_entries: int = DEFAULT_MAX_ENTRIES, weighting: str = "gradient"
              ) -> list[Flow]:
        """The flows between consecutive nodes for ``sample``. ``rows`` maps a target
        node's name to the flat indices of the units whose rows are wanted (for flows too
        large to compute whole); other pairs are computed whole or marked too_large."""
        if len(self._nodes) < 2:
            raise ConfigurationError("a chain needs at least two nodes for a flow")
        unknown = set(rows or {}) - set(self.names)
        if unknown:
            raise ConfigurationError(f"rows name nodes not in the chain: {sorted(unknown)}; "
                                     f"the chain has {self.names}")
        return self._flows(sample, rows or {}, max_entries, weighting)

    def _flows(self, sample: int, rows: Mapping[str, Sequence[int]], max_entries: int,
               weighting: str) -> list[Flow]:
        return [self._pair(a, b, pos, sample, rows.get(b.name), max_entries, weighting)
                for pos, (a, b) in enumerate(zip(self._nodes, self._nodes[1:]))]

    def flow(self, source: str, target: str, sample: int = 0, *,
             rows: Sequence[int] | None = None, max_entries: int = DEFAULT_MAX_ENTRIES,
             weighting: str = "gradient") -> Flow:
        """The flow of one pair of nodes (``source`` earlier), alone: with ``rows`` only
        those units' rows, one batched backward pass per 128 of them (the per-unit path a
        served row request takes; no other pair is computed)."""
        a, b = self._get(source), self._get(target)
        position = self._nodes.index(a)
        if self._nodes.index(b) <= position:
            raise ConfigurationError(f"{source!r} must come before {target!r} in the chain "
                                     f"{self.names}")
        return self._pair(a, b, position, sample, rows, max_entries, weighting)

    def _pair(self, a: _Node, b: _Node, pos: int, sample: int, rows: Sequence[int] | None,
              max_entries: int, weighting: str) -> Flow:
        status, flow, row_idx = flow_between(
            a.tensor, b.tensor, b.grad, sample=sample, source_batch_dim=a.batch_dim,
            target_batch_dim=b.batch_dim, rows=rows, max_entries=max_entries,
            weighting=weighting, names=(a.name, b.name),
            keep_grads=[n.tensor for n in self._nodes] + list(self._retained.values()))
        return Flow(
            source=a.name, target=b.name, sample=sample,
            source_shape=tuple(_per_sample(a.tensor, a.batch_dim, sample).shape),
            target_shape=tuple(_per_sample(b.tensor, b.batch_dim, sample).shape),
            status=status, weighting=weighting, flow=flow, rows=row_idx,
            grad_source=_side(a.grad, a, sample), grad_target=_side(b.grad, b, sample),
            value_source=_side(a.tensor, a, sample), value_target=_side(b.tensor, b, sample),
            position=pos)

    def release(self) -> None:
        """Drop the tensors (and with them the retained graph)."""
        self._nodes.clear()
        self._retained.clear()


def _side(t: torch.Tensor | None, node: _Node, sample: int) -> np.ndarray:
    if t is None:  # no gradient reached the node: zeros, like autograd's own convention
        t = torch.zeros_like(node.tensor)
    return _per_sample(t.detach(), node.batch_dim, sample).to(torch.float32).cpu().numpy()


def write_flows(flows: Sequence[Flow], group: str | os.PathLike, trial_id: str, *,
                training_step: int | None = None, iteration: int = 0,
                probe_id: str | None = None, chain_id: str | None = None,
                extra: Mapping[str, Any] | None = None) -> list[str]:
    """Store flows (one record each, docs/FORMAT.md "flows") in the trial's ``flows/``
    folder; returns the record ids. ``group`` is the folder ``<comgra_root_path>/<group>``.
    ``chain_id`` (default: a new one) groups the records; ``extra`` adds fields to each
    record.json (a served row request names itself there)."""
    chain_id = chain_id or files_of_flows.new_id("c")
    ids = []
    for f in flows:
        meta = {**(extra or {}), **f.meta(), "training_step": training_step,
                "iteration": int(iteration), "probe_id": probe_id, "chain_id": chain_id,
                "origin": "comgra_like"}
        ids.append(files_of_flows.write_flow(group, trial_id, meta, f.arrays()))
    return ids
