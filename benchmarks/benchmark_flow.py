"""What a gradient flow between two conv layers of realistic size costs (issue 18):
16x32x32 -> 32x16x16 (3x3 kernel, stride 2, padding 1), one sample.

    python benchmarks/benchmark_flow.py [--batch 1] [--repeat 3] [--all]

Prints the median seconds of: one unit's row (one backward pass), the rows that fit the
bound on a flow computed whole (``DEFAULT_MAX_ENTRIES`` entries), writing that partial
flow into a trial's ``flows/`` folder and reading one row back through the query API
(memory-mapped). All 8192 units' rows (134 M entries, 537 MB) exceed the bound; the time
for all of them is extrapolated from the bound's rows, or measured with ``--all``
(computed and dropped, not stored).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from comgra_like.query import open_group
from comgra_like.record.flow import DEFAULT_MAX_ENTRIES, FlowChain, jacobian_rows, write_flows


def build(batch: int) -> FlowChain:
    torch.manual_seed(0)
    conv1 = torch.nn.Conv2d(8, 16, 3, padding=1)
    conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
    chain = FlowChain()
    x = torch.randn(batch, 8, 32, 32)
    a = chain.node("conv1", torch.relu(conv1(x)))  # 16x32x32
    b = chain.node("conv2", torch.relu(conv2(a)))  # 32x16x16
    chain.backward((b ** 2).mean())
    return chain


CPU: list[float] = []  # CPU seconds of the last median_seconds call (median)


def median_seconds(fn, repeat: int) -> float:
    """Median wall seconds; the median CPU seconds of this process go to CPU[0] (on a
    loaded machine the CPU time is the steadier figure)."""
    times, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    CPU[:] = [statistics.median(cpu)]
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--all", action="store_true", help="also compute all 8192 rows")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    chain = build(args.batch)
    n_source, n_target = 16 * 32 * 32, 32 * 16 * 16
    bound_rows = DEFAULT_MAX_ENTRIES // n_source
    centre = [16 * 256 + 8 * 16 + 8]
    print(f"flow conv1 (16x32x32) -> conv2 (32x16x16), batch {args.batch}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"  full matrix: {n_target} x {n_source} = {n_target * n_source:,} entries "
          f"({n_target * n_source * 4 / 2**20:.0f} MB float32); bound on a whole flow: "
          f"{DEFAULT_MAX_ENTRIES:,} entries = {bound_rows} rows")
    one = median_seconds(lambda: chain.flows(0, rows={"conv2": centre}), args.repeat)
    print(f"  one unit (one backward pass, flows() incl. gradients and values): {one:.4f} s "
          f"(CPU {CPU[0]:.4f} s)")
    rows = list(range(bound_rows))
    several = median_seconds(lambda: chain.flows(0, rows={"conv2": rows}), args.repeat)
    print(f"  {bound_rows} units (the bound): {several:.3f} s "
          f"({several / bound_rows * 1e3:.2f} ms per unit; CPU {CPU[0]:.3f} s)")
    print(f"  all {n_target} units, extrapolated: {several * n_target / bound_rows:.1f} s")
    if args.all:
        a, b = chain._get("conv1").tensor, chain._get("conv2").tensor

        def every_row() -> None:
            for start in range(0, n_target, bound_rows):
                jacobian_rows(a, b, range(start, min(n_target, start + bound_rows)))

        print(f"  all {n_target} units, measured (computed, not stored): "
              f"{median_seconds(every_row, 1):.1f} s (CPU {CPU[0]:.1f} s)")
    flows = chain.flows(0, rows={"conv2": rows})
    with tempfile.TemporaryDirectory() as tmp:
        group = Path(tmp) / "g"
        (group / "trials" / "t").mkdir(parents=True)
        (group / "trials" / "t" / "trial.json").write_text(json.dumps(
            {"schema_version": 1, "trial_id": "t", "status": "finished", "created": 0}))
        write = median_seconds(lambda: write_flows(flows, group, "t"), args.repeat)
        print(f"  write the {bound_rows}-unit flow ({flows[0].flow.nbytes / 2**20:.0f} MB): "
              f"{write:.3f} s")
        g = open_group(group)
        rid = g.read_flows("t")[0].record_id

        def read_row() -> None:
            np.asarray(g.read_flow("t", rid).flow[bound_rows // 2]).sum()

        print(f"  read one unit's row back (query API, memory-mapped): "
              f"{median_seconds(read_row, args.repeat) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
