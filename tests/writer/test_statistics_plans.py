"""The writer's statistics with its layout and plan caches, on odd steps (thousands of
tensors, layouts that change, complex values, parameters that change shape)."""

import numpy as np
import torch

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

from .helpers import new_recorder, record_steps


def writer_specs(params=("w",)):
    """Captures as the writer gets them: batch tensors of two sizes (one with its batch
    dimension second), a scalar loss, and forward and update of 4x4 parameters."""
    from comgra_like.protocol import CaptureSpec

    def param(name, kind, i):
        return CaptureSpec(name, name, name, "parameter", -1, kind, (4, 4), None, False, False, i)

    return [
        CaptureSpec("a", "a", "a", "calculated", 0, "forward", (6, 4), 0, True, True, -1),
        CaptureSpec("b", "b", "b", "calculated", 0, "forward", (6, 4), 0, False, True, -1),
        CaptureSpec("c", "c", "c", "calculated", 0, "forward", (3, 6), 1, True, True, -1),
        *[param(p, "forward", i) for i, p in enumerate(params)],
        *[param(p, "update", i) for i, p in enumerate(params)],
        CaptureSpec("l", "l", "l", "loss", 0, "forward", (), None, False, True, -1),
    ]


def test_the_writers_layout_caches_give_the_rows_of_an_uncached_computation():
    """compute_tensor_table caches what depends only on the layout; the tables of two
    steps with different numbers are those computed without any cache."""
    from comgra_like.writer.statistics import compute_tensor_table

    specs = writer_specs()
    key = object()
    rng = np.random.default_rng(3)
    for step in range(3):
        arrays = [rng.standard_normal(s.numel).astype(np.float32) for s in specs]
        cached = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, None,
                                      layout_key=key)
        plain = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, None)
        assert cached.equals(plain)
        assert cached.num_rows == plain.num_rows > 0
    # Another sample choice under the same layout: other rows, not the cached ones.
    other = compute_tensor_table("t", 3, "main", [0, 2, 5], specs, arrays, None, layout_key=key)
    plain = compute_tensor_table("t", 3, "main", [0, 2, 5], specs, arrays, None)
    assert other.equals(plain) and other.num_rows > cached.num_rows


def test_a_cached_step_plan_reads_the_new_numbers_in_the_same_memory():
    """With ``arrays_key`` the writer keeps the views, groups and update buffer of a step
    and reuses them while the arrays are the same memory: steps that write new numbers
    into that memory (as the training process does into a slot) give the tables of an
    uncached computation, for blocks that are views of the memory as well as for
    stacked copies (tensors of one size that do not lie back to back)."""
    from comgra_like.writer.statistics import compute_tensor_table

    specs = writer_specs(params=("w", "v"))
    # One buffer, as shared memory: "a" and "b" back to back (one view), the parameters
    # with gaps between them (stacked copies).
    memory = np.zeros(400, np.float32)
    starts = [0, 24, 60, 100, 140, 180, 220, 260]
    arrays = [memory[o:o + s.numel] for o, s in zip(starts, specs)]
    key = object()
    rng = np.random.default_rng(4)
    svd_cached, svd_plain = {}, {}
    for step in range(4):
        memory[:] = rng.standard_normal(memory.size).astype(np.float32)
        cached = compute_tensor_table("t", step, "main", [1, 4], specs, arrays, svd_cached,
                                      layout_key=key, arrays_key=("slot", 0))
        copies = [a.copy() for a in arrays]
        plain = compute_tensor_table("t", step, "main", [1, 4], specs, copies, svd_plain)
        assert cached.equals(plain), step
    assert cached.column("update_ratio").null_count < cached.num_rows


def test_a_step_with_thousands_of_tensors(tmp_path):
    """One message per step larger than a pipe's buffer, thousands of captures per slot."""
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(10)),
                         max_num_batch_size_to_record=1)
    rec.track_module("net", net)
    n = 1500
    for step in range(3):
        rec.start_batch(step, 2)
        rec.start_iteration()
        x = torch.randn(2, 3)
        rec.register_tensor("x", x, is_input=True)
        for i in range(n):
            rec.register_tensor(f"t{i:04d}", x * (i + 1))
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    table = g.list_tensors("t", 2)
    assert set(table.query("recording_type == 'forward' and kind == 'calculated'")["node"]) == {
        f"t{i:04d}" for i in range(n)}
    r = g.read_tensor("t", 2, 0, "t1499", "t1499", "forward", "sample", 0)
    x0 = g.read_tensor("t", 2, 0, "x", "x", "forward", "sample", 0).values
    np.testing.assert_allclose(r.values, x0 * 1500, rtol=1e-6)


def test_layouts_that_change_every_step_stay_bounded_and_correct(tmp_path):
    """Each batch size is a new capture layout: past 256 the ids are reused, each time
    together with its layout, and every step still reads back its own values."""
    rec, net = new_recorder(tmp_path, range(300))
    rec.writer.flush_seconds = 3600
    inputs = {}
    for step in range(300):
        inputs |= record_steps(rec, net, [step], batch=1 + step % 299)
    assert len(rec.writer.layout_ids) <= 256
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step in (0, 255, 256, 257, 298, 299):
        got = g.read_tensor("t", step, 0, "x", "x", "forward", "batch_mean").values
        np.testing.assert_allclose(got, inputs[step].detach().mean(0).numpy(), rtol=1e-5, atol=1e-6)


def test_cached_parameter_registrations_follow_a_parameter_whose_shape_changes(tmp_path):
    """The parameters' registrations are built once and reused; a parameter whose data is
    replaced by one of another shape is recorded with its new shape and values (the bias
    here broadcasts, so nothing else in the step changes shape)."""
    rec, net = new_recorder(tmp_path, range(6))
    record_steps(rec, net, [0, 1])
    with torch.no_grad():
        net.bias.data = torch.tensor([7.0])
    record_steps(rec, net, [2, 3, 4, 5])
    rec.finalize()
    g = open_group(tmp_path / "g")
    for step in (2, 3, 4, 5):
        bias = g.read_tensor("t", step, -1, "net.bias", "net.bias", "forward", "none")
        assert tuple(bias.shape) == (1,)
        assert bias.stats["mean"] == 7.0 and bias.stats["max"] == 7.0
        assert g.read_graph("t", step, 0).node("net.bias").shapes["net.bias"] == (1,)
    assert g.read_graph("t", 1, 0).node("net.bias").shapes["net.bias"] == (2,)


def test_a_module_tracked_after_a_dropped_batch_is_recorded(tmp_path):
    """A batch started for dynamic recording and then not recorded has built the
    parameters' registrations already; a module tracked afterwards must still appear."""
    net_a, net_b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded({5}))
    rec.track_module("a", net_a)
    rec.start_batch(0, 4, type_of_execution=None)
    rec.decide_recording_of_batch(None)  # not recorded after all
    rec.finish_batch()
    rec.track_module("b", net_b)
    x = torch.randn(4, 3)
    rec.start_batch(5, 4)
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("out", net_b(net_a(x)))
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    nodes = set(open_group(tmp_path / "g").list_tensors("t", 5)["node"])
    assert {"a.weight", "a.bias", "b.weight", "b.bias", "x", "out"} <= nodes


def test_a_complex_tensor_records_its_magnitude_and_leaves_real_tensors_signed(tmp_path):
    """Complex tensors are stored as their magnitude; real tensors copied in the same
    call keep their signs (they once went through abs() too)."""
    rec, net = new_recorder(tmp_path, {0})
    x = torch.tensor([[-3.0, -2.0, -1.0]] * 4)
    z = torch.complex(torch.full((4, 2), 3.0), torch.full((4, 2), -4.0))
    rec.start_batch(0, 4)
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("z", z)
    rec.register_tensor("out", net(x))
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    g = open_group(tmp_path / "g")
    got_x = g.read_tensor("t", 0, 0, "x", "x", "forward", "batch_mean").values
    np.testing.assert_allclose(got_x, [-3.0, -2.0, -1.0])
    got_z = g.read_tensor("t", 0, 0, "z", "z", "forward", "batch_mean").values
    np.testing.assert_allclose(got_z, [5.0, 5.0])
