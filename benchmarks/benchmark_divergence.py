"""How long ``first_divergence`` takes on two trials of 1,000 recorded steps (issue 31:
target <= 2 s).

    python benchmarks/benchmark_divergence.py [--steps 1000] [--nodes 60] [--keep DIR]
        [--repeats 5]

Builds (once per --keep folder) three trials of the synthetic network of
``make_synthetic_group.py`` with the real recorder, every step recorded: ``same_a`` and
``same_b`` with one seed (no divergence: every row of every step is compared, the worst
case), and ``late`` with the same seed and one weight perturbed before 90 % of the
steps. Prints the median time of a fresh ``open_group`` + ``first_divergence`` for both
pairs, and the load average beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from make_synthetic_group import Chain, record_step

from comgra_like.analysis import first_divergence
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder


def build(group: Path, trial: str, steps: int, nodes: int, perturb_at: int | None) -> None:
    depth = max(1, (nodes - 4) // 3)
    torch.manual_seed(0)
    net = Chain(depth, 16)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    rec = ComgraRecorder(group.parent, group.name, trial,
                         DecisionMakerForRecordingsHardcoded(range(steps)),
                         max_num_batch_size_to_record=4,
                         calculate_svd_and_other_expensive_operations_of_parameters=False)
    rec.track_module("net", net)
    torch.manual_seed(1)
    for step in range(steps):
        if step == perturb_at:
            with torch.no_grad():
                net.layers[len(net.layers) // 2].weight[0, 0] += 1e-2
        record_step(rec, net, opt, step, 20 if step % 100 == 99 else 1, 8, 16)
    rec.finalize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--keep", type=Path, default=None,
                   help="build the trials here once and reuse them")
    a = p.parse_args()
    root = a.keep or Path(tempfile.mkdtemp(prefix="comgra_divergence_"))
    group = root / "divergence"
    late = int(a.steps * 0.9)
    for trial, perturb in (("same_a", None), ("same_b", None), ("late", late)):
        if not (group / "trials" / trial / "trial.json").exists():
            start = time.perf_counter()
            build(group, trial, a.steps, a.nodes, perturb)
            print(f"built {trial}: {time.perf_counter() - start:.1f} s", flush=True)
    for other, expect in (("same_b", None), ("late", late)):
        times = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            found = first_divergence(open_group(group), "same_a", other, tolerance=0)
            times.append(time.perf_counter() - start)
        got = None if found is None else found.step
        assert got == expect, f"{other}: expected step {expect}, got {got}"
        print(f"first_divergence same_a vs {other} ({a.steps} steps, answer step {got}): "
              f"median {statistics.median(times):.2f} s (min {min(times):.2f}, max "
              f"{max(times):.2f}; target <= 2 s); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
