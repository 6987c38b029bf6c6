"""A group of many small trials (issue 28 item 9): how soon the GUI answers, how long
the first index and the Findings page's first visit take, and the trials table.

    python benchmarks/benchmark_many_trials.py [--trials 2000] [--steps 5] [--path GROUP]
        [--port 8071] [--skip-findings]

Without ``--path`` it records one tiny trial with the real recorder
(``make_synthetic_group.py``: ``--steps`` recorded steps, a 12-node graph) and copies it
``--trials`` times into a temporary group (each copy's trial.json names its folder).
It prints, in seconds:

- ``open_group``: the whole first index in this process (``open_group``);
- ``read_trials``: the trials table right after (``Group.read_trials``), then again;
- ``server first answer``: from starting ``comgra --path GROUP --port N`` to the first
  HTTP answer of ``/`` (the server indexes in the background after 1 s);
- ``findings``: ``AppData.gather_findings`` over every trial, as the Findings page asks
  (first answer, then until every trial is scanned), and the old way, one
  ``AppData.findings`` call per trial in the callback, for comparison.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from comgra_like.query import open_group


def copy_trials(source_trial: Path, group: Path, count: int) -> Path:
    """``count`` copies of one trial folder in ``group``/trials as t00000, t00001, ...
    (trial.json's trial_id rewritten to the folder name)."""
    trials = group / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    info = json.loads((source_trial / "trial.json").read_text())
    for i in range(count):
        name = f"t{i:05d}"
        target = trials / name
        shutil.copytree(source_trial, target, ignore=shutil.ignore_patterns(".*"))
        info["trial_id"] = name
        (target / "trial.json").write_text(json.dumps(info))
    return group


def build_group(out: Path, count: int, steps: int) -> Path:
    """Record one tiny trial and copy it ``count`` times into ``out`` (the group)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_synthetic_group import build

    source = build(out.parent / "source", trials=1, steps=steps, nodes=12, long_every=0,
                   long_iterations=1)
    return copy_trials(source / "trials" / "trial_0", out, count)


def first_answer(path: Path, port: int, timeout: float = 300.0) -> float:
    """Seconds from starting ``comgra --path`` to the first HTTP answer of ``/``."""
    comgra = Path(sys.executable).with_name("comgra")
    start = time.perf_counter()
    proc = subprocess.Popen([str(comgra), "--path", str(path), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < timeout:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"no answer within {timeout} s")
    finally:
        proc.terminate()
        proc.wait(10)


def findings_times(path: Path) -> dict[str, float]:
    from comgra_like.app.data import AppData

    times = {}
    data = AppData(path)
    trials = data.trial_ids()
    start = time.perf_counter()
    found, waiting = data.gather_findings(trials, 1.0)
    times["findings first answer"] = time.perf_counter() - start
    times["findings trials in first answer"] = len(found)
    while waiting:
        found, waiting = data.gather_findings(trials, 1.0)
    times["findings all trials (background)"] = time.perf_counter() - start
    data = AppData(path)  # the old way: every trial scanned in the callback
    start = time.perf_counter()
    for trial in data.trial_ids():
        data.findings(trial)
    times["findings all trials (in the callback)"] = time.perf_counter() - start
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--path", type=Path, default=None, help="an existing group (default: build one)")
    p.add_argument("--port", type=int, default=8071)
    p.add_argument("--skip-findings", action="store_true")
    p.add_argument("--skip-server", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or build_group(Path(tmp) / "many", args.trials, args.steps)
        start = time.perf_counter()
        group = open_group(path)
        print(f"open_group: {time.perf_counter() - start:.2f} s "
              f"({len(group.list_trials())} trials)", flush=True)
        for label in ("read_trials (first)", "read_trials (again)"):
            start = time.perf_counter()
            group.read_trials()
            print(f"{label}: {time.perf_counter() - start:.2f} s", flush=True)
        if not args.skip_server:
            print(f"server first answer: {first_answer(path, args.port):.2f} s", flush=True)
        if not args.skip_findings:
            for label, value in findings_times(path).items():
                print(f"{label}: {value:.2f}" + ("" if "trials in" in label else " s"),
                      flush=True)


if __name__ == "__main__":
    main()
