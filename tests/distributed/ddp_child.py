"""One rank of a small data-parallel training job, recorded by ComgraRecorder.

Usage: ``python ddp_child.py ROOT RANK WORLD_SIZE PORT MODE``. MODE ``ddp``: gloo process
group on 127.0.0.1:PORT, a DistributedDataParallel model, every rank recording (the
default); ``ddp-rank0``: the same with ``ranks=[0]``; ``env``: no process group, only
RANK/WORLD_SIZE in the environment (the ranks never talk, so one can be killed while the
other goes on), printing ``step <n>`` after each recorded step; ``ddp-desync``: as ``ddp``,
but rank 1 adds 1e-3 to its replica's ``second.weight`` before step 2 (a replica that
drifts: DDP all-reduces gradients and never compares the parameters themselves).

Each rank trains on its own part of each batch of one seeded dataset (6 and 4 samples) and
saves the activations it registered, per step, as .npy files under ROOT/raw/ so that the
test computes the statistics of the concatenated batch itself.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.recorder import ComgraRecorder

STEPS = 4


def batch_sizes(world: int) -> list[int]:
    """Each rank's part of the batch: unequal (6, 4, 6, 4, ...), so that a merge must
    weight the ranks by their batch sizes."""
    return [6 - 2 * (r % 2) for r in range(world)]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(5, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x):
        hidden = torch.tanh(self.first(x))
        return self.second(hidden), hidden


def main() -> int:
    root, rank, world, port, mode = (Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                     sys.argv[4], sys.argv[5])
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    torch.set_num_threads(1)
    distributed = mode.startswith("ddp")
    if distributed:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
    torch.manual_seed(0)  # the same initial model on every rank (DDP checks it too)
    net = Net()
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    generator = torch.Generator().manual_seed(1)
    sizes = batch_sizes(world)
    total, first = sum(sizes), sum(sizes[:rank])
    data = torch.randn(STEPS * total, 5, generator=generator) * 2 + 0.5
    kwargs = {"ranks": [0]} if mode == "ddp-rank0" else {}
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1),
                         **kwargs)
    rec.track_module("net", net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for step in range(STEPS):
        batch = data[step * total + first:step * total + first + sizes[rank]]
        if mode == "ddp-desync" and rank == 1 and step == 2:
            with torch.no_grad():
                net.second.weight.add_(1e-3)
        rec.start_batch(step, sizes[rank])
        rec.start_iteration()
        rec.register_tensor("x", batch, is_input=True)
        out, hidden = model(batch)
        rec.register_tensor("hidden", hidden)
        rec.register_tensor("out", out)
        loss = out.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        rec.record_kpi_in_graph("loss", "", loss)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        opt.step()
        rec.finish_batch()
        np.save(raw / f"hidden-{rank}-{step}.npy", hidden.detach().numpy())
        np.save(raw / f"out-{rank}-{step}.npy", out.detach().numpy())
        if mode == "env":
            rec.flush()
            print(f"step {step}", flush=True)
            if rank == 1 and step == 1:
                sys.stdin.readline()  # held here until the test kills it
    rec.finalize()
    if distributed:
        dist.destroy_process_group()
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
