"""A recorded trial to store flows in: the real recorder and writer, a few steps."""

from __future__ import annotations

from pathlib import Path

import torch

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.recorder import ComgraRecorder


def record_trial(root: Path, group: str, trial_id: str, steps: int = 2) -> Path:
    """Record a tiny MLP for ``steps`` steps; returns the group folder."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    recorder = ComgraRecorder(
        comgra_root_path=str(root), group=group, trial_id=trial_id,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=2,
        prefixes_for_grouping_module_parameters_visually=["model."],
        prefixes_for_grouping_module_parameters_in_nodes=["model."],
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    for step in range(steps):
        x, y = torch.randn(2, 4), torch.randn(2, 1)
        recorder.start_batch(step, 2)
        recorder.start_iteration()
        recorder.register_tensor("input", x, is_input=True)
        recorder.register_tensor("target", y, is_target=True)
        out = model(x)
        recorder.register_tensor("output", out)
        loss = torch.nn.functional.mse_loss(out, y)
        recorder.register_tensor("loss", loss, is_loss=True)
        loss.backward()
        recorder.record_current_gradients("main")
        recorder.finish_iteration()
        recorder.finish_batch()
    recorder.finalize()
    return root / group
