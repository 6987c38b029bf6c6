"""How long the findings take on a large trial (issue 17: 2,000 recorded steps x 60 nodes
in seconds).

    python benchmarks/benchmark_findings.py [--path GROUP] [--trial T] [--steps 2000]
        [--nodes 60] [--repeat 3]

Without ``--path`` it builds a synthetic group with ``make_synthetic_group.py`` (the real
recorder; every step recorded, every 100th step 20 iterations long) in a temporary
folder first, one trial. Each repetition opens the group afresh (nothing cached) and
runs every detector over the trial; it prints the seconds of each part and the total.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from comgra_like.analysis import DETECTORS, find_in_trial
from comgra_like.analysis.core import TrialData
from comgra_like.query import open_group


def measure(path: Path, trial_id: str) -> dict[str, float]:
    """Seconds of one cold scan: opening, reading the statistics, each detector."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    group = open_group(path)
    times["open"] = time.perf_counter() - start
    t = time.perf_counter()
    data = TrialData(group, trial_id)
    times["read_statistics"] = time.perf_counter() - t
    for name, detector in DETECTORS.items():
        t = time.perf_counter()
        detector(data)
        times[name] = time.perf_counter() - t
    times["total"] = time.perf_counter() - start
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", type=Path, default=None, help="an existing group (default: build one)")
    p.add_argument("--trial", default="trial_0")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if path is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from make_synthetic_group import build

            path = build(Path(tmp) / "synthetic", trials=1, steps=args.steps, nodes=args.nodes,
                         long_every=100, long_iterations=20)
        group = open_group(path)
        rows = len(group.read_statistics(args.trial, statistics=["norm"], as_pandas=False))
        steps = group.list_steps(args.trial)["training_step"].nunique()
        print(f"{path}: trial {args.trial}, {steps} recorded steps, {rows:,} tensor rows")
        runs = [measure(path, args.trial) for _ in range(args.repeat)]
        for key in runs[0]:
            values = [r[key] for r in runs]
            print(f"  {key:16} median {statistics.median(values):6.2f} s  "
                  f"(min {min(values):.2f}, max {max(values):.2f})")
        found = find_in_trial(open_group(path), args.trial)
        print(f"  {len(found)} findings: " + ", ".join(f"{f.severity} {f.kind}" for f in found))


if __name__ == "__main__":
    main()
