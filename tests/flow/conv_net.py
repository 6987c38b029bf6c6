"""The small conv net of the flow tests (issue 18) and the user's loop that serves it.

Input 1x6x6 -> conv1 2x3x3 (stride 2, tanh) -> conv2 2x3x3, trained under the real
ComgraRecorder with a FlowChain over input, conv1 and conv2. ``serve_net`` is what the
child processes (probe_child.py, row_child.py) run: one recorded step whose flows are
stored, then ``comgra_like.probe.serve`` running every edit and row request the test
submits, each as a recorded step, until the limits are reached.

Imported by plain name from the child scripts (their folder is on sys.path) and as
``tests.flow.conv_net`` from tests, so it imports nothing of tests/ itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.probe import serve
from comgra_like.record.flow import DEFAULT_MAX_ENTRIES, FlowChain, write_flows
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


def new_recorder(root: str | Path, group: str, trial: str,
                 model: torch.nn.Module) -> ComgraRecorder:
    """A recorder that records every step (one sample of each) and tracks ``model``."""
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=trial,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        prefixes_for_grouping_module_parameters_visually=["model."],
        prefixes_for_grouping_module_parameters_in_nodes=["model."],
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    return recorder


def recorded_step(recorder: ComgraRecorder, model: torch.nn.Module, x: torch.Tensor,
                  step: int) -> FlowChain:
    """Training step ``step`` on ``x`` under the recorder, recorded whatever its decision
    maker says; returns its FlowChain, whose graph is kept for the flows."""
    chain = FlowChain()
    recorder.start_batch(step, x.shape[0], override__recording_is_active=True)
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
    return chain


def serve_net(root: str, group: str, trial: str, *, max_probes: int | None,
              max_rows: int | None = None,
              max_entries: int = DEFAULT_MAX_ENTRIES) -> list[str]:
    """Record step 0 on ``base_input()`` with its flows (a pair above ``max_entries`` is
    stored ``too_large``), then serve probes and row requests until ``max_probes`` and
    ``max_rows`` were run; returns the ids served, in order."""
    model = build_model()
    recorder = new_recorder(root, group, trial, model)
    step = 0

    def run(x: torch.Tensor) -> FlowChain:
        nonlocal step
        if tuple(x.shape[1:]) != INPUT_SHAPE[1:]:  # before the recorder's batch starts
            raise ValueError(f"the network takes inputs of shape (batch, "
                             f"{', '.join(map(str, INPUT_SHAPE[1:]))}), not {tuple(x.shape)}")
        chain = recorded_step(recorder, model, x, step)
        step += 1
        return chain

    group_dir = Path(root) / group
    base = run(torch.from_numpy(base_input()))
    recorder.flush()
    write_flows(base.flows(0, max_entries=max_entries), group_dir, trial, training_step=0)
    base.release()
    served = serve(run, group=group_dir, trial_id=trial, poll_seconds=0.05, recorder=recorder,
                   max_probes=max_probes, max_rows=max_rows, max_entries=max_entries,
                   timeout=300)
    recorder.finalize()
    return served
