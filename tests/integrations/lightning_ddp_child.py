"""A 2-process Lightning DDP run on CPU (gloo) with ComgraCallback.

Usage: ``python lightning_ddp_child.py ROOT``. Lightning's DDP launcher starts the second
rank by running this script again (``LOCAL_RANK=1``); ``MASTER_PORT`` comes from the test.
Each rank writes ``ROOT/trial-<rank>.txt``: the trial id its callback recorded into, and
the group folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from comgra_like.integrations.lightning import ComgraCallback
from tests.integrations.lightning_models import Tiny, data, trainer


def main() -> int:
    root = Path(sys.argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    callback = ComgraCallback(log_freq=1)
    t = trainer(root, [callback], strategy="ddp", devices=2, max_steps=3,
                num_sanity_val_steps=0, limit_val_batches=1, val_check_interval=3)
    t.fit(Tiny(), data(48, 1), data(16, 2))
    handle = callback.handle
    (root / f"trial-{t.global_rank}.txt").write_text(f"{handle.trial_id}\n{handle.group_path}")
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
