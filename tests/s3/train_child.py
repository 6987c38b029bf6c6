"""A training process for the object-storage tests: TinyRun (tests/conftest.py) recording
to the root given (an s3:// URI), every step recorded and flushed so that readers see it
soon. Prints ``writer <pid>`` and then each finished step on a line; with ``forever`` it
trains until it is killed, else it records ``steps`` steps and finalizes.

    python train_child.py ROOT GROUP TRIAL STEPS|forever
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import TinyRun


def main() -> None:
    root, group, trial, steps = sys.argv[1:5]
    forever = steps == "forever"
    run = TinyRun(root, group, trial, record_steps=range(10**6))
    print(f"writer {run.recorder._writer.pid}", flush=True)
    step = 0
    while forever or step < int(steps):
        run.step(step)
        run.recorder.flush()
        print(step, flush=True)
        step += 1
    run.finalize()
    print("finalized", flush=True)


if __name__ == "__main__":
    main()
