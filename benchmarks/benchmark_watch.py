#!/usr/bin/env python
"""Benchmark ``comgra_like.watch``: the bare loop vs watch vs torchexplorer vs TensorBoard.

Usage::

    python benchmarks/benchmark_watch.py [--torchexplorer-python PATH]
        [--tensorboard-python PATH] [--steps N] [--repeats R] [--out DIR]

Three models (``watch_workloads.py``: the recorder benchmark's MLP, a small CNN, a small
transformer), each trained with one loop in which hooks do all the watching, at
``log_freq`` 10 and 100. Contenders, each a worker process of its own interpreter:

* ``bare``: nothing attached (the A/A run: how far two bare copies differ, the noise);
* ``floor``: the unavoidable work of watching every module (a forward hook on each that
  returns at once on steps that are not logged; on a logged step, copies of every
  module's inputs, outputs, their gradients, the parameters and their gradients into
  memory allocated once; see ``watch_workloads.FloorWatch``), the lower bound;
* ``watch_none`` / ``watch``: ``comgra_like.watch(backend='none')`` (the structure only)
  and with its recording backend (``'standalone'``: a group under ``--out``);
* ``torchexplorer_none``: torchexplorer 1.1.2's ``watch(backend='none')``, which does all
  of its histogram and layout work and only skips handing the result to wandb or to its
  web app (``'standalone'`` would start a Flask server in a thread the process cannot
  stop); from the venv given by ``--torchexplorer-python``;
* ``tensorboard``: ``SummaryWriter.add_histogram`` on the same tensors (module inputs and
  outputs, per-sample gradient norms of those, parameters and their gradients), from the
  venv given by ``--tensorboard-python``.

A contender whose interpreter is not given, or which does not import, is skipped with a
printed note. Make the venvs outside the repository, e.g.::

    python3 -m venv VENV && VENV/bin/pip install torch==2.13.0 torchexplorer==1.1.2
    python3 -m venv VENV2 && VENV2/bin/pip install torch==2.13.0 tensorboard

(torchexplorer needs Debian's ``libgraphviz-dev graphviz`` to build pygraphviz.)

How it measures (as ``benchmark_recorder.py``): in each worker, a bare model and a
watched copy (same weights, same data) train in alternating chunks of 10 steps, so the
ratio of their times is measured side by side in one process. Before the timed steps,
the watched copy runs ``log_freq`` steps with the contender attached (its first logged
step, with one-off set-up such as torchexplorer's structure extraction, is reported apart
as ``first logged step``). The driver runs every (model, log_freq, contender) once per
round, reverses the order every other round, and prints medians over rounds. Torch uses
one thread (``--threads``), which leaves a core to comgra_like's writer process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT_PATH = Path(__file__).resolve()
WORKLOADS_PATH = SCRIPT_PATH.parent / "watch_workloads.py"
RESULT_MARKER = "BENCHMARK_WATCH_RESULT "
TABLE_MARKER = "ratio"  # first word of each row of the printed wall-time ratio table
CPU_MARKER = "cpu"  # and of the CPU-time one

# The order of the table's columns; "bare" is the A/A run.
CONTENDER_ORDER = ("bare", "floor", "watch_none", "watch", "torchexplorer_none", "tensorboard")
SLOW = ("torchexplorer_none", "tensorboard")
IMPORT_CHECK = {
    "watch_none": "import comgra_like; comgra_like.watch",
    "watch": "import comgra_like; comgra_like.watch",
    "torchexplorer_none": "import torchexplorer; torchexplorer.watch",
    "tensorboard": "from torch.utils.tensorboard import SummaryWriter",
}
TARGETS = {10: 1.2, 100: 1.05}  # issue 15: watch's ratio to the bare loop per log_freq
TARGET_VS_TORCHEXPLORER = 3.0  # watch's overhead at least this many times below


def _load_workloads():
    spec = importlib.util.spec_from_file_location("watch_workloads", WORKLOADS_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["watch_workloads"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------
# Worker
# --------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    script_dir = str(SCRIPT_PATH.parent)
    # Never let this folder's files shadow anything a contender imports.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != script_dir]
    import copy
    import warnings

    import torch

    # torchexplorer's full backward hooks warn on every backward of a model whose input
    # needs no gradient; printing that would be timed too.
    warnings.filterwarnings("ignore")
    W = _load_workloads()
    if args.scale != 1.0:
        W.scale_sizes(args.scale)
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(1234)
    work_a = W.build(args.model)
    work_b = copy.copy(work_a)
    work_b.model = copy.deepcopy(work_a.model)
    opt_a = torch.optim.SGD(work_a.model.parameters(), lr=work_a.lr)
    opt_b = torch.optim.SGD(work_b.model.parameters(), lr=work_b.lr)
    gen_a = torch.Generator().manual_seed(99)
    gen_b = torch.Generator().manual_seed(99)
    for _ in range(10):  # allocator and kernels, outside any contender
        W.train_step(work_a.model, opt_a, work_a, gen_a)
        W.train_step(work_b.model, opt_b, work_b, gen_b)

    f = args.log_freq
    perf = time.perf_counter
    t0 = perf()
    attached = W.attach(args.contender, work_b.model, f, str(Path(args.root) / "out"))
    attach_s = perf() - t0
    # One log_freq cycle with the contender: its first logged step carries one-off work.
    first_logged_ms = None
    for s in range(f):
        t0 = perf()
        W.train_step(work_b.model, opt_b, work_b, gen_b)
        if s == 0:
            first_logged_ms = 1000.0 * (perf() - t0)
        W.train_step(work_a.model, opt_a, work_a, gen_a)

    profiler = None
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()
    a_times: list[float] = []
    b_times: list[float] = []
    a_cpu: list[float] = []
    b_cpu: list[float] = []
    b_logged: list[bool] = []
    chunk_ratios = []
    cpu = time.process_time
    step_b = f  # the contender's step counter, logged when a multiple of log_freq
    for c, start in enumerate(range(0, args.steps, args.chunk)):
        n = min(args.chunk, args.steps - start)
        na, nb = len(a_times), len(b_times)
        for which in (("a", "b") if c % 2 == 0 else ("b", "a")):
            if which == "a":
                for _ in range(n):
                    c0, t0 = cpu(), perf()
                    W.train_step(work_a.model, opt_a, work_a, gen_a)
                    a_times.append(perf() - t0)
                    a_cpu.append(cpu() - c0)
            else:
                if profiler is not None:
                    profiler.enable()
                for _ in range(n):
                    c0, t0 = cpu(), perf()
                    W.train_step(work_b.model, opt_b, work_b, gen_b)
                    b_times.append(perf() - t0)
                    b_cpu.append(cpu() - c0)
                    b_logged.append(step_b % f == 0)
                    step_b += 1
                if profiler is not None:
                    profiler.disable()
        chunk_ratios.append(sum(b_times[nb:]) / sum(a_times[na:]))
    if profiler is not None:
        profiler.dump_stats(args.cprofile)
    counters = _counters(args.contender, attached.obj)
    t0 = perf()
    attached.close()
    close_s = perf() - t0

    def med_ms(xs: list[float]) -> float | None:
        return 1000.0 * statistics.median(xs) if xs else None

    n_logged = sum(b_logged)
    extra = None
    if args.contender != "bare" and n_logged:
        extra = 1000.0 * (sum(b_times) - sum(a_times)) / n_logged
    return {
        "contender": args.contender,
        "model": args.model,
        "log_freq": f,
        "steps": args.steps,
        "n_logged": n_logged,
        "python": sys.executable,
        "torch": torch.__version__,
        "bare_total_s": sum(a_times),
        "watched_total_s": sum(b_times),
        "ratio": sum(b_times) / sum(a_times),
        # CPU time of the training process (all its threads; comgra_like's writer is a
        # process of its own): what the contender costs the loop whatever the neighbours do
        "cpu_ratio": sum(b_cpu) / sum(a_cpu),
        "extra_cpu_ms_per_logged_step": None if extra is None
        else 1000.0 * (sum(b_cpu) - sum(a_cpu)) / n_logged,
        "chunk_median_ratio": statistics.median(chunk_ratios),
        "bare_median_ms": med_ms(a_times),
        "unlogged_median_ms": med_ms([t for t, lg in zip(b_times, b_logged) if not lg]),
        "logged_median_ms": med_ms([t for t, lg in zip(b_times, b_logged) if lg]),
        "extra_ms_per_logged_step": extra,
        "first_logged_ms": first_logged_ms,
        "attach_s": attach_s,
        "close_s": close_s,
        "counters": counters,
    }


def _counters(contender: str, handle: Any) -> dict[str, Any] | None:
    """comgra_like's counters of the run (its public attributes; see docs/PERFORMANCE.md):
    recorded steps that waited for the writer and how long, shared-memory segments and
    slots, capture plans made per capture, module graphs hashed."""
    if contender != "watch" or handle is None:
        return None
    rec = handle.recorder
    writer, capturer, watcher = rec.writer, rec.capturer, handle.watcher
    return {
        "waits": writer.waits, "waited_s": writer.waited_seconds,
        "segments": writer.segments_created, "slots": len(writer.slots.slots),
        "plans_made": capturer.plans_made, "captures": capturer.captures,
        "graphs_hashed": watcher.graphs_hashed, "steps_recorded": watcher.steps_recorded,
    }


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def _worker_env(python: str, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    if python != sys.executable:
        env.pop("PYTHONPATH", None)  # another venv: nothing of ours may shadow its packages
    # numpy's BLAS (TensorBoard's histograms) would otherwise spin threads on a busy core
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    return env


def _check_importable(python: str, contender: str, threads: int) -> str | None:
    """None if the contender's package imports under ``python``, else a short reason."""
    try:
        p = subprocess.run(
            [python, "-c", IMPORT_CHECK[contender]], check=False, capture_output=True,
            text=True, timeout=300, env=_worker_env(python, threads), cwd=tempfile.gettempdir(),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit code {p.returncode}"
    return None


def _run_worker(python: str, contender: str, model: str, log_freq: int, steps: int,
                root: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [python, str(SCRIPT_PATH), "--worker", "--contender", contender, "--model", model,
           "--log-freq", str(log_freq), "--steps", str(steps), "--root", str(root),
           "--threads", str(args.threads), "--chunk", str(args.chunk),
           "--scale", str(args.scale)]
    if args.cprofile_dir:
        cmd += ["--cprofile", str(Path(args.cprofile_dir) / f"{model}_{log_freq}_{contender}.prof")]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=False, capture_output=True, text=True,
                       env=_worker_env(python, args.threads), cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    result = None
    for line in p.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER):])
    if p.returncode != 0 or result is None:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-12:])
        raise RuntimeError(f"worker {model}/{log_freq}/{contender} failed "
                           f"(exit {p.returncode}):\n{tail}")
    result["wall_s"] = wall
    return result


def _med(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in runs]
    keys = ("bare_median_ms", "cpu_ratio", "extra_cpu_ms_per_logged_step", "unlogged_median_ms", "logged_median_ms",
            "extra_ms_per_logged_step", "first_logged_ms", "attach_s", "close_s",
            "chunk_median_ratio")
    out = {k: _med([r.get(k) for r in runs]) for k in keys}
    out.update(repeats=len(runs), steps=runs[0]["steps"], n_logged=runs[0]["n_logged"],
               ratio=_med(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
    return out


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _print_tables(summary: dict, models: list[str], freqs: list[int], notes: list[str]) -> None:
    def get(model: str, f: int | None, contender: str) -> dict | None:
        key = f"{model}/{'aa' if contender == 'bare' else f}/{contender}"
        return summary.get(key)

    cols = CONTENDER_ORDER
    for marker, key, title in (
        (TABLE_MARKER, "ratio", "Wall time per step"),
        (CPU_MARKER, "cpu_ratio", "CPU time of the training process per step"),
    ):
        print()
        print(f"{title} as a multiple of the bare loop's, same process, medians over rounds")
        print("(bare = A/A noise run; floor = the unavoidable work, the lower bound)")
        header = [marker, "model", "log_freq", "bare_ms"] + list(cols)
        rows = [header]
        for model in models:
            for f in freqs:
                aa = get(model, None, "bare")
                bare_ms = _med([(get(model, f, c) or {}).get("bare_median_ms") for c in cols[1:]]
                               + [(aa or {}).get("bare_median_ms")])
                row = [marker, model, str(f), _fmt(bare_ms, ".2f")]
                for c in cols:
                    s = get(model, f, c)
                    row.append(_fmt(None if s is None else s[key], ".3f"))
                rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            print("  ".join(x.rjust(w) if i >= 2 else x.ljust(w)
                            for i, (x, w) in enumerate(zip(r, widths))))

    print()
    print("Extra ms per logged step ((watched - bare time) / logged steps; wall / CPU), and "
          "the first logged step (with one-off set-up), ms")
    for model in models:
        for f in freqs:
            parts = []
            for c in cols[1:]:
                s = get(model, f, c)
                if s:
                    parts.append(f"{c} {_fmt(s['extra_ms_per_logged_step'], '.1f')} "
                                 f"/ cpu {_fmt(s['extra_cpu_ms_per_logged_step'], '.1f')} "
                                 f"(first {_fmt(s['first_logged_ms'], '.0f')})")
            print(f"  {model:11s} {f:4d}: " + "; ".join(parts))

    print()
    print("Targets (issue 15): watch <= x1.05 at log_freq 100, <= x1.2 at log_freq 10; its "
          "overhead at least 3x below torchexplorer's")
    for model in models:
        for f in freqs:
            w, fl, te = (get(model, f, c) for c in ("watch", "floor", "torchexplorer_none"))
            aa = get(model, None, "bare")
            parts = []
            limit = TARGETS.get(f)
            for key, label in (("ratio", "wall"), ("cpu_ratio", "cpu")):
                if w is not None and limit is not None:
                    ok = w[key] <= limit
                    parts.append(f"{label}: watch x{w[key]:.3f} <= x{limit} "
                                 f"{'MET' if ok else 'MISSED'}")
                if fl is not None:
                    parts.append(f"bound x{fl[key]:.3f}"
                                 + (" (the target is below the bound)"
                                    if limit is not None and fl[key] > limit else ""))
                if w is not None and te is not None:
                    w_over, te_over = w[key] - 1.0, te[key] - 1.0
                    if w_over <= 0:
                        parts.append("vs torchexplorer MET (no measurable overhead)")
                    else:
                        k = te_over / w_over
                        parts.append(f"torchexplorer's overhead / watch's = {k:.1f} "
                                     f"{'MET' if k >= TARGET_VS_TORCHEXPLORER else 'MISSED'}")
            if aa is not None:
                parts.append(f"A/A x{aa['ratio']:.3f} ({aa['ratio_min']:.3f}-{aa['ratio_max']:.3f})"
                             f", cpu x{aa['cpu_ratio']:.3f}")
            print(f"  {model:11s} {f:4d}: " + "; ".join(parts))
    for note in notes:
        print(note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=1000,
                    help="timed steps per worker (default 1000: 10 logged steps at log_freq 100)")
    ap.add_argument("--slow-steps", type=int, default=200,
                    help="timed steps for torchexplorer and TensorBoard, at least 5 log_freq "
                    "cycles (default 200; their logged steps take 10-1000 times a step)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; medians are taken (default 3)")
    ap.add_argument("--models", default="mlp,cnn,transformer")
    ap.add_argument("--log-freqs", default="10,100")
    ap.add_argument("--contenders", default=",".join(CONTENDER_ORDER),
                    help="comma-separated subset of " + ",".join(CONTENDER_ORDER))
    ap.add_argument("--torchexplorer-python", default=os.environ.get("TORCHEXPLORER_PYTHON"),
                    help="python of a venv with torch==2.13.0 and torchexplorer==1.1.2 "
                    "(default $TORCHEXPLORER_PYTHON)")
    ap.add_argument("--tensorboard-python", default=os.environ.get("TENSORBOARD_PYTHON"),
                    help="python of a venv with torch==2.13.0 and tensorboard "
                    "(default $TENSORBOARD_PYTHON)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--chunk", type=int, default=10, help="steps per alternating chunk")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the models' widths and batches (the smoke test's tiny runs)")
    ap.add_argument("--out", default=None,
                    help="folder for the workers' files and benchmark_watch_results.json "
                    "(default: a temporary folder, removed afterwards)")
    ap.add_argument("--cprofile-dir", default=None,
                    help="write cProfile stats of each worker's watched chunks here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--contender", default="bare", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    ap.add_argument("--log-freq", type=int, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cprofile", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads < 1 or args.steps < 1 or args.repeats < 1:
        ap.error("--threads, --steps and --repeats must be at least 1")

    if args.worker:
        args.root = args.root or tempfile.mkdtemp(prefix="bench_watch_worker_")
        print(RESULT_MARKER + json.dumps(run_worker(args)), flush=True)
        return 0

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    freqs = [int(f) for f in args.log_freqs.split(",") if f.strip()]
    wanted = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CONTENDER_ORDER))
    if unknown:
        ap.error(f"unknown contenders {unknown}: choose from {', '.join(CONTENDER_ORDER)}")
    main_python = sys.executable
    pythons: dict[str, str] = {}
    notes: list[str] = []
    for c in wanted:
        python = {"torchexplorer_none": args.torchexplorer_python,
                  "tensorboard": args.tensorboard_python}.get(c, main_python)
        if not python:
            option = "--torchexplorer-python" if c == "torchexplorer_none" else "--tensorboard-python"
            notes.append(f"skipped: {c} (no interpreter given: pass {option})")
            continue
        why = _check_importable(python, c, args.threads) if c in IMPORT_CHECK else None
        if why is not None:
            notes.append(f"skipped: {c} does not import under {python} ({why})")
            continue
        pythons[c] = python

    configs = []  # (contender, model, log_freq, steps, key)
    for model in models:
        if "bare" in pythons:
            configs.append(("bare", model, max(freqs), args.steps, f"{model}/aa/bare"))
        for f in freqs:
            for c in CONTENDER_ORDER[1:]:
                if c in pythons:
                    steps = max(args.slow_steps, 5 * f) if c in SLOW else args.steps
                    steps = max(f, steps - steps % f)  # whole log_freq cycles
                    configs.append((c, model, f, steps, f"{model}/{f}/{c}"))

    own_out = args.out is None
    out = Path(args.out or tempfile.mkdtemp(prefix="benchmark_watch_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.cprofile_dir:
        Path(args.cprofile_dir).mkdir(parents=True, exist_ok=True)
    print(f"interpreters: {json.dumps(pythons)}")
    for note in notes:
        print(note)
    runs: dict[str, list[dict]] = {}
    try:
        for rep in range(args.repeats):
            todo = configs if rep % 2 == 0 else configs[::-1]  # cancels drift
            print(f"  round {rep + 1}/{args.repeats}", flush=True)
            for contender, model, f, steps, key in todo:
                root = out / f"r{rep}_{model}_{f}_{contender}"
                shutil.rmtree(root, ignore_errors=True)
                try:
                    res = _run_worker(pythons[contender], contender, model, f, steps, root, args)
                except RuntimeError as e:
                    print(f"    ERROR {e}", flush=True)
                    notes.append(f"error: {key} failed in round {rep + 1}")
                    continue
                runs.setdefault(key, []).append(res)
                c = res.get("counters")
                print(f"    {key:32s} x{res['ratio']:.3f}  cpu x{res['cpu_ratio']:.3f}  bare "
                      f"{res['bare_median_ms']:.2f} ms  "
                      f"logged {_fmt(res['logged_median_ms'], '.1f')} ms  "
                      f"({res['wall_s']:.0f} s)"
                      + ("" if not c else
                         f"  waits {c['waits']} ({c['waited_s']:.2f} s), segments "
                         f"{c['segments']} in {c['slots']} slots, plans "
                         f"{c['plans_made']}/{c['captures']}, graphs hashed "
                         f"{c['graphs_hashed']}/{c['steps_recorded']}")
                      + f"  load {os.getloadavg()[0]:.1f}", flush=True)
                shutil.rmtree(root, ignore_errors=True)
    finally:
        summary = {k: _summarize(v) for k, v in runs.items()}
        (out / "benchmark_watch_results.json").write_text(json.dumps(
            {"command": sys.argv, "summary": summary, "runs": runs, "notes": notes}, indent=1))
        _print_tables(summary, models, freqs, notes)
        if own_out:
            shutil.rmtree(out, ignore_errors=True)
        else:
            print(f"results: {out / 'benchmark_watch_results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
