"""A user's process serving row requests (issue 18), run as a real process by
tests/flow/test_row_requests.py and tests/browser/test_flow_rows.py: the conv net of
probe_child.py records one step whose flow input -> conv1 is above the bound
(``MAX_ENTRIES``: 1x6x6 -> 2x3x3 has 648 entries), so it is stored ``too_large``; then
``comgra_like.probe.serve`` answers edits and row requests with the same bound until
``MAX_PROBES`` probes and ``MAX_ROWS`` row requests were run.

Usage: ``python row_child.py ROOT GROUP TRIAL MAX_PROBES MAX_ROWS``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from probe_child import base_input, build_model, forward

from comgra_like.probe import serve
from comgra_like.record.flow import FlowChain, write_flows

#: Above conv1 -> conv2 (324 entries), below input -> conv1 (648).
MAX_ENTRIES = 400


def main() -> int:
    root, group, trial = sys.argv[1], sys.argv[2], sys.argv[3]
    max_probes, max_rows = int(sys.argv[4]) or None, int(sys.argv[5]) or None
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    model = build_model()
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=trial,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    step = 0

    def run(x: torch.Tensor) -> FlowChain:
        nonlocal step
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
        step += 1
        return chain

    group_dir = Path(root) / group
    base = run(torch.from_numpy(base_input()))
    recorder.flush()
    write_flows(base.flows(0, max_entries=MAX_ENTRIES), group_dir, trial, training_step=0)
    base.release()
    served = serve(run, group=group_dir, trial_id=trial, poll_seconds=0.05,
                   max_probes=max_probes, max_rows=max_rows, max_entries=MAX_ENTRIES,
                   timeout=300)
    recorder.finalize()
    print(" ".join(served))
    return 0


if __name__ == "__main__":
    sys.exit(main())
