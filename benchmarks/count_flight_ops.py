#!/usr/bin/env python
"""Count the operations the flight recorder dispatches per training step (issue 30).

Usage::

    python benchmarks/count_flight_ops.py [--steps N]

On a GPU the armed loop is bound by the CPU launching kernels, so the number of
operations the flight recorder adds per step is what its cost follows there. This
counts them on the CPU: ``watch(log_freq=1000)`` on the transformer of
``benchmark_watch.py``, without and with a ``FlightRecorder`` whose device path (the
0-dim reductions per tensor, the batched blocks of the parameters) is forced on the CPU,
every aten operation counted with a dispatch mode. Printed: operations per step of each,
and the flight recorder's own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def per_step(flight: bool, steps: int) -> float:
    import torch
    import watch_workloads as W
    from torch.utils._python_dispatch import TorchDispatchMode

    from comgra_like import FlightRecorder, watch

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    work = W.build("transformer")
    opt = torch.optim.SGD(work.model.parameters(), lr=work.lr)
    gen = torch.Generator().manual_seed(1)
    fr = None
    if flight:
        fr = FlightRecorder()
        fr._force_batched = True  # the device path, on the CPU
    handle = watch(work.model, log_freq=1000, verbose=False,
                   standalone_dir=tempfile.mkdtemp(prefix="comgra-ops-"), trial_id="ops",
                   flight_recorder=fr)
    for _ in range(5):
        W.train_step(work.model, opt, work, gen)
    count = Count()
    with count:
        for _ in range(steps):
            W.train_step(work.model, opt, work, gen)
    handle.unwatch()
    return count.n / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    bare, armed = per_step(False, args.steps), per_step(True, args.steps)
    print(f"aten operations per step (benchmark_watch.py's transformer): watch {bare:.0f}, "
          f"watch + flight recorder (device path) {armed:.0f}, the flight recorder's own "
          f"{armed - bare:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
