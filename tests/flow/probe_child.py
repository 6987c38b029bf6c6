"""A user's process serving probes (issue 18), run as a real process by
tests/flow/test_probe_loop.py: a small conv net trained under the ComgraRecorder records
one step with its flows, then ``comgra_like.probe.serve`` runs every edited input the
test submits (forward and backward under the recorder) until ``MAX_PROBES`` were run.

Usage: ``python probe_child.py ROOT GROUP TRIAL MAX_PROBES``
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.probe import serve
from comgra_like.record.flow import FlowChain, write_flows
from comgra_like.recorder import ComgraRecorder

INPUT_SHAPE = (1, 1, 6, 6)


def base_input() -> np.ndarray:
    """The input of the recorded step, which the GUI shows for editing."""
    return (2 * np.sin(np.arange(36, dtype=np.float32))).reshape(INPUT_SHAPE)


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"conv1": torch.nn.Conv2d(1, 2, 3, stride=2, padding=1),
                                "conv2": torch.nn.Conv2d(2, 2, 3, padding=1)})


def forward(model: torch.nn.Module, x: torch.Tensor, chain: FlowChain) -> torch.Tensor:
    """The network with its chain of nodes; returns the loss."""
    x = chain.node("input", x)
    h = chain.node("conv1", torch.tanh(model["conv1"](x)))
    out = chain.node("conv2", model["conv2"](h))
    return (out ** 2).sum() + out.sum()


def main() -> int:
    root, group, trial, max_probes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    model = build_model()
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=trial,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        prefixes_for_grouping_module_parameters_visually=["model."],
        prefixes_for_grouping_module_parameters_in_nodes=["model."],
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    step = 0

    def run(x: torch.Tensor) -> FlowChain:
        nonlocal step
        if tuple(x.shape) != INPUT_SHAPE:  # before the recorder's batch starts
            raise ValueError(f"the network takes inputs of shape {INPUT_SHAPE}, not "
                             f"{tuple(x.shape)}")
        chain = FlowChain()
        recorder.start_batch(step, 1, override__recording_is_active=True)
        recorder.start_iteration()
        x = x.float()
        recorder.register_tensor("input", x, is_input=True)
        loss = forward(model, x, chain)
        recorder.register_tensor("loss", loss, is_loss=True)
        chain.backward(loss)
        recorder.record_current_gradients("main")
        recorder.finish_iteration()
        recorder.finish_batch()
        model.zero_grad()
        step += 1
        return chain

    group_dir = Path(root) / group
    base = run(torch.from_numpy(base_input()))
    recorder.flush()
    write_flows(base.flows(0), group_dir, trial, training_step=0)
    base.release()
    served = serve(run, group=group_dir, trial_id=trial, poll_seconds=0.05,
                   max_probes=max_probes, timeout=300)
    recorder.finalize()
    print(" ".join(served))
    return 0


if __name__ == "__main__":
    sys.exit(main())
