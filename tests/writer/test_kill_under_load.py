"""A training process killed with SIGKILL under CPU load loses no step its writer received.

The training loop records every step and prints each step once ``finish_batch()`` has
returned (the step is then in the writer's pipe). A busy process beside it takes a core,
so the writer lags behind training (steps wait in the pipe and in shared memory) and
start-up is slow, as on a loaded machine. After the kill the writer must write everything
it received and mark the trial aborted; the last step on disk is compared with the last
step the loop reached. docs/FORMAT.md ("What a kill can lose") states the bound this
checks: nothing whose ``finish_batch()`` returned.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from comgra_like.query import open_group

TRAINING_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch
    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    rec = ComgraRecorder(sys.argv[1], "g", "t", DecisionMakerForRecordingsHardcoded(range(10**7)),
                         max_num_batch_size_to_record=4)
    rec.track_module("net", net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    out = os.fdopen(1, "w", buffering=1)
    out.write(f"writer {rec.writer.pid}\\n")
    if sys.argv[2] == "fork":
        # Like a DataLoader worker: a child that inherits the writer's pipe and outlives
        # the training process, so the writer never sees its input end.
        child = os.fork()
        if child == 0:
            os.close(1)  # the test reads the loop's steps until this pipe ends
            time.sleep(120)
            os._exit(0)
        out.write(f"child {child}\\n")
    step = 0
    while True:
        x = torch.randn(16, 32)
        rec.start_batch(step, 16)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        y = net(x)
        rec.register_tensor("out", y)
        loss = y.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record_current_gradients("g")
        rec.finish_iteration()
        rec.finish_batch()
        out.write(f"{step}\\n")
        step += 1
""")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not our child: a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _status(trial_dir: Path) -> str:
    try:
        return json.loads((trial_dir / "trial.json").read_text())["status"]
    except (OSError, ValueError):  # being replaced this moment
        return ""


def _kill_once(script: Path, root: Path, delay: float, mode: str) -> dict:
    proc = subprocess.Popen([sys.executable, str(script), str(root), mode],
                            stdout=subprocess.PIPE, text=True)
    child = None
    try:
        writer = int(proc.stdout.readline().split()[1])
        if mode == "fork":
            child = int(proc.stdout.readline().split()[1])
        steps: list[int] = []
        reader = threading.Thread(target=lambda: steps.extend(int(line) for line in proc.stdout))
        reader.start()
        deadline = time.monotonic() + 120
        while not steps and time.monotonic() < deadline:
            time.sleep(0.01)
        assert steps, "the training loop reached no step"
        time.sleep(delay)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join()
    killed = time.monotonic()
    trial_dir = root / "g/trials/t"
    try:
        while _status(trial_dir) != "aborted" or _alive(writer):
            assert time.monotonic() - killed < 60, (
                f"the writer did not finish after the kill (status {_status(trial_dir)!r})")
            time.sleep(0.05)
        finished_after = time.monotonic() - killed
        # The forked child still holds the pipe: the writer noticed the death otherwise.
        child_alive = child is not None and _alive(child)
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
    g = open_group(root / "g")
    assert g.skipped == []
    [trial] = g.list_trials()
    assert trial.status == "aborted"
    on_disk = g.list_steps("t")["training_step"].tolist()
    return {"reached": steps[-1], "on_disk": on_disk, "child_alive": child_alive,
            "finished_after": finished_after,
            "reason": json.loads((trial_dir / "trial.json").read_text())["abort_reason"]}


def test_sigkill_under_cpu_load_loses_no_step_the_writer_received(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    rng = random.Random(20)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    results: list[dict] = []
    errors: list[BaseException] = []

    def run(attempt: int, mode: str, delay: float) -> None:
        try:
            results.append(_kill_once(script, tmp_path / f"run{attempt}", delay, mode))
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread below
            errors.append(e)

    try:
        # Two training processes at a time (four kills in all): more load, half the time.
        for first in (0, 2):
            threads = [threading.Thread(target=run, args=(a, m, rng.uniform(0.1, 2.0)))
                       for a, m in ((first, "plain"), (first + 1, "fork"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        busy.kill()
        busy.wait()
    if errors:
        raise errors[0]
    for r in results:
        # Every step whose finish_batch() returned is on disk, with no gap; the step
        # being sent when the kill came may be there too.
        on_disk = r["on_disk"]
        assert on_disk == list(range(len(on_disk))), "steps missing in between"
        assert r["reached"] <= on_disk[-1] <= r["reached"] + 1, r
        assert "ended without finalize()" in r["reason"]
    forked = [r for r in results if r["child_alive"]]
    assert len(forked) == 2, "a forked child should have kept the pipe open"
    print("\n".join(f"reached {r['reached']}, on disk {r['on_disk'][-1]}, writer finished "
                    f"{r['finished_after']:.1f} s after the kill" for r in results))


def test_sigterm_to_the_whole_process_group_leaves_the_writer_to_finish(tmp_path):
    """A job scheduler or `kill -- -PGID` signals training and writer together: the writer
    ignores it and writes what it got once training is gone."""
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    root = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(root), "plain"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        writer = int(proc.stdout.readline().split()[1])
        reached = int(proc.stdout.readline())
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        reached = max([reached] + [int(line) for line in proc.stdout])
        proc.wait()
    assert proc.returncode == -signal.SIGTERM
    trial_dir = root / "g/trials/t"
    deadline = time.monotonic() + 60
    while _status(trial_dir) != "aborted" or _alive(writer):
        assert time.monotonic() < deadline, f"status {_status(trial_dir)!r}"
        time.sleep(0.05)
    on_disk = open_group(root / "g").list_steps("t")["training_step"].tolist()
    assert on_disk == list(range(len(on_disk))) and reached <= on_disk[-1] <= reached + 1
