"""Flow matrices (comgra_like/record/flow.py) against torch.autograd.functional.jacobian
times the upstream gradient, on a conv net (padding, stride), an MLP and an attention
block; rows computed one unit at a time against the full matrix; the conservation
identity and where it stops holding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like.errors import ConfigurationError, GraphError
from comgra_like.record.flow import FlowChain, flow_between, jacobian_rows


def reference(f, a: torch.Tensor, grad_b: torch.Tensor, sample: int) -> np.ndarray:
    """g_b[i] * d f(a)_i / d a_j for one sample, shaped b[s].shape + a[s].shape."""
    a_s = a.detach()[sample:sample + 1]
    jac = torch.autograd.functional.jacobian(f, a_s)  # (1, *b) + (1, *a)
    b_shape = tuple(grad_b.shape[1:])
    jac = jac.reshape((1, *b_shape, 1, *a_s.shape[1:]))[0].select(len(b_shape), 0)
    g = grad_b[sample].reshape(b_shape + (1,) * (a_s.dim() - 1))
    return (g * jac).numpy()


def conv_net():
    torch.manual_seed(0)
    conv1 = nn.Conv2d(2, 3, 3, stride=2, padding=1)
    conv2 = nn.Conv2d(3, 4, 3, stride=1, padding=2, dilation=2)
    x = torch.randn(3, 2, 9, 9)
    chain = FlowChain()
    x = chain.node("input", x)
    h = chain.node("conv1", conv1(x))
    out = chain.node("conv2", conv2(torch.relu(h)))
    target = torch.randn_like(out)
    chain.backward(((out - target) ** 2).sum() + out.sum())
    return chain, conv1, conv2, x, h


def test_conv_layers_with_padding_and_stride_equal_the_jacobian():
    chain, conv1, conv2, x, h = conv_net()
    flows = chain.flows(sample=1)
    assert [(f.source, f.target, f.status) for f in flows] == [
        ("input", "conv1", "complete"), ("conv1", "conv2", "complete")]
    first, second = flows
    assert first.flow.shape == (3, 5, 5, 2, 9, 9)  # maps stay maps on both sides
    assert second.flow.shape == (4, 5, 5, 3, 5, 5)
    ref1 = reference(conv1, x, chain.gradient("conv1"), 1)
    ref2 = reference(lambda t: conv2(torch.relu(t)), h, chain.gradient("conv2"), 1)
    np.testing.assert_allclose(first.flow, ref1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second.flow, ref2, rtol=1e-5, atol=1e-6)
    assert np.abs(ref2).max() > 0.1  # a real, non-zero matrix
    # padding: a corner pixel of conv1 receives from fewer conv2 pixels than a central one
    reach = (second.flow != 0).any(axis=(0, 3)).sum(axis=(0, 1))
    assert reach[0, 0] < reach[2, 2]


def test_mlp_equals_the_jacobian_and_flows_are_conserved():
    torch.manual_seed(1)
    l1, l2, l3 = nn.Linear(6, 5), nn.Linear(5, 4), nn.Linear(4, 2)
    chain = FlowChain()
    x = chain.node("x", torch.randn(4, 6))
    h1 = chain.node("h1", torch.tanh(l1(x)))
    h2 = chain.node("h2", torch.sigmoid(l2(h1)))
    out = chain.node("out", l3(h2))
    chain.backward((out ** 3).mean())
    flows = chain.flows(sample=2)
    fns = [lambda t: torch.tanh(l1(t)), lambda t: torch.sigmoid(l2(t)), l3]
    for f, fn, a in zip(flows, fns, (x, h1, h2)):
        np.testing.assert_allclose(f.flow, reference(fn, a, chain.gradient(f.target), 2),
                                   rtol=1e-5, atol=1e-7)
        # each node's only consumer is the next: summing over the target gives g_a
        np.testing.assert_allclose(f.flow.sum(axis=0), f.grad_source, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(f.grad_source, chain.gradient(f.source)[2].numpy())
    # the gradient at the target is the same array on both sides of the chain
    np.testing.assert_array_equal(flows[0].grad_target, flows[1].grad_source)


def test_attention_block_equals_the_jacobian():
    torch.manual_seed(2)
    proj = nn.Linear(4, 8)
    attn = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True)
    chain = FlowChain()
    x = chain.node("tokens", proj(torch.randn(2, 5, 4)))
    y = chain.node("attention", attn(x, x, x, need_weights=False)[0])
    chain.backward((y * torch.linspace(-1, 1, 8)).sum() + (y ** 2).sum())
    (flow,) = chain.flows(sample=0)
    assert flow.flow.shape == (5, 8, 5, 8)
    ref = reference(lambda t: attn(t, t, t, need_weights=False)[0], x,
                    chain.gradient("attention"), 0)
    np.testing.assert_allclose(flow.flow, ref, rtol=1e-4, atol=1e-6)
    # tokens mix: a token of the output receives from every token of the input
    assert (np.abs(flow.flow).sum(axis=(1, 3)) > 0).all()
    np.testing.assert_allclose(flow.flow.sum(axis=(0, 1)), flow.grad_source, rtol=1e-4,
                               atol=1e-6)


def test_one_unit_at_a_time_equals_the_rows_of_the_full_matrix():
    chain, *_ = conv_net()
    full = chain.flows(sample=2)[1]
    units = [0, 7, 24, 99]  # flat indices into conv2's (4, 5, 5)
    partial = chain.flows(sample=2, rows={"conv2": units})[1]
    assert partial.status == "partial" and partial.flow.shape == (4, 3, 5, 5)
    np.testing.assert_array_equal(partial.rows, units)
    np.testing.assert_allclose(partial.flow, full.flow.reshape(100, 3, 5, 5)[units], rtol=1e-6,
                               atol=1e-7)
    # a single unit per backward pass (chunk=1) gives the same rows
    h, out = chain._get("conv1").tensor, chain._get("conv2").tensor
    one = torch.stack([jacobian_rows(h, out, [u], sample=2, chunk=1)[0] for u in units])
    g = chain.gradient("conv2")[2].reshape(-1)[units].reshape(-1, 1, 1, 1)
    np.testing.assert_allclose((g * one).numpy(), partial.flow, rtol=1e-6, atol=1e-7)


def test_a_flow_above_the_bound_is_not_computed_but_its_rows_are():
    chain, *_ = conv_net()
    flows = chain.flows(sample=0, max_entries=1000, rows={"conv2": [3]})
    assert flows[0].status == "too_large" and flows[0].flow is None
    assert flows[0].full_entries == 75 * 162
    assert flows[1].status == "partial" and flows[1].flow.shape == (1, 3, 5, 5)


def test_a_second_path_breaks_the_identity_and_the_flow_is_its_share():
    torch.manual_seed(3)
    lin = nn.Linear(3, 3)
    chain = FlowChain()
    a = chain.node("a", torch.randn(2, 3))
    b = chain.node("b", lin(a))
    chain.backward((b ** 2).sum() + (a * 5).sum())  # a skip path from a to the loss
    (f,) = chain.flows(sample=0)
    through_b = (lin.weight.T @ (2 * b[0])).detach().numpy()
    np.testing.assert_allclose(f.flow.sum(axis=0), through_b, rtol=1e-5)
    np.testing.assert_allclose(f.grad_source - f.flow.sum(axis=0), 5.0, rtol=1e-5)


def test_plain_jacobian_weighting():
    torch.manual_seed(4)
    lin = nn.Linear(3, 2)
    chain = FlowChain()
    a = chain.node("a", torch.randn(1, 3))
    chain.node("b", lin(a))
    (f,) = chain.flows(weighting="none")  # no backward needed for the plain Jacobian
    np.testing.assert_allclose(f.flow, lin.weight.detach().numpy(), rtol=1e-6)


def test_misuse_gets_clear_errors():
    torch.manual_seed(5)
    lin = nn.Linear(3, 3)
    chain = FlowChain()
    a = chain.node("a", torch.randn(2, 3))
    c = chain.node("c", lin(torch.randn(2, 3)))  # not computed from a
    chain.backward(c.sum())
    with pytest.raises(GraphError, match="'c' does not depend on 'a'"):
        chain.flows()
    with pytest.raises(ConfigurationError, match="sample 5 is out of range"):
        chain.flows(sample=5)
    with pytest.raises(ConfigurationError, match=r"not in the chain: \['zz'\]"):
        chain.flows(rows={"zz": [0]})
    with pytest.raises(ConfigurationError, match="already"):
        chain.node("a", a)

    freed = FlowChain()
    x = freed.node("x", torch.randn(2, 3))
    y = freed.node("y", torch.tanh(lin(x)))
    y.sum().backward()  # without retain_graph
    with pytest.raises(GraphError, match="retain_graph=True"):
        freed.flows()

    no_grad = FlowChain()
    x = no_grad.node("x", torch.randn(2, 3))
    y = no_grad.node("y", lin(x))
    with pytest.raises(GraphError, match="no gradient reached 'y'"):
        no_grad.flows()
    with pytest.raises(ConfigurationError, match=r"must be in \[0, 3\)"):
        flow_between(x, y, None, rows=[3], weighting="none", names=("x", "y"))


def test_retained_gradients_of_nodes_survive_the_flow_passes():
    """The recorder retains the gradient of registered tensors (retain_grad): the batched
    flow passes must neither break on them nor change their .grad."""
    torch.manual_seed(0)
    lin, lin2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)
    chain = FlowChain()
    x = chain.node("x", torch.randn(5, 3))
    h = chain.node("h", torch.tanh(lin(x)))
    h.retain_grad()
    y = chain.node("y", lin2(h))
    chain.backward((y ** 2).sum())
    before = h.grad.clone()
    first = chain.flows(2)
    second = chain.flows(2)  # a second round of passes over the same retained tensor
    assert torch.equal(h.grad, before)
    jac = torch.autograd.functional.jacobian(lambda v: lin2(v), h.detach()[2])
    upstream = 2 * y.detach()[2]  # d loss / d y of sample 2
    np.testing.assert_allclose(second[1].flow, (jac * upstream[:, None]).numpy(),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(first[0].flow, second[0].flow)
