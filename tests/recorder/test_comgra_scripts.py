"""What training scripts written for comgra 0.11.5 do, run with comgra_like (issue 14):
``max_num_batch_size_to_record=0``, several models recorded one after another in one
process, and ``record_kpi_in_graph`` with every kind of number."""

from __future__ import annotations

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
