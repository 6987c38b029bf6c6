"""Recorded trials with gradient flows for the Flow page's tests (issue 18).

The conv net of tests/flow/conv_net.py (input 1x6x6 -> conv1 2x3x3 (stride 2, tanh)
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

    from comgra_like.record.flow import write_flows
    from tests.flow.conv_net import base_input, build_model, new_recorder, recorded_step

    model = build_model()
    recorder = new_recorder(root, group, trial, model)
    group_dir = Path(root) / group
    for step in range(2):
        chain = recorded_step(recorder, model, torch.from_numpy(base_input() * (1 + step)), step)
        rows = {"conv2": list(PARTIAL_ROWS)} if step == 1 else None
        write_flows(chain.flows(0, rows=rows), group_dir, trial, training_step=step)
        chain.release()
    recorder.finalize()
    return group_dir

