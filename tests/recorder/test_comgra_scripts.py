"""What training scripts written for comgra 0.11.5 do, run with comgra_like (issue 14):
``max_num_batch_size_to_record=0``, several models recorded one after another in one
process, and ``record_kpi_in_graph`` with every kind of number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from comgra_like.app import selection as sel
from comgra_like.app.data import AppData
from comgra_like.app.selectors import control_values

from comgra_like.errors import ConfigurationError, RegistrationError
from comgra_like.objects import (
    DecisionMakerForRecordingsFrequencyPerType,
    DecisionMakerForRecordingsHardcoded,
)
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

BATCH_AGGREGATIONS = ["batch_mean", "batch_abs_max", "batch_std"]
CHILD = Path(__file__).with_name("multi_model_child.py")


def _train_step(rec, net, opt, step, x, **start):
    rec.start_batch(step, x.shape[0], **start)
    rec.start_iteration()
    rec.register_tensor("x", x, is_input=True)
    out = net(x)
    rec.register_tensor("out", out)
    loss = out.pow(2).mean()
    rec.register_tensor("loss", loss, is_loss=True)
    loss.backward()
    rec.record_current_gradients("main")
    opt.step()
    opt.zero_grad()
    rec.finish_iteration()
    rec.finish_batch()
    return out.detach()


# ----- item 3: max_num_batch_size_to_record=0 ------------------------------------------


def test_zero_samples_records_batch_statistics_only(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1),
                         max_num_batch_size_to_record=0)
    rec.track_module("net", net)
    outs = [_train_step(rec, net, opt, step, torch.randn(4, 3)) for step in range(3)]
    rec.finalize()

    group = open_group(tmp_path / "g")
    assert group.skipped == []
    steps = group.list_steps("t")
    assert steps["training_step"].tolist() == [0, 1, 2]
    assert all(len(s) == 0 for s in steps["sample_indices"])
    rows = group.list_tensors("t", 2)
    assert (rows["sample_index"] == -1).all()
    out_rows = rows[(rows["node"] == "out") & (rows["recording_type"] == "forward")]
    assert sorted(out_rows["aggregation"]) == sorted(BATCH_AGGREGATIONS)
    # The batch statistics still cover the whole batch.
    mean = group.read_tensor("t", 2, 0, "out", "out", "forward", "batch_mean")
    np.testing.assert_allclose(mean.values, outs[2].mean(0).numpy(), rtol=1e-5)
    assert group.list_trials()[0].settings["max_num_batch_size_to_record"] == 0

    # The GUI: the sample selector offers the batch statistics only, and a wish for a
    # sample (from another trial, say) falls back to one of them instead of breaking.
    data = AppData(tmp_path / "g")
    source = data.option_source()
    selection = sel.refresh(None, source)
    selection = sel.choose(selection, "node", "out", source)
    selection = sel.choose(selection, "recording_type", "forward", source)
    assert sel.field_options(selection["current"], "aggregation", source) == BATCH_AGGREGATIONS
    wants_sample = sel.choose(selection, "aggregation", "sample:0", source)
    assert wants_sample["current"]["aggregation"] in BATCH_AGGREGATIONS
    controls = control_values(data, wants_sample)
    assert [o["value"] for o in controls["options"]["aggregation"]] == BATCH_AGGREGATIONS
    record = data.read_tensor(wants_sample["current"])
    assert record.values.shape == (2,)
    assert data.status().skipped == ()


def test_zero_samples_refuses_a_per_sample_request_at_that_call(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0, 1]),
                         max_num_batch_size_to_record=0)  # accepted, as comgra does
    rec.track_module("net", net)
    rec.start_batch(0, 4, record_all_tensors_per_batch_index_by_default=True)
    rec.start_iteration()
    x = torch.randn(4, 3)
    with pytest.raises(RegistrationError,
                       match=r"record_per_batch_index=True.*max_num_batch_size_to_record=0"
                             r".*(?s:.*)None \(all\)"):
        rec.register_tensor("x", x, is_input=True, record_per_batch_index=True)
    assert not x.requires_grad  # refused before anything changed
    # The loop goes on: the same tensor without the request records.
    rec.register_tensor("x", x, is_input=True, record_per_batch_index=False)
    out = net(x)
    rec.register_tensor("out", out)
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    group = open_group(tmp_path / "g")
    assert set(group.list_tensors("t", 0)["node"]) >= {"x", "out"}


def test_zero_samples_with_categories_per_sample(tmp_path):
    """Dynamic recording names a category per sample; with no samples to record the
    categories pick none, and the step records its batch statistics."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1),
                         max_num_batch_size_to_record=0)
    rec.track_module("net", net)
    rec.start_batch(0, 4, type_of_execution=None)
    rec.start_iteration()
    x = torch.randn(4, 3)
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("out", net(x))
    rec.finish_iteration()
    rec.decide_recording_of_batch("dyn", category_per_sample=["a", "b", "a", "b"])
    rec.finish_batch()
    rec.finalize()
    group = open_group(tmp_path / "g")
    steps = group.list_steps("t")
    assert steps["type_of_execution"].tolist() == ["dyn"]
    assert len(steps["sample_indices"].iloc[0]) == 0
    assert (group.list_tensors("t", 0)["sample_index"] == -1).all()


@pytest.mark.parametrize("bad", [-1, True, 2.0, "3"])
def test_max_num_batch_size_to_record_still_refuses_non_counts(tmp_path, bad):
    with pytest.raises(ConfigurationError, match="max_num_batch_size_to_record.*0 \\(batch"):
        ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                       max_num_batch_size_to_record=bad)


# ----- item 5: record_kpi_in_graph with every kind of number ---------------------------


def _kpi_values(step: int, loss: torch.Tensor) -> dict[str, object]:
    """What real scripts pass as a KPI: the loss tensor itself (0-d, requires grad, before
    backward()), Python numbers, numpy scalars and other one-element tensors."""
    return {
        "loss_tensor": loss,
        "python_float": 0.1 * step + 1 / 3,
        "python_int": 7 * step - 3,
        "np_float32": np.float32(step) / np.float32(3),
        "np_float64": np.float64(step) * np.pi,
        "np_int64": np.int64(2**40 + step),
        "one_element": loss.detach().reshape(1, 1) * 2,
        "long_tensor": torch.tensor(step * 5),
    }


def _train_with_kpis(root: Path | None, steps: int = 8) -> tuple[dict, dict[str, list[float]]]:
    torch.manual_seed(1234)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    rec = None
    if root is not None:
        rec = ComgraRecorder(root, "g", "kpis", DecisionMakerForRecordingsFrequencyPerType(1),
                             max_num_batch_size_to_record=2)
        rec.track_module("net", net)
    expected: dict[str, list[float]] = {}
    for step in range(steps):
        x, y = torch.randn(6, 5), torch.randn(6, 1)
        # the last step decides late (dynamic recording): its KPIs wait for the decision
        dynamic = step == steps - 1
        if rec is not None:
            rec.start_batch(step, 6, type_of_execution=None if dynamic else "main_execution_type")
            rec.start_iteration()
            rec.register_tensor("x", x, is_input=True)
        out = net(x)
        loss = torch.nn.functional.mse_loss(out, y)
        for name, value in _kpi_values(step, loss).items():
            if rec is not None:
                rec.record_kpi_in_graph("kinds", name, value)
            number = value.item() if isinstance(value, torch.Tensor) else value
            expected.setdefault(name, []).append(float(number))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if rec is not None:
            rec.finish_iteration()
            if dynamic:
                rec.decide_recording_of_batch("main_execution_type")
            rec.finish_batch()
    if rec is not None:
        rec.finalize()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, expected


def test_kpis_of_every_kind_of_number_before_backward(tmp_path):
    recorded_params, expected = _train_with_kpis(tmp_path)
    plain_params, _ = _train_with_kpis(None)
    # Recording (and reading the loss before backward()) does not change training.
    assert recorded_params.keys() == plain_params.keys()
    for name, value in recorded_params.items():
        assert torch.equal(value, plain_params[name]), name

    kpis = open_group(tmp_path / "g").read_kpis("kpis")
    assert set(kpis["kpi_name"]) == set(expected)
    for name, values in expected.items():
        rows = kpis[kpis["kpi_name"] == name].sort_values("timepoint")
        assert rows["timepoint"].tolist() == list(range(len(values))), name
        assert rows["value"].tolist() == values, name  # float64: exact
    assert expected["np_int64"][0] == 2**40  # an int64 beyond float32's precision


def test_kpis_that_are_not_one_number_are_refused(tmp_path):
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]))
    rec.track_module("net", torch.nn.Linear(2, 2))
    rec.start_batch(0, 2)
    # float() would parse a string; comgra refuses it, and so does comgra_like
    for value in (torch.zeros(2), np.zeros(3), "1.5", np.str_("2"), b"3", None, [1.0]):
        with pytest.raises(ConfigurationError, match="record_kpi_in_graph\\('g', 'k'\\)"):
            rec.record_kpi_in_graph("g", "k", value)
    rec.record_kpi_in_graph("g", "k", np.array(2.5))  # a 0-d array is one number
    rec.record_kpi_in_graph("g", "k", np.array([[3.5]]), timepoint=1)  # as a 1x1 tensor is
    rec.finish_batch()
    rec.finalize()
    kpis = open_group(tmp_path / "g").read_kpis("t")
    assert kpis["value"].tolist() == [2.5, 3.5]


# ----- item 4: several models, one after another, in one process -----------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("keep_recorders", [False, True], ids=["recorders-dropped",
                                                              "recorders-kept"])
def test_models_trained_one_after_another_in_one_process(tmp_path, keep_recorders):
    models, steps = 4, 4
    env = {k: v for k, v in os.environ.items() if k != "COMGRA_LIKE_WRITER"}  # the default
    args = [sys.executable, str(CHILD), str(tmp_path), "compare", str(models), str(steps)]
    run = subprocess.run(args + (["--keep-recorders"] if keep_recorders else []),
                         check=False, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    reports = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["model"] for r in reports] == list(range(models))

    for r in reports:
        # The writer of each model has ended and been reaped before the next one starts.
        assert r["writer_pid"] is not None
        assert r["children"] == [], r
        assert not Path(f"/proc/{r['writer_pid']}").exists(), r
        # Nothing of the finished model stays alive: the recorder only if the script
        # keeps it, and then without the model's tensors or its shared memory.
        assert r["alive"] == (["recorder"] if keep_recorders else []), r
        assert r["shm_files"] == [] and r["mapped_segments"] == [], r
        assert r["fds"] == reports[0]["fds"], r
    # Memory does not grow with the models: each leaked model would add its parameters
    # and gradients (~8.6 MB) at least.
    params = 16 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 + 1
    assert reports[-1]["rss"] - reports[1]["rss"] < params * 4 * 2, reports

    group = open_group(tmp_path / "compare")
    assert group.skipped == []
    trials = {t.trial_id: t for t in group.list_trials()}
    assert sorted(trials) == [f"model_{i}" for i in range(models)]
    for trial_id, info in trials.items():
        assert info.status == "finished", trial_id
        trial_json = json.loads((tmp_path / "compare" / "trials" / trial_id / "trial.json")
                                .read_text())
        assert trial_json["status"] == "finished"
        assert group.list_steps(trial_id)["training_step"].tolist() == list(range(steps))
        assert group.read_kpis(trial_id)["timepoint"].tolist() == list(range(steps))
        assert [n.text for n in group.read_notes(trial_id)] == [f"Model: {trial_id}"]
        weight = group.read_tensor(trial_id, steps - 1, -1, "model.", "model.2.weight",
                                   "update", "none")
        assert weight.stats["abs_max"] > 0
