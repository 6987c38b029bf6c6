"""A recorder whose first recorded step runs under torch.inference_mode() (a validation
batch before training) records the training steps after it: the shared-memory views are
made outside inference mode, so later steps may copy into them."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder


def test_training_steps_record_after_a_first_step_under_inference_mode(tmp_path):
    torch.manual_seed(0)
    net = nn.Linear(4, 2)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0, 1, 2]),
                         max_num_batch_size_to_record=2,
                         calculate_svd_and_other_expensive_operations_of_parameters=False)
    rec.track_module("net", net)
    outs = {}
    for step in range(3):
        with torch.inference_mode() if step == 0 else torch.enable_grad():
            x = torch.randn(8, 4)
            rec.start_batch(step, 8)
            rec.start_iteration()
            rec.register_tensor("x", x, is_input=True)
            out = net(x)
            rec.register_tensor("out", out)
            if step:
                loss = out.pow(2).mean()
                rec.register_tensor("loss", loss, is_loss=True)
                loss.backward()
                rec.record_current_gradients("g")
            rec.finish_iteration()
            rec.finish_batch()
            outs[step] = out.detach().clone()
    rec.finalize()
    g = open_group(tmp_path / "g")
    assert sorted(set(g.list_steps("t")["training_step"])) == [0, 1, 2]
    for step, out in outs.items():
        got = g.read_tensor("t", step, 0, "out", "out", "forward", "sample", 1).values
        np.testing.assert_array_equal(got, out[1].numpy())
