"""Zero-size tensors (a (B, 0) activation, parameters of size 0) are recorded, not fatal.

docs/FORMAT.md ("Empty tensors") documents what their rows hold: the shape, numel 0,
NaN for the statistics that average or compare values, 0 for the norm and the counts,
an empty ``values`` list, null singular value and update ratio.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

EMPTY_NAN = ("mean", "abs_mean", "std", "abs_max", "min", "max")
EMPTY_ZERO = ("norm", "nan_count", "inf_count", "numel")


class WithEmptyParts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.flat = torch.nn.Parameter(torch.zeros(0))  # (0,): e.g. a bias of no units
        self.matrix = torch.nn.Parameter(torch.zeros(4, 0))  # 2-D: a singular value is asked

    def forward(self, x):
        return self.lin(x) + self.flat.sum() + self.matrix.sum()


def assert_empty(record, shape):
    assert record.shape == shape
    for name in EMPTY_NAN:
        assert math.isnan(record.stats[name]), (name, record.stats[name])
    for name in EMPTY_ZERO:
        assert record.stats[name] == 0, (name, record.stats[name])


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_zero_size_tensors_are_recorded_with_empty_statistics(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", mode)
    torch.manual_seed(0)
    net = WithEmptyParts()
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)),
                         max_num_batch_size_to_record=2,
                         calculate_svd_and_other_expensive_operations_of_parameters=True)
    assert rec.writer.mode == mode
    rec.track_module("net", net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    inputs = {}
    for step in range(3):
        x = inputs[step] = torch.randn(4, 3)
        rec.start_batch(step, 4)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        empty = x[:, :0]  # (B, 0)
        rec.register_tensor("empty", empty)
        out = net(x)
        rec.register_tensor("out", out)
        loss = out.pow(2).mean() + empty.sum()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record_current_gradients("g")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()

    g = open_group(tmp_path / "g")
    [trial] = g.list_trials()
    assert trial.status == "finished"
    assert g.list_steps("t")["training_step"].tolist() == [0, 1, 2]
    for step in range(3):
        for recording_type in ("forward", "gradient:g"):
            for aggregation, sample in (("batch_mean", -1), ("batch_abs_max", -1),
                                        ("batch_std", -1), ("sample", 0), ("sample", 1)):
                r = g.read_tensor("t", step, 0, "empty", "empty", recording_type, aggregation,
                                  sample)
                assert_empty(r, (0,))
                assert r.values.size == 0
        for name, shape in (("net.flat", (0,)), ("net.matrix", (4, 0))):
            for recording_type in ("forward", "gradient:g", "update"):
                r = g.read_tensor("t", step, -1, name, name, recording_type, "none")
                assert_empty(r, shape)
                assert math.isnan(r.stats["svd_top"])  # null: no singular value
                assert math.isnan(r.stats["update_ratio"])  # null: 0 / 0
        # The other tensors of the same steps are intact.
        x = g.read_tensor("t", step, 0, "x", "x", "forward", "sample", 1)
        np.testing.assert_array_equal(x.values, inputs[step][1].detach().numpy())
        assert x.stats["numel"] == 3
        w = g.read_tensor("t", step, -1, "net.lin.weight", "net.lin.weight", "forward", "none")
        assert w.shape == (2, 3) and w.stats["svd_top"] > 0 and w.stats["norm"] > 0
        u = g.read_tensor("t", step, -1, "net.lin.weight", "net.lin.weight", "update", "none")
        assert u.stats["update_ratio"] > 0
