"""Build a large synthetic group with the real recorder, for GUI and query benchmarks.

    python benchmarks/make_synthetic_group.py OUT_DIR [--trials 2] [--steps 2000] [--nodes 60]
        [--long-every 100] [--long-iterations 20]

Each trial trains a small recurrent network whose graph has about ``--nodes`` nodes
(a chain of tanh layers plus their parameters); every step is recorded; every
``--long-every``-th step runs ``--long-iterations`` iterations instead of one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder


class Chain(torch.nn.Module):
    def __init__(self, depth: int, width: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))


def record_step(rec: ComgraRecorder, net: Chain, opt: torch.optim.Optimizer, step: int,
                iterations: int, batch: int, width: int) -> None:
    """One recorded training step of the synthetic network, ``iterations`` iterations long."""
    rec.start_batch(step, batch, type_of_execution=f"{iterations:02d}_iterations")
    h = torch.zeros(batch, width)
    rec.register_tensor("state_initial", h, is_initial_value=True, node_name="state",
                        role_within_node="initial")
    x = torch.randn(batch, iterations, width)
    target = torch.randn(batch, width)
    for it in range(iterations):
        rec.start_iteration()
        inp = x[:, it].clone()
        rec.register_tensor("input", inp, is_input=True)
        h = h + inp
        for i, layer in enumerate(net.layers):
            h = torch.tanh(layer(h))
            rec.register_tensor(f"hidden_{i:02d}", h)
        rec.register_tensor("state", h, node_name="state", role_within_node="state")
        if it == iterations - 1:
            rec.register_tensor("target", target, is_target=True)
            loss = ((h - target) ** 2).mean()
            rec.register_tensor("loss", loss, is_loss=True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.record_current_gradients("main")
            rec.record_kpi_in_graph("loss", "train", loss)
        rec.finish_iteration()
    rec.finish_batch()


def build(out: Path, trials: int, steps: int, nodes: int, long_every: int, long_iterations: int,
          batch: int = 8, width: int = 16) -> Path:
    depth = max(1, (nodes - 4) // 3)  # per layer: 1 calculated node + weight + bias nodes
    for t in range(trials):
        torch.manual_seed(t)
        net = Chain(depth, width)
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        rec = ComgraRecorder(out.parent, out.name, f"trial_{t}",
                             DecisionMakerForRecordingsHardcoded(range(steps)),
                             max_num_batch_size_to_record=4,
                             calculate_svd_and_other_expensive_operations_of_parameters=False)
        rec.track_module("net", net)
        start = time.perf_counter()
        for step in range(steps):
            long = long_every and step % long_every == long_every - 1
            record_step(rec, net, opt, step, long_iterations if long else 1, batch, width)
        rec.finalize()
        print(f"trial_{t}: {steps} steps in {time.perf_counter() - start:.1f} s", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the group folder to create")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--long-every", type=int, default=100)
    p.add_argument("--long-iterations", type=int, default=20)
    a = p.parse_args()
    build(a.out, a.trials, a.steps, a.nodes, a.long_every, a.long_iterations)


if __name__ == "__main__":
    main()
