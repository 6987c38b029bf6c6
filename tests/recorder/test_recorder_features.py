"""Recorder features beyond the basic loop: KPI thinning, overrides, loss groups, aliases."""

import numpy as np
import torch

from comgra_like.objects import (
    DecisionMakerForRecordingsFrequencyPerType,
    DecisionMakerForRecordingsHardcoded,
)
from comgra_like.query import open_group
from comgra_like.record.kpi import KpiThinner
from comgra_like.recorder import ComgraRecorder


def test_kpi_thinning_is_geometric_and_keeps_outliers():
    t = KpiThinner()
    kept = [step for step in range(10_000) if t.offer(step, 1.0 + (step % 3) * 0.01)]
    assert kept[:12] == list(range(12))  # dense at first
    gaps = np.diff(kept[-10:])
    assert (gaps > 50).all()  # sparse later
    assert len(kept) < 120
    ratios = np.array(kept[20:]) / np.array(kept[19:-1])
    assert 1.05 < np.median(ratios) < 1.15  # ~10 % apart
    # An outlier between two scheduled points is kept anyway.
    t2 = KpiThinner()
    for step in range(1000):
        t2.offer(step, 1.0)
    assert not t2.offer(1001, 1.0)
    assert t2.offer(1002, 50.0)


def _step(rec, net, step, **kw):
    rec.start_batch(step, 4, **kw)
    rec.start_iteration()
    x = torch.randn(4, 3)
    rec.register_tensor("x", x, is_input=True)
    out = net(x)
    rec.register_tensor("out", out)
    rec.register_tensor("out_again", out)  # the same tensor object under another name
    loss_a = out.pow(2).mean()
    rec.register_tensor("loss_a", loss_a, is_loss=True)
    loss_b = out.abs().mean()
    rec.register_tensor("loss_b", loss_b, is_loss=True)
    loss_a.backward(retain_graph=True)
    grad_a = out.grad.clone() if rec.recording_is_active() else None
    rec.record_current_gradients("a", set_gradients_to_zero_if_not_a_parameter=True)
    loss_b.backward()
    grad_b = out.grad.clone() if rec.recording_is_active() else None
    rec.record_current_gradients("b")
    rec.finish_iteration()
    rec.finish_batch()
    return out.detach(), grad_a, grad_b


def test_override_loss_groups_and_alias(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([]))
    rec.track_module("net", net)
    _step(rec, net, 0)  # not recorded: the decision maker says no
    out, grad_a, grad_b = _step(rec, net, 1, override__recording_is_active=True)
    _step(rec, net, 2, type_of_execution="other", override__recording_is_active=False)
    rec.finalize()
    g = open_group(tmp_path / "g")
    assert g.list_steps("t")["training_step"].tolist() == [1]
    a = g.read_tensor("t", 1, 0, "out", "out", "gradient:a", "sample", 0).values
    b = g.read_tensor("t", 1, 0, "out", "out", "gradient:b", "sample", 0).values
    np.testing.assert_allclose(a, grad_a[0].numpy())
    # Zeroed after group a, so group b holds only loss_b's gradient, not the sum.
    np.testing.assert_allclose(b, grad_b[0].numpy())
    assert not np.allclose(a + b, b)
    # Parameter gradients accumulate (they are not zeroed).
    pa_ = g.read_tensor("t", 1, -1, "net.weight", "net.weight", "gradient:a", "none")
    pb = g.read_tensor("t", 1, -1, "net.weight", "net.weight", "gradient:b", "none")
    assert pb.stats["abs_max"] != pa_.stats["abs_max"]
    # The alias has no rows of its own but reads through to the original.
    rows = g.list_tensors("t", 1)
    assert "out_again" not in set(rows["node"])
    alias = g.read_tensor("t", 1, 0, "out_again", "out_again", "forward", "sample", 0)
    np.testing.assert_allclose(alias.values, out[0].numpy())
    graph = g.read_graph("t", 1, 0)
    assert ("out", "out_again") in {(e.source, e.target) for e in graph.edges}


def test_all_types_known_skips_steps_early(tmp_path):
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(10))
    rec.track_module("net", net)
    rec.start_batch(0, 4, type_of_execution=None)
    assert rec.recording_is_active()  # undecided: must keep everything
    rec.start_iteration()
    rec.finish_iteration()
    rec.decide_recording_of_batch("only_type")
    rec.finish_batch()
    rec.declare_that_all_different_types_of_execution_have_been_encountered()
    rec.start_batch(1, 4, type_of_execution=None)
    assert not rec.recording_is_active()  # no known type could record at step 1
    x = torch.randn(4, 3)
    rec.start_iteration()
    rec.register_tensor("x", x)
    assert not x.requires_grad
    rec.finish_iteration()
    rec.finish_batch()
    rec.start_batch(10, 4, type_of_execution=None)
    assert rec.recording_is_active()
    rec.start_iteration()
    rec.finish_iteration()
    rec.decide_recording_of_batch("only_type")
    rec.finish_batch()
    rec.finalize()
    assert open_group(tmp_path / "g").list_steps("t")["training_step"].tolist() == [0, 10]


def test_deep_model_has_no_recursion_limit(tmp_path):
    """A chain of 3,000 autograd nodes between two registered tensors."""
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]))
    rec.track_module("m", torch.nn.Linear(1, 1))
    rec.start_batch(0, 2)
    rec.start_iteration()
    x = torch.randn(2, 4)
    rec.register_tensor("x", x)
    h = x
    for _ in range(3000):
        h = h * 1.0001 + 0.001
    rec.register_tensor("deep", h)
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    graph = open_group(tmp_path / "g").read_graph("t", 0, 0)
    assert {(e.source, e.target) for e in graph.edges} == {("x", "deep")}


def test_signature_ids_are_not_reused_after_the_table_starts_over(tmp_path, monkeypatch):
    """Capture plans and graphs are cached under registration-signature ids; when the id
    table is emptied, new signatures must get new ids, or a step registering other names
    would reuse another step's cached layout and be stored under the wrong names."""
    from comgra_like.record import step as step_module

    monkeypatch.setattr(step_module, "MAX_SIGNATURE_IDS", 3)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 3)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(8)))
    rec.track_module("net", net)
    names = {}
    for step in range(8):
        # Two sets of names in turn, same shapes: only the names tell the steps apart.
        first, second = ("a", "b") if step % 3 == 0 else ("c", "d")
        names[step] = {first, second}
        rec.start_batch(step, 4)
        rec.start_iteration()
        x = torch.randn(4, 3)
        rec.register_tensor(first, x, is_input=True)
        rec.register_tensor(second, net(x))
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step, expected in names.items():
        stored = set(g.list_tensors("t", step)["node"]) - {"net.weight", "net.bias"}
        assert stored == expected, step
        graph = g.read_graph("t", step, 0)
        assert {(e.source, e.target) for e in graph.edges} >= {tuple(sorted(expected))}
