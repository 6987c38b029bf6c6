"""Gradient flow walk-through (README, "Gradient flow between layers"): a small conv net
learns to tell vertical bars from horizontal ones under the ComgraRecorder; the flows of
its last step are stored, then this process serves the Flow page's edits and rows.

    python -m comgra_like.scripts.flow_walkthrough --path runs
    comgra --path runs/flow_demo          # in another terminal, then open the Flow tab

``--max-entries 100000`` stores conv1 -> conv2 (166 k entries) without its matrix, to try
the rows on demand; ``--steps``, ``--timeout`` and ``--max-probes`` / ``--max-rows``
bound the run (the test runs it that way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def bars(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` noisy 12x12 images with one bar; label 0: vertical, 1: horizontal."""
    x = rng.normal(0, 0.3, (n, 1, 12, 12)).astype(np.float32)
    y = rng.integers(0, 2, n)
    for k in range(n):
        at = rng.integers(2, 10)
        if y[k] == 0:
            x[k, 0, 2:10, at] += 1.0
        else:
            x[k, 0, at, 2:10] += 1.0
    return x, y


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch import nn

    from comgra_like import FlowChain, serve, write_flows
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", default="runs", help="comgra_root_path: the group goes below")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--max-entries", type=int, default=None,
                   help="a flow matrix's most entries (default: FlowChain's, 2**24)")
    p.add_argument("--timeout", type=float, default=None, help="stop serving after this")
    p.add_argument("--max-probes", type=int, default=None)
    p.add_argument("--max-rows", type=int, default=None)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = nn.ModuleDict({"conv1": nn.Conv2d(1, 4, 3, padding=1),             # 4x12x12
                           "conv2": nn.Conv2d(4, 8, 3, stride=2, padding=1),  # 8x6x6
                           "fc": nn.Linear(8 * 6 * 6, 2)})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    recorder = ComgraRecorder(
        comgra_root_path=args.path, group="flow_demo", trial_id="bars",
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(50),
        max_num_batch_size_to_record=4)
    recorder.track_module("model", model)

    def forward(x: torch.Tensor, y: torch.Tensor | None) -> tuple[FlowChain, torch.Tensor]:
        """The network with its chain of flow nodes; no labels (an edited input): the
        loss of the network's own answer, the gradient that would reinforce it."""
        chain = FlowChain()
        x = chain.node("input", x)
        recorder.register_tensor("input", x, is_input=True)
        h1 = chain.node("conv1", torch.tanh(model["conv1"](x)))
        recorder.register_tensor("conv1", h1)
        h2 = chain.node("conv2", torch.tanh(model["conv2"](h1)))
        recorder.register_tensor("conv2", h2)
        logits = chain.node("logits", model["fc"](h2.flatten(1)))
        recorder.register_tensor("logits", logits)
        target = logits.argmax(1).detach() if y is None else y
        loss = nn.functional.cross_entropy(logits, target)
        recorder.register_tensor("loss", loss, is_loss=True)
        chain.backward(loss)  # loss.backward(retain_graph=True): the flows need the graph
        return chain, loss

    def step(number: int, x: torch.Tensor, y: torch.Tensor | None,
             force: bool = False) -> tuple[FlowChain, torch.Tensor]:
        recorder.start_batch(number, x.shape[0], override__recording_is_active=force or None)
        recorder.start_iteration()
        chain, loss = forward(x, y)
        recorder.record_current_gradients("main")
        recorder.finish_iteration()
        recorder.finish_batch()
        return chain, loss

    for number in range(args.steps):
        x, y = bars(32, rng)
        chain, loss = step(number, torch.from_numpy(x), torch.from_numpy(y))
        optimizer.step()
        optimizer.zero_grad()
        chain.release()
    print(f"trained {args.steps} steps, last loss {loss.item():.3f}")

    group = Path(args.path) / "flow_demo"
    x, y = bars(4, rng)
    chain, _ = step(args.steps, torch.from_numpy(x), torch.from_numpy(y), force=True)
    recorder.flush()
    # the limit when one was given, else the default of FlowChain.flows and serve
    limit = {} if args.max_entries is None else {"max_entries": args.max_entries}
    write_flows(chain.flows(sample=0, **limit), group, "bars", training_step=args.steps)
    chain.release()
    print(f"flows of step {args.steps} stored; open them with: comgra --path {group}")

    served = 0

    def run(x: torch.Tensor) -> FlowChain:
        """What serve runs for an edited input or an asked row: a recorded step."""
        nonlocal served
        served += 1
        chain, _ = step(args.steps + served, x.float(), None, force=True)
        model.zero_grad()
        return chain

    print("serving the Flow page's edits and rows (Ctrl-C ends)")
    try:
        serve(run, group=group, trial_id="bars", timeout=args.timeout,
              max_probes=args.max_probes, max_rows=args.max_rows,
              recorder=recorder, **limit)
    except KeyboardInterrupt:
        pass
    recorder.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
