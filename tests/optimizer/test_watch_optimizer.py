"""watch(model, optimizer=opt) on plain loops: the recorded gradient is the one the
optimizer step used (captured by the test's own optimizer pre-hook) with gradient
accumulation, a GradScaler (torch.amp.GradScaler("cpu") on a float32 model) and
clip_grad_norm_; the norm before clipping is clip_grad_norm_'s own answer; a step the
scaler skips is recorded as skipped; training is bitwise the same with and without."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import comgra_like
from comgra_like import ConfigurationError
from comgra_like.query import open_group
from comgra_like.query.optimizer import read_optimizer_state

from .loops import Capture, batches, model, train

ACCUM = 3


def _watch(net, tmp_path, opt, **kw):
    return comgra_like.watch(net, optimizer=opt, standalone_dir=str(tmp_path / "w"),
                             trial_id="t", verbose=False, bins=7, sample_n=None,
                             reject_outlier_proportion=0.0, **kw)


def _scaler():
    return torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)


def _same_gradient(group, step, name, used: np.ndarray) -> None:
    """The recorded gradient of ``name`` at ``step`` is ``used``: its extremes exactly, its
    mean and norm to float32 rounding, and its exact histogram (every value, 7 bins)."""
    stats = group.read_tensor("t", step, -1, name, name, "gradient:optimizer", "none").stats
    assert (stats["min"], stats["max"]) == (used.min(), used.max()), name
    used64 = used.astype(np.float64)
    np.testing.assert_allclose([stats["mean"], stats["norm"]],
                               [used64.mean(), np.sqrt((used64 ** 2).sum())], rtol=1e-5)
    h = group.read_histograms("t", steps=step, what="params_grad",
                              recording_types="gradient:optimizer")
    row = h[(h.module == name.rpartition(".")[0]) & (h.role == name.rpartition(".")[2])]
    assert len(row) == 1, (name, len(row))
    counts, _ = np.histogram(used, bins=7, range=(used.min(), used.max()))
    np.testing.assert_array_equal(row.iloc[0].counts, counts)


def _global(frame, quantity):
    rows = frame[(frame.parameter == "optimizer") & (frame.quantity == quantity)]
    return dict(zip(rows.training_step, rows.value))


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "grad-scaler"])
def test_recorded_gradient_is_the_one_the_optimizer_used(tmp_path, scaled):
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    scaler = _scaler() if scaled else None
    handle = _watch(net, tmp_path, opt, log_freq=2, scaler=scaler)
    cap = Capture(opt)  # registered after watch's hooks: sees what the step got
    _, clip_norms = train(net, opt, batches(4 * ACCUM), accum=ACCUM, scaler=scaler, clip=0.5,
                          handle=handle)
    handle.unwatch()
    assert cap.count == 4
    group = open_group(handle.group_path)
    steps = group.list_steps("t")
    assert sorted(set(steps.training_step)) == [0, 2]  # optimizer steps 0 and 2 of 0..3
    assert (steps.groupby("training_step").size() == ACCUM).all()  # one iteration each
    types = set(group.list_tensors("t", 0).recording_type)
    assert "gradient:optimizer" in types and not any(t.startswith("gradient:backward")
                                                     for t in types)
    names = {id(p): f"model.{n}" for n, p in net.named_parameters()}
    for step in (0, 2):
        for pid, name in names.items():
            _same_gradient(group, step, name, cap.grads[step][pid].numpy())
    frame = read_optimizer_state(group, "t")
    after = _global(frame, "grad_norm")
    before = _global(frame, "grad_norm_before_clipping")
    for step in (0, 2):
        # clip_grad_norm_'s own answer: the total norm before it clipped
        np.testing.assert_allclose(before[step], clip_norms[step], rtol=1e-5)
        np.testing.assert_allclose(after[step], 0.5, rtol=1e-4)
        assert before[step] > 0.5
    assert set(_global(frame, "skipped").values()) == {0.0}


def test_norm_before_clipping_without_the_call_is_the_last_backwards(tmp_path):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    handle = _watch(net, tmp_path, opt, log_freq=1)
    _, clip_norms = train(net, opt, batches(2 * ACCUM), accum=ACCUM, clip=0.1)
    handle.unwatch()
    before = _global(read_optimizer_state(open_group(handle.group_path), "t"),
                     "grad_norm_before_clipping")
    np.testing.assert_allclose([before[0], before[1]], clip_norms, rtol=1e-5)


def test_a_step_the_scaler_skips_is_recorded_as_skipped(tmp_path):
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    scaler = _scaler()
    handle = _watch(net, tmp_path, opt, log_freq=1, scaler=scaler)
    cap = Capture(opt)
    train(net, opt, batches(4 * ACCUM), accum=ACCUM, scaler=scaler, poison_step=1)
    handle.unwatch()
    assert cap.count == 3  # the scaler skipped the second optimizer step
    group = open_group(handle.group_path)
    steps = group.list_steps("t")
    assert sorted(set(steps.training_step)) == [0, 1, 2, 3]
    assert (steps.groupby("training_step").size() == ACCUM).all()
    frame = read_optimizer_state(group, "t")
    assert _global(frame, "skipped") == {0: 0.0, 1: 1.0, 2: 0.0, 3: 0.0}
    scales = _global(frame, "loss_scale")
    assert scales[1] == 2.0 ** 10 and scales[2] == 2.0 ** 9  # backed off after the skip
    assert "gradient:optimizer" not in set(group.list_tensors("t", 1).recording_type)
    names = {id(p): f"model.{n}" for n, p in net.named_parameters()}
    for pid, name in names.items():  # watch step 2 is the optimizer's second step
        _same_gradient(group, 2, name, cap.grads[1][pid].numpy())


def test_micro_batch_gradients_keep_each_backwards_group(tmp_path):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    handle = _watch(net, tmp_path, opt, log_freq=1, micro_batch_gradients=True)
    train(net, opt, batches(ACCUM), accum=ACCUM)
    handle.unwatch()
    types = set(open_group(handle.group_path).list_tensors("t", 0).recording_type)
    assert {"gradient:backward", "gradient:backward_2", "gradient:backward_3"} <= types


def test_training_is_bitwise_identical_with_and_without_watch(tmp_path):
    def run(watched: bool):
        net = model()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        scaler = _scaler()
        handle = _watch(net, tmp_path, opt, log_freq=2, scaler=scaler) if watched else None
        losses, _ = train(net, opt, batches(4 * ACCUM), accum=ACCUM, scaler=scaler, clip=0.5,
                          handle=handle, poison_step=1)
        if handle is not None:
            handle.unwatch()
        return net, losses, opt

    bare, bare_losses, bare_opt = run(False)
    watched, watched_losses, watched_opt = run(True)
    assert bare_losses == watched_losses
    for (name, a), b in zip(bare.named_parameters(), watched.parameters()):
        assert torch.equal(a, b), name
    for a, b in zip(bare.parameters(), watched.parameters()):
        for key, value in bare_opt.state[a].items():
            assert torch.equal(value, watched_opt.state[b][key]), key


def test_bad_arguments_get_clear_errors(tmp_path):
    net = model()
    with pytest.raises(ConfigurationError, match="optimizer="):
        _watch(net, tmp_path, "adam")
    with pytest.raises(ConfigurationError, match="go with optimizer="):
        comgra_like.watch(net, standalone_dir=str(tmp_path / "w"), scaler=_scaler())
    handle = comgra_like.watch(net, standalone_dir=str(tmp_path / "w"), trial_id="u",
                               verbose=False)
    with pytest.raises(ConfigurationError, match="optimizer="):
        handle.gradients_before_clipping()
    handle.unwatch()


def test_with_a_recorder_the_users_loop_drives_the_steps(tmp_path):
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    rec = comgra_like.ComgraRecorder(
        tmp_path, "g", "t", comgra_like.DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=0)
    handle = comgra_like.watch(net, recorder=rec, optimizer=opt, verbose=False)
    cap = Capture(opt)
    data = batches(2 * ACCUM)
    for step in range(2):
        rec.start_batch(step, 5, type_of_execution="training")
        for micro in range(ACCUM):  # accumulation: one iteration per micro-batch
            x, y = data[step * ACCUM + micro]
            rec.start_iteration()
            (torch.nn.functional.mse_loss(net(x), y) / ACCUM).backward()
            rec.finish_iteration()
        opt.step()
        opt.zero_grad()
        rec.finish_batch()
    handle.unwatch()
    rec.finalize()
    group = open_group(tmp_path / "g")
    frame = group.read_optimizer_state("t")
    assert set(frame[frame.quantity == "momentum_norm"].training_step) == {0, 1}
    for step in range(2):
        for name, p in net.named_parameters():
            stats = group.read_tensor("t", step, -1, f"model.{name}", f"model.{name}",
                                      "gradient:optimizer", "none").stats
            used = cap.grads[step][id(p)].numpy()
            assert (stats["min"], stats["max"]) == (used.min(), used.max())


def test_several_optimizers_each_record_their_parameters(tmp_path):
    net = model()
    first = torch.optim.Adam(net[0].parameters(), lr=1e-2)
    second = torch.optim.SGD(net[2].parameters(), lr=0.1, momentum=0.9)
    handle = _watch(net, tmp_path, [first, second], log_freq=1)
    for x, y in batches(3):
        torch.nn.functional.mse_loss(net(x), y).backward()
        first.step()
        second.step()
        first.zero_grad()
        second.zero_grad()
    handle.unwatch()
    frame = open_group(handle.group_path).read_optimizer_state("t")
    assert sorted(set(frame.training_step)) == [0, 1, 2]
    by_param = frame.groupby("parameter").optimizer.first().to_dict()
    assert by_param["model.0.weight"] == "Adam" and by_param["model.2.weight"] == "SGD"
    assert by_param["optimizer"] == "Adam" and by_param["optimizer_1"] == "SGD"
    assert {"exp_avg_norm"} <= set(frame[frame.parameter == "model.0.weight"].quantity)
    assert {"momentum_norm"} <= set(frame[frame.parameter == "model.2.weight"].quantity)


class _OddAdam(torch.optim.SGD):
    """An optimizer with Adam-like state whose betas cannot be read as numbers; its
    step() calls SGD's, so the step hooks run nested when SGD's step is hooked too."""

    def step(self, closure=None):
        super().step(closure)
        for group in self.param_groups:
            group["betas"] = ("not", "numbers")
            for p in group["params"]:
                self.state[p]["exp_avg"] = torch.zeros_like(p)
                self.state[p]["exp_avg_sq"] = torch.ones_like(p)
                self.state[p]["step"] = torch.tensor(1.0)


def test_a_failure_inside_the_hooks_never_reaches_training(tmp_path, caplog):
    def run(watched):
        net = model()
        opt = _OddAdam(net.parameters(), lr=0.1)
        handle = _watch(net, tmp_path, opt, log_freq=1) if watched else None
        losses, _ = train(net, opt, batches(3))
        if handle is not None:
            report = handle.report()
            handle.unwatch()
            return net, losses, report
        return net, losses, None

    torch.optim.SGD(model().parameters(), lr=0.1)  # SGD.step hooked: nested step hooks
    bare, bare_losses, _ = run(False)
    with caplog.at_level("WARNING", logger="comgra_like"):
        net, losses, report = run(True)
    assert losses == bare_losses
    for a, b in zip(bare.parameters(), net.parameters()):
        assert torch.equal(a, b)
    said = [r for r in caplog.records if "comgra_like optimizer: an internal error" in
            r.getMessage()]
    assert len(said) == 1  # logged once, counted after
    assert report["optimizer"]["internal_errors"]["count"] == 3, report["optimizer"]
    assert report["optimizer"]["steps_seen"] == 3  # the outermost step() only


def test_a_step_with_a_closure_records_the_gradient_the_closure_made(tmp_path):
    # Lightning's automatic optimization and LBFGS: forward and backward run inside
    # optimizer.step(closure), after the step's pre-hooks
    def run(watched: bool):
        net = model()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        handle = _watch(net, tmp_path, opt, log_freq=1) if watched else None
        made = []
        for x, y in batches(3):
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                made.append({n: p.grad.detach().clone() for n, p in net.named_parameters()})
                return loss
            opt.step(closure)
        if handle is not None:
            handle.unwatch()
        return net, made, handle

    bare, _, _ = run(False)
    net, made, handle = run(True)
    for a, b in zip(bare.parameters(), net.parameters()):
        assert torch.equal(a, b)
    group = open_group(handle.group_path)
    assert sorted(set(group.list_steps("t").training_step)) == [0, 1, 2]
    for step in range(3):
        for name, grad in made[step].items():
            _same_gradient(group, step, f"model.{name}", grad.numpy())
