"""A training process for the store-outage tests: TinyRun (tests/conftest.py) recording
every step to ROOT (an s3:// URI) without waiting for the writer, ``PAUSE`` seconds
between steps. Prints ``writer <pid>``, each finished step, and then ``finalized`` - or,
when the recorder raises, ``error <message as JSON>``; it then waits for a line on stdin
and closes the writer, printing ``closed <the writer's last word as JSON>``.

    python outage_child.py ROOT GROUP TRIAL STEPS PAUSE
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from comgra_like.errors import StorageError
from tests.conftest import TinyRun


def main() -> None:
    root, group, trial, steps, pause = sys.argv[1:6]
    run = TinyRun(root, group, trial, record_steps=range(10**6))
    print(f"writer {run.recorder.writer.pid}", flush=True)
    try:
        for step in range(int(steps)):
            run.step(step)
            print(step, flush=True)
            time.sleep(float(pause))
        run.finalize()
    except StorageError as e:
        print("error " + json.dumps(str(e)), flush=True)
        sys.stdin.readline()
        try:
            run.recorder.writer.close()
            last = None
        except StorageError as e2:
            last = str(e2)
        print("closed " + json.dumps(last), flush=True)
        return
    print("finalized", flush=True)


if __name__ == "__main__":
    main()
