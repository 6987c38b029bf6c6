"""One rank of a small data-parallel job under ``comgra_like.watch(model, metrics=...)``.

Usage: ``python watch_child.py ROOT RANK WORLD_SIZE PORT [MODE]``. A gloo process group
on 127.0.0.1:PORT, a DistributedDataParallel model watched on every rank into its own
trial (``standalone_dir=ROOT/g``, the default trial id: every rank must agree on it),
each rank training on its own part of each batch (6 and 4 samples). MODE ``monitor``:
Taiyi's ``Monitor(model, config, path=ROOT/m)`` instead of watch, each rank writing what
its ``get_output()`` gave to ``ROOT/raw/output-<rank>.json``.

Each rank saves what it computed as .npy files under ROOT/raw/ so that the test compares
the stored rows with them: per step the first layer's output (``out-<rank>-<step>``) and
its input (``in-<rank>-<step>``), the loss (``loss-<rank>-<step>``) and its weight's
gradient after the backward pass (``wgrad-<rank>-<step>``), and the L2 norm of that
gradient per step as its armed flight recorder saw it (``flightgrad-<rank>``); each rank
also takes a note at step 1.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import comgra_like

STEPS = 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(5, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


def main() -> int:
    root, rank, world, port = (Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                               sys.argv[4])
    monitor = len(sys.argv) > 5 and sys.argv[5] == "monitor"
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    torch.manual_seed(0)
    net = Net()
    model = torch.nn.parallel.DistributedDataParallel(net)
    sizes = [6 - 2 * (r % 2) for r in range(world)]
    total, first = sum(sizes), sum(sizes[:rank])
    data = torch.randn(STEPS * total, 5, generator=torch.Generator().manual_seed(1)) * 2 + 0.5
    saved: dict[str, torch.Tensor] = {}
    net.first.register_forward_hook(
        lambda m, args, out: saved.update(input=args[0].detach(), output=out.detach()))
    flight_norms: list[float] = []

    def seen(flight_step) -> None:  # the flight recorder's view of the weight's gradient
        flight_norms.append(flight_step.stats[("model.module.first.weight", "gradient")][
            "l2_norm"])

    if monitor:
        handle = comgra_like.Monitor(model, {"first": ["InputSndNorm"]}, path=str(root / "m"))
    else:
        handle = comgra_like.watch(model, log_freq=1, bins=10, sample_n=None, verbose=False,
                                   reject_outlier_proportion=0.0,
                                   standalone_dir=str(root / "g"),
                                   metrics={"module.first": ["InputSndNorm", "OutputNorm",
                                                             "WeightGradNorm"]},
                                   flight_recorder=comgra_like.FlightRecorder(
                                       window=8, predicate=seen))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for step in range(STEPS):
        batch = data[step * total + first:step * total + first + sizes[rank]]
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if monitor:
            handle.track(step, loss=loss)
        else:
            handle.log_loss(loss)
        opt.step()
        np.save(raw / f"in-{rank}-{step}.npy", saved["input"].numpy())
        np.save(raw / f"out-{rank}-{step}.npy", saved["output"].numpy())
        np.save(raw / f"loss-{rank}-{step}.npy", loss.detach().numpy())
        # after DDP's all-reduce: the mean over the ranks, the same on both
        np.save(raw / f"wgrad-{rank}-{step}.npy", net.first.weight.grad.numpy())
        if step == 1 and not monitor:
            handle.recorder.add_note(f"rank {rank} saw loss {float(loss):.6f}")
    if monitor:
        output = handle.get_output()
        (raw / f"output-{rank}.json").write_text(json.dumps(
            {m: {q: {str(k): float(v) for k, v in steps.items()} for q, steps in qs.items()}
             for m, qs in output.items()}))
        handle.close()
    else:
        handle.unwatch()
        np.save(raw / f"flightgrad-{rank}.npy", np.asarray(flight_norms, np.float64))
    (raw / f"trial-{rank}.txt").write_text(handle.trial_id)
    dist.destroy_process_group()
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
