"""Recorded trials with gradient flows for the Flow page's tests (issue 18).

The conv net of tests/flow/probe_child.py (input 1x6x6 -> conv1 2x3x3 (stride 2, tanh)
-> conv2 2x3x3), recorded by the real ComgraRecorder, with its flows computed by
FlowChain and stored by write_flows: a complete chain at step 0, and at step 1 a chain
whose second pair is partial (the rows of two units of conv2 only).
"""

from __future__ import annotations

from pathlib import Path

#: The units of conv2 whose rows the partial chain has.
PARTIAL_ROWS = (0, 5)


def record(root: Path, group: str = "flows", trial: str = "conv") -> Path:
    import torch

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.record.flow import FlowChain, write_flows
    from comgra_like.recorder import ComgraRecorder
    from tests.flow.probe_child import base_input, build_model, forward

    model = build_model()
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=trial,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        prefixes_for_grouping_module_parameters_visually=["model."],
        prefixes_for_grouping_module_parameters_in_nodes=["model."],
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    group_dir = Path(root) / group
    for step in range(2):
        x = torch.from_numpy(base_input() * (1 + step))
        chain = FlowChain()
        recorder.start_batch(step, 1)
        recorder.start_iteration()
        recorder.register_tensor("input", x, is_input=True)
        loss = forward(model, x, chain)
        recorder.register_tensor("loss", loss, is_loss=True)
        chain.backward(loss)
        recorder.record_current_gradients("main")
        recorder.finish_iteration()
        recorder.finish_batch()
        rows = {"conv2": list(PARTIAL_ROWS)} if step == 1 else None
        write_flows(chain.flows(0, rows=rows), group_dir, trial, training_step=step)
        chain.release()
        model.zero_grad()
    recorder.finalize()
    return group_dir

