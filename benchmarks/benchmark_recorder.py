#!/usr/bin/env python
"""Benchmark the recorder: a bare training loop vs comgra_like vs comgra 0.11.5.

Usage::

    python benchmarks/benchmark_recorder.py [--steps N] [--comgra-python PATH] [--out DIR]

One workload, defined once below (``WORKLOAD``): an MLP of width 256 with 4 Linear
layers and ReLU in between, batch 64, MSE loss, SGD; 11 tensors registered per step
(input, target, pre- and post-activation of every hidden layer, output, error, loss) plus
the 8 parameters tracked with ``track_module`` = 19 recorded tensors, gradients stored
with ``record_current_gradients``, ``max_num_batch_size_to_record=5``, fixed seeds,
``torch.set_num_threads(1)`` (``--threads N`` for a loop that uses N cores).

How it measures (these machines are shared and noisy):

* Every measurement runs in a fresh *worker* process (this same file with ``--worker``),
  so comgra 0.11.5 can run in its own venv with exactly the same workload code.
* Inside a worker, a bare model and a recorded model (identical copies, identical data)
  train in alternating chunks of 10 steps, so "bare" and "with recorder" are measured side
  by side in the same process, seconds apart. The ratio of the two is the overhead.
* Recording every step, a recorded chunk ends when comgra_like's writer process has
  taken in its steps (``drain()``): the writer is the bottleneck there, and its backlog
  must not be worked off during the next bare chunk, at the bare loop's expense.
* The orchestrator alternates workers (comgra_like, comgra, and a bare-vs-bare "A/A" run
  that shows the noise floor) over several repeats and prints medians.

A lower bound runs the same way: ``_FloorRecorder`` does only the torch work that
recording this information needs wherever statistics are computed (input made to require a
gradient, gradients retained, parameters/gradients/tensors copied once each), with no
statistics, writer or bookkeeping. How far comgra_like is above it shows what is left to
gain; how far it is above the bare loop shows what no recorder of these tensors can avoid.

Each recorder runs with ``DecisionMakerForRecordingsHardcoded`` recording (i) one step in
10 and (ii) every step. Reported: bare ms/step, overhead ratios, extra ms per recorded
step, finalize time, bytes on disk per recorded step, and comgra/comgra_like ratios.

comgra 0.11.5 must live in a separate venv (it ships top-level ``scripts``/``assets``
packages); it is found via ``--comgra-python``, ``$COMGRA_PYTHON`` or
``.venv-comgra/bin/python`` in the repository (ignored by git), made with
``python3 -m venv .venv-comgra && .venv-comgra/bin/pip install torch==2.13.0 comgra==0.11.5``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT_PATH = Path(__file__).resolve()
REPO_ROOT = SCRIPT_PATH.parent.parent
RESULT_MARKER = "BENCHMARK_WORKER_RESULT "
DEFAULT_COMGRA_PYTHON = str(REPO_ROOT / ".venv-comgra" / "bin" / "python")

# --------------------------------------------------------------------------------------
# The workload (used identically by every worker, whatever the interpreter)
# --------------------------------------------------------------------------------------

WORKLOAD = {
    "width": 256,
    "n_linear_layers": 4,
    "batch_size": 64,
    "input_size": 256,
    "lr": 1e-3,
    "max_num_batch_size_to_record": 5,
    "seed": 1234,
    "record_one_in": 10,
    "chunk": 10,  # bare and recorded steps alternate in chunks of this many steps
    "warmup_steps": 10,
    "torch_threads": 1,  # --threads: 1 leaves a core to the writer; 2 uses every core here
}

MODES = ("1in10", "every")


def _build_model(torch):
    nn = torch.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            w = WORKLOAD["width"]
            sizes = [WORKLOAD["input_size"]] + [w] * WORKLOAD["n_linear_layers"]
            self.layers = nn.ModuleList(
                nn.Linear(sizes[i], sizes[i + 1]) for i in range(WORKLOAD["n_linear_layers"])
            )

    return MLP()


def _train_step(torch, model, opt, gen, step, rec):
    """One training step. ``rec`` is None for the bare loop."""
    bs, d_in = WORKLOAD["batch_size"], WORKLOAD["input_size"]
    opt.zero_grad(set_to_none=True)
    x = torch.randn(bs, d_in, generator=gen)
    y = torch.randn(bs, WORKLOAD["width"], generator=gen)
    if rec is not None:
        rec.start_batch(step, bs)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        rec.register_tensor("target", y, is_target=True)
    h = x
    n = len(model.layers)
    for i, layer in enumerate(model.layers):
        pre = layer(h)
        if i < n - 1:
            if rec is not None:
                rec.register_tensor(f"layer{i + 1}_pre", pre)
            h = torch.relu(pre)
            if rec is not None:
                rec.register_tensor(f"layer{i + 1}_post", h)
        else:
            h = pre
            if rec is not None:
                rec.register_tensor("output", h)
    error = h - y
    if rec is not None:
        rec.register_tensor("error", error)
    loss = (error * error).mean()  # MSE
    if rec is not None:
        rec.register_tensor("loss", loss, is_loss=True)
    loss.backward()
    # The order of comgra 0.11.5's own minimal_example.py: step, then record the gradients
    # (still on .grad), then finish. Parameters were captured at start_batch (pre-update).
    opt.step()
    if rec is not None:
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        rec.finish_batch()
    return loss


class _FloorRecorder:
    """The least any recorder of this information must do on the training thread.

    It records nothing: it only does the torch work that recording the same tensors
    needs wherever the statistics are computed later. It makes registered leaves (the
    input) require a gradient, which the dependency graph needs (comgra 0.11.5 does the
    same) and which makes backward compute the input's gradient; it retains the
    gradients of registered tensors; and on a recorded step it copies what a recorder
    must copy before training goes on (parameters before and after the optimizer step,
    all gradients, the registered tensors) into preallocated memory with one
    ``_foreach_copy_`` per call. No statistics, no writer, no names, no graph, no error
    checks. Its overhead is a lower bound for comgra_like's, measured the same way.
    """

    def __init__(self, torch, recorded_steps):
        self.torch = torch
        self.recorded = recorded_steps
        self.params = []
        self.on = False
        self.regs = []
        self.buf = torch.empty(0)
        self.off = 0
        self.plans = {}

    def track_module(self, _name, module):
        self.params = list(module.parameters())

    def _copy(self, tensors):
        # Destinations are planned once per call site and shapes, as comgra_like does.
        torch = self.torch
        key = (self.off, tuple(t.shape for t in tensors))
        dst = self.plans.get(key)
        if dst is None:
            need = self.off + sum(t.numel() for t in tensors)
            if need > self.buf.numel():  # only on the first recorded step
                grown = torch.empty(2 * need)
                grown[:self.off] = self.buf[:self.off]
                self.buf = grown
                self.plans.clear()
            dst, off = [], self.off
            for t in tensors:
                dst.append(self.buf[off:off + t.numel()].view(t.shape))
                off += t.numel()
            self.plans[key] = dst
        self.off += sum(d.numel() for d in dst)
        with torch.no_grad():
            torch._foreach_copy_(dst, tensors)

    def start_batch(self, step, _batch_size, *_args, **_kwargs):
        self.on = step in self.recorded
        if self.on:
            self.regs = []
            self.off = 0
            self._copy(self.params)

    def start_iteration(self):
        pass

    def register_tensor(self, _name, tensor, *_args, **_kwargs):
        if not self.on:
            return
        if not tensor.requires_grad:
            tensor.requires_grad_(True)
        if tensor.grad_fn is not None:
            tensor.retain_grad()
        self.regs.append(tensor)

    def record_current_gradients(self, _name, *_args):
        if self.on:
            self._copy([t.grad for t in self.regs + self.params if t.grad is not None])

    def finish_iteration(self):
        pass

    def finish_batch(self):
        if self.on:
            self._copy(self.regs + self.params)
            self.regs = []

    def finalize(self):
        pass


def _dir_stats(path: Path):
    total, files = 0, 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
                files += 1
            except OSError:
                pass
    return total, files


def _peak_rss_mb(children: bool = False):
    """Peak RSS of this process, or of its largest finished child (comgra_like's writer)."""
    try:
        import resource

        who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
        return resource.getrusage(who).ru_maxrss / 1024.0
    except ImportError:  # pragma: no cover - non-Unix
        return None


def _process_cpu_s(pid):
    """CPU seconds (user + system) a process has used so far, from /proc (Linux only)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_worker(args) -> dict:
    impl, mode, steps = args.impl, args.mode, args.steps
    script_dir = str(SCRIPT_PATH.parent)
    # Never let this folder's files shadow anything the recorder imports.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != script_dir]
    import torch

    torch.set_num_threads(WORKLOAD["torch_threads"])
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(WORKLOAD["seed"])

    recorder_cls = dm_cls = None
    if impl == "comgra":
        from comgra.objects import DecisionMakerForRecordingsHardcoded as dm_cls
        from comgra.recorder import ComgraRecorder as recorder_cls
    elif impl == "comgra_like":
        from comgra_like.objects import DecisionMakerForRecordingsHardcoded as dm_cls
        from comgra_like.recorder import ComgraRecorder as recorder_cls
    elif impl not in ("none", "floor"):
        raise SystemExit(f"unknown --impl {impl!r}")

    import copy

    model_a = _build_model(torch)
    model_b = copy.deepcopy(model_a)
    opt_a = torch.optim.SGD(model_a.parameters(), lr=WORKLOAD["lr"])
    opt_b = torch.optim.SGD(model_b.parameters(), lr=WORKLOAD["lr"])
    gen_a = torch.Generator().manual_seed(WORKLOAD["seed"] + 1)
    gen_b = torch.Generator().manual_seed(WORKLOAD["seed"] + 1)

    # Warm up both models (allocator, kernels) outside any recorder.
    for s in range(WORKLOAD["warmup_steps"]):
        _train_step(torch, model_a, opt_a, gen_a, -1, None)
        _train_step(torch, model_b, opt_b, gen_b, -1, None)

    if mode == "every":
        recorded_steps = set(range(steps))
    else:
        recorded_steps = {s for s in range(steps) if s % WORKLOAD["record_one_in"] == 0}

    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    group = "bench"
    trial_id = f"{impl}_{mode}"
    rec = None
    t_construct = 0.0
    if recorder_cls is not None:
        t0 = time.perf_counter()
        rec = recorder_cls(
            comgra_root_path=str(root),
            group=group,
            trial_id=trial_id,
            decision_maker_for_recordings=dm_cls(recorded_steps),
            max_num_batch_size_to_record=WORKLOAD["max_num_batch_size_to_record"],
        )
        rec.track_module("mlp", model_b)
        t_construct = time.perf_counter() - t0
    elif impl == "floor":
        rec = _FloorRecorder(torch, recorded_steps)
        rec.track_module("mlp", model_b)

    profiler = None
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()

    writer_pid = getattr(getattr(rec, "writer", None), "pid", None)
    # Recording every step, the writer is the bottleneck: without waiting for it at the
    # end of each recorded chunk, its backlog would be worked off during the next bare
    # chunk and charged to the bare loop (measured 2026-11-23: x1.8-2.3 that way, while
    # runs that recorded every one of 300-400 steps took x3.7-4.6 the bare time).
    drain = getattr(rec, "drain", None) if mode == "every" else None
    writer_cpu0 = _process_cpu_s(writer_pid)
    chunk = WORKLOAD["chunk"]
    a_times, b_times, b_recorded = [], [], []
    chunk_ratios = []  # rec chunk time / adjacent bare chunk time
    perf = time.perf_counter
    for c, start in enumerate(range(0, steps, chunk)):
        block = range(start, min(start + chunk, steps))
        order = ("a", "b") if c % 2 == 0 else ("b", "a")
        na, nb = len(a_times), len(b_times)
        for which in order:
            if which == "a":
                for s in block:
                    t0 = perf()
                    _train_step(torch, model_a, opt_a, gen_a, s, None)
                    a_times.append(perf() - t0)
            else:
                if profiler is not None:
                    profiler.enable()
                for s in block:
                    t0 = perf()
                    _train_step(torch, model_b, opt_b, gen_b, s, rec)
                    if drain is not None and s == block[-1]:
                        drain()  # this chunk's steps are the writer's work of this chunk
                    b_times.append(perf() - t0)
                    b_recorded.append(rec is not None and s in recorded_steps)
                if profiler is not None:
                    profiler.disable()
        chunk_ratios.append(sum(b_times[nb:]) / sum(a_times[na:]))

    writer_cpu = None
    if writer_cpu0 is not None:
        rec.flush()  # the loop's recorded steps are all processed
        writer_cpu1 = _process_cpu_s(writer_pid)
        if writer_cpu1 is not None:
            writer_cpu = writer_cpu1 - writer_cpu0
    t_finalize = 0.0
    if rec is not None:
        if profiler is not None:
            profiler.enable()
        t0 = perf()
        rec.finalize()
        t_finalize = perf() - t0
        if profiler is not None:
            profiler.disable()
    if profiler is not None:
        profiler.dump_stats(args.cprofile)

    n_rec = sum(b_recorded)
    group_bytes, group_files = _dir_stats(root / group)
    trial_bytes, trial_files = _dir_stats(root / group / "trials" / trial_id)

    def med_ms(xs):
        return 1000.0 * statistics.median(xs) if xs else None

    res = {
        "impl": impl,
        "mode": mode,
        "steps": steps,
        "n_recorded": n_rec,
        "python": sys.executable,
        "torch": torch.__version__,
        "bare_total_s": sum(a_times),
        "rec_total_s": sum(b_times),
        "bare_ms_per_step": 1000.0 * sum(a_times) / len(a_times),
        "rec_ms_per_step": 1000.0 * sum(b_times) / len(b_times),
        "chunk_median_ratio": statistics.median(chunk_ratios),
        "bare_median_ms": med_ms(a_times),
        "rec_median_ms_unrecorded_steps": med_ms([t for t, r in zip(b_times, b_recorded) if not r]),
        "rec_median_ms_recorded_steps": med_ms([t for t, r in zip(b_times, b_recorded) if r]),
        "construct_s": t_construct,
        "finalize_s": t_finalize,
        "group_bytes": group_bytes,
        "group_files": group_files,
        "trial_bytes": trial_bytes,
        "trial_files": trial_files,
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_children_mb": _peak_rss_mb(children=True),
        "writer_cpu_ms_per_rec": None if writer_cpu is None or not n_rec
        else 1000.0 * writer_cpu / n_rec,
    }
    return res


# --------------------------------------------------------------------------------------
# Orchestrator
# --------------------------------------------------------------------------------------


def _worker_env(impl: str) -> dict[str, str]:
    """The environment of a worker: comgra_like is the installed package (or whatever
    PYTHONPATH puts first, e.g. another checkout to compare with); comgra 0.11.5 runs in
    its own venv, which our PYTHONPATH must not reach."""
    env = dict(os.environ)
    if impl == "comgra":
        env.pop("PYTHONPATH", None)
    return env


def _check_importable(python: str, impl: str) -> str | None:
    """None if ``impl`` imports under ``python``, else a short reason."""
    if impl == "comgra":
        code = "import comgra.recorder, comgra.objects"
    else:
        code = (
            "import comgra_like.recorder, comgra_like.objects; comgra_like.recorder.ComgraRecorder"
        )
    env = _worker_env(impl)
    try:
        p = subprocess.run(
            [python, "-c", code],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tempfile.gettempdir(),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit code {p.returncode}"
    return None


def _run_worker_proc(python, impl, mode, steps, root, cprofile=None, verbose=False, width=256,
                     threads=1):
    cmd = [
        python,
        str(SCRIPT_PATH),
        "--worker",
        "--impl",
        impl,
        "--mode",
        mode,
        "--steps",
        str(steps),
        "--root",
        str(root),
        "--width",
        str(width),
        "--threads",
        str(threads),
    ]
    if cprofile:
        cmd += ["--cprofile", str(cprofile)]
    env = _worker_env(impl)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    t0 = time.perf_counter()
    p = subprocess.run(
        cmd, check=False, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    )
    wall = time.perf_counter() - t0
    result = None
    for line in p.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
    if p.returncode != 0 or result is None:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"worker {impl}/{mode} failed (exit {p.returncode}):\n{tail}")
    result["worker_wall_s"] = wall
    if verbose:
        print(
            f"    {impl:11s} {mode:5s} steps={steps:<5d} bare={result['bare_ms_per_step']:.2f} ms "
            f"rec={result['rec_ms_per_step']:.2f} ms  finalize={result['finalize_s']:.2f} s  "
            f"disk={result['group_bytes'] / 1e6:.2f} MB  ({wall:.0f} s wall)",
            flush=True,
        )
    return result


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _summarize(runs):
    """Medians over repeats of one (impl, mode)."""
    if not runs:
        return None
    out = {"repeats": len(runs), "steps": runs[0]["steps"], "n_recorded": runs[0]["n_recorded"]}
    out["bare_ms"] = _med([r["bare_ms_per_step"] for r in runs])
    out["rec_ms"] = _med([r["rec_ms_per_step"] for r in runs])
    ratios = [r["rec_ms_per_step"] / r["bare_ms_per_step"] for r in runs]
    out["ratio"] = _med(ratios)
    out["ratio_min"], out["ratio_max"] = min(ratios), max(ratios)
    out["chunk_median_ratio"] = _med([r.get("chunk_median_ratio") for r in runs])
    n = runs[0]["n_recorded"]
    if n:
        out["extra_ms_per_rec"] = _med(
            [1000.0 * (r["rec_total_s"] - r["bare_total_s"]) / r["n_recorded"] for r in runs]
        )
        out["extra_ms_per_rec_incl_finalize"] = _med(
            [
                1000.0 * (r["rec_total_s"] - r["bare_total_s"] + r["finalize_s"]) / r["n_recorded"]
                for r in runs
            ]
        )
        out["median_recorded_step_ms"] = _med([r["rec_median_ms_recorded_steps"] for r in runs])
        out["median_unrecorded_step_ms"] = _med([r["rec_median_ms_unrecorded_steps"] for r in runs])
        out["bytes_per_rec"] = _med([r["group_bytes"] / r["n_recorded"] for r in runs])
        out["trial_bytes_per_rec"] = _med([r["trial_bytes"] / r["n_recorded"] for r in runs])
    out["finalize_s"] = _med([r["finalize_s"] for r in runs])
    out["construct_s"] = _med([r["construct_s"] for r in runs])
    out["files"] = _med([r["group_files"] for r in runs])
    out["group_bytes"] = _med([r["group_bytes"] for r in runs])
    out["peak_rss_mb"] = _med([r["peak_rss_mb"] for r in runs])
    out["peak_rss_children_mb"] = _med([r.get("peak_rss_children_mb") for r in runs])
    out["writer_cpu_ms_per_rec"] = _med([r.get("writer_cpu_ms_per_rec") for r in runs])
    return out


def _fmt(v, spec):
    if v is None:
        return "-"
    return format(v, spec)


def _print_table(summary, skipped):
    like, cg = summary.get("comgra_like", {}), summary.get("comgra", {})
    aa = summary.get("none", {}).get("aa")

    def g(d, mode, key):
        s = d.get(mode)
        return None if s is None else s.get(key)

    def ratio(a, b):
        return None if a is None or b in (None, 0) else a / b

    rows = []  # (label, like, comgra, comgra/like, target/check)

    def row(label, lv, cv, spec, target=None, show_ratio=True):
        rows.append(
            (
                label,
                _fmt(lv, spec),
                _fmt(cv, spec),
                _fmt(ratio(cv, lv), ".1f") + "x" if show_ratio and ratio(cv, lv) else "",
                target or "",
            )
        )

    def check(ok):
        return "" if ok is None else ("PASS" if ok else "MISS")

    row(
        "bare loop, ms/step (same process)",
        g(like, "1in10", "bare_ms"),
        g(cg, "1in10", "bare_ms"),
        ".2f",
        show_ratio=False,
    )
    r = g(like, "1in10", "ratio")
    row("1-in-10: ms/step", g(like, "1in10", "rec_ms"), g(cg, "1in10", "rec_ms"), ".2f")
    row(
        "1-in-10: overhead x bare",
        r,
        g(cg, "1in10", "ratio"),
        ".3f",
        f"<= 1.05  {check(None if r is None else r <= 1.05)}",
    )
    r = g(like, "every", "ratio")
    row(
        "1-in-10: median over 10-step chunk pairs",
        g(like, "1in10", "chunk_median_ratio"),
        g(cg, "1in10", "chunk_median_ratio"),
        ".3f",
    )
    row("every step: ms/step", g(like, "every", "rec_ms"), g(cg, "every", "rec_ms"), ".2f")
    row(
        "every step: overhead x bare",
        r,
        g(cg, "every", "ratio"),
        ".2f",
        f"<= 3     {check(None if r is None else r <= 3)}",
    )
    le, ce = g(like, "every", "extra_ms_per_rec"), g(cg, "every", "extra_ms_per_rec")
    row(
        "extra ms per recorded step (every)",
        le,
        ce,
        ".2f",
        f">= 50x   {check(None if ratio(ce, le) is None else ratio(ce, le) >= 50)}",
    )
    row(
        "extra ms per recorded step (1-in-10)",
        g(like, "1in10", "extra_ms_per_rec"),
        g(cg, "1in10", "extra_ms_per_rec"),
        ".2f",
    )
    row(
        "  same, incl. finalize (every)",
        g(like, "every", "extra_ms_per_rec_incl_finalize"),
        g(cg, "every", "extra_ms_per_rec_incl_finalize"),
        ".2f",
    )
    row(
        "median recorded step, ms (every)",
        g(like, "every", "median_recorded_step_ms"),
        g(cg, "every", "median_recorded_step_ms"),
        ".2f",
    )
    row(
        "median unrecorded step, ms (1-in-10)",
        g(like, "1in10", "median_unrecorded_step_ms"),
        g(cg, "1in10", "median_unrecorded_step_ms"),
        ".2f",
    )
    row("finalize, s (every)", g(like, "every", "finalize_s"), g(cg, "every", "finalize_s"), ".3f")
    row(
        "finalize, s (1-in-10)", g(like, "1in10", "finalize_s"), g(cg, "1in10", "finalize_s"), ".3f"
    )
    row(
        "recorder construction, s",
        g(like, "every", "construct_s"),
        g(cg, "every", "construct_s"),
        ".3f",
    )
    lb, cb = g(like, "every", "bytes_per_rec"), g(cg, "every", "bytes_per_rec")
    kb = lambda v: None if v is None else v / 1000.0
    row(
        "KB on disk per recorded step (every)",
        kb(lb),
        kb(cb),
        ".1f",
        f">= 4x    {check(None if ratio(cb, lb) is None else ratio(cb, lb) >= 4)}",
    )
    row(
        "KB on disk per recorded step (1-in-10)",
        kb(g(like, "1in10", "bytes_per_rec")),
        kb(g(cg, "1in10", "bytes_per_rec")),
        ".1f",
    )
    row("files on disk (every)", g(like, "every", "files"), g(cg, "every", "files"), ".0f")
    row(
        "peak RSS of training process, MB (every)",
        g(like, "every", "peak_rss_mb"),
        g(cg, "every", "peak_rss_mb"),
        ".0f",
    )
    row(
        "peak RSS of writer process, MB (every)",
        g(like, "every", "peak_rss_children_mb"),
        None,
        ".0f",
        show_ratio=False,
    )
    row(
        "writer process CPU, ms per recorded step (1-in-10)",
        g(like, "1in10", "writer_cpu_ms_per_rec"),
        None,
        ".2f",
        show_ratio=False,
    )
    row("steps per run: 1-in-10 / every", None, None, "", show_ratio=False)
    rows[-1] = (
        rows[-1][0],
        f"{g(like, '1in10', 'steps') or '-'} / {g(like, 'every', 'steps') or '-'}",
        f"{g(cg, '1in10', 'steps') or '-'} / {g(cg, 'every', 'steps') or '-'}",
        "",
        "",
    )
    row(
        "repeats (medians over)",
        g(like, "1in10", "repeats"),
        g(cg, "1in10", "repeats"),
        "d",
        show_ratio=False,
    )

    header = ("metric", "comgra_like", "comgra 0.11.5", "comgra/like", "target (comgra_like)")
    widths = [max(len(str(x[i])) for x in rows + [header]) for i in range(5)]
    line = "  ".join("-" * w for w in widths)
    print()
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print(line)
    for rr in rows:
        print(
            "  ".join(
                [str(rr[0]).ljust(widths[0])]
                + [str(x).rjust(w) for x, w in zip(rr[1:4], widths[1:4])]
                + [str(rr[4]).ljust(widths[4])]
            )
        )
    print(line)
    if aa:
        print(
            f"noise floor (bare vs bare, A/A): ratio median {aa['ratio']:.3f} "
            f"(min {aa['ratio_min']:.3f}, max {aa['ratio_max']:.3f}) over {aa['repeats']} runs; "
            f"chunk-pair median {aa['chunk_median_ratio']:.3f}; bare {aa['bare_ms']:.2f} ms/step"
        )
    floor = summary.get("floor", {})
    if floor:
        parts = []
        for mode in MODES:
            f, lk = floor.get(mode), like.get(mode)
            if f:
                part = (f"{mode} x{f['ratio']:.3f} (+{f['extra_ms_per_rec']:.2f} ms per recorded "
                        "step")
                if lk and lk.get("extra_ms_per_rec"):
                    part += f"; comgra_like's extra is {lk['extra_ms_per_rec'] / f['extra_ms_per_rec']:.1f}x that"
                parts.append(part + ")")
        print("lower bound (a recorder doing only the unavoidable gradient work and copies, "
              "_FloorRecorder): " + ", ".join(parts))
    for impl in ("floor", "comgra_like", "comgra"):
        for mode in MODES:
            s = summary.get(impl, {}).get(mode)
            if s:
                print(
                    f"{impl}/{mode}: overhead ratio over repeats min {s['ratio_min']:.3f} "
                    f"max {s['ratio_max']:.3f}"
                )
    for msg in skipped:
        print(msg)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=2000,
        help="steps per run for the bare A/A run, the lower bound and comgra_like at 1-in-10 "
        "(default 2000: shorter runs vary by several per cent on a shared machine)",
    )
    ap.add_argument(
        "--every-steps",
        type=int,
        default=200,
        help="steps per comgra_like run recording every step (default 200)",
    )
    ap.add_argument(
        "--comgra-steps",
        type=int,
        default=100,
        help="steps per comgra 0.11.5 run at 1-in-10 (default 100)",
    )
    ap.add_argument(
        "--comgra-every-steps",
        type=int,
        default=20,
        help="steps per comgra 0.11.5 run recording every step (default 20)",
    )
    ap.add_argument("--repeats", type=int, default=5, help="repeats, medians are taken (default 5)")
    ap.add_argument(
        "--comgra-repeats",
        type=int,
        default=3,
        help="repeats for the slow comgra 0.11.5 runs (default 3)",
    )
    ap.add_argument(
        "--comgra-python",
        default=None,
        help="python of a venv with comgra 0.11.5 (default: $COMGRA_PYTHON or "
        f"{DEFAULT_COMGRA_PYTHON} if it exists)",
    )
    ap.add_argument(
        "--impls", default="comgra_like,comgra", help="comma-separated subset of comgra_like,comgra"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="folder for recordings and benchmark_results.json (default: a temp "
        "folder, removed afterwards)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the recorded trials in --out")
    ap.add_argument("--no-aa", action="store_true", help="skip the bare-vs-bare noise run")
    ap.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the lower-bound run (a recorder doing only the unavoidable copies and "
        "gradient work, see _FloorRecorder)",
    )
    ap.add_argument(
        "--width",
        type=int,
        default=WORKLOAD["width"],
        help="width (and input size) of the MLP (default 256, the issue's workload; a wider "
        "one shows how the overhead scales with the step time)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=WORKLOAD["torch_threads"],
        help="torch threads of the training loop (default 1, which leaves the writer a core; "
        "os.cpu_count() measures a loop that uses every core, as torch does by default)",
    )
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--impl", choices=("none", "floor", "comgra", "comgra_like"), default="none",
        help=argparse.SUPPRESS
    )
    ap.add_argument("--mode", choices=MODES + ("aa",), default="1in10", help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--cprofile",
        default=None,
        help="worker mode: write cProfile stats of the recorded chunks here",
    )
    args = ap.parse_args(argv)
    WORKLOAD["width"] = WORKLOAD["input_size"] = args.width
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    WORKLOAD["torch_threads"] = args.threads

    if args.worker:
        if args.root is None:
            args.root = tempfile.mkdtemp(prefix="bench_worker_")
        res = run_worker(args)
        print(RESULT_MARKER + json.dumps(res), flush=True)
        return 0

    own_out = args.out is None
    out = Path(args.out or tempfile.mkdtemp(prefix="benchmark_recorder_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    main_python = sys.executable
    wanted = [s.strip() for s in args.impls.split(",") if s.strip()]
    skipped = []

    pythons = {}
    if "comgra_like" in wanted:
        why = _check_importable(main_python, "comgra_like")
        if why is None:
            pythons["comgra_like"] = main_python
        else:
            skipped.append(f"skipped: comgra_like recorder not importable ({why})")
    if "comgra" in wanted:
        cp = args.comgra_python or os.environ.get("COMGRA_PYTHON")
        if not cp and os.path.exists(DEFAULT_COMGRA_PYTHON):
            cp = DEFAULT_COMGRA_PYTHON
        why = "no interpreter given" if not cp else _check_importable(cp, "comgra")
        if why is None:
            pythons["comgra"] = cp
        else:
            skipped.append(f"skipped: comgra not installed, pass --comgra-python ({why})")

    configs = []  # (impl, mode, steps, python, repeats)
    if not args.no_aa:
        configs.append(("none", "aa", args.steps, main_python, args.repeats))
    if not args.no_floor:
        for mode in MODES:
            configs.append(("floor", mode, args.steps if mode == "1in10" else args.every_steps,
                            main_python, args.repeats))
    for impl in ("comgra_like", "comgra"):
        if impl not in pythons:
            continue
        for mode in MODES:
            if impl == "comgra":
                steps = args.comgra_steps if mode == "1in10" else args.comgra_every_steps
                reps = min(args.repeats, args.comgra_repeats)
            else:
                steps = args.steps if mode == "1in10" else args.every_steps
                reps = args.repeats
            configs.append((impl, mode, steps, pythons[impl], reps))

    print(f"workload: {json.dumps(WORKLOAD)}")
    print(f"interpreters: {json.dumps(pythons) if pythons else '(bare only)'}; out: {out}")
    for msg in skipped:
        print(msg)
    runs = {}
    try:
        for rep in range(args.repeats):
            todo = [c for c in configs if rep < c[4]]
            if rep % 2 == 1:
                todo = todo[::-1]  # alternate the order to cancel drift
            print(f"  repeat {rep + 1}/{args.repeats}", flush=True)
            for impl, mode, steps, python, _reps in todo:
                root = out / f"run{rep}_{impl}_{mode}"
                if root.exists():
                    shutil.rmtree(root)
                try:
                    res = _run_worker_proc(python, impl, mode, steps, root, verbose=True,
                                           width=args.width, threads=args.threads)
                except RuntimeError as e:
                    print(f"    ERROR {e}", flush=True)
                    skipped.append(f"error: {impl}/{mode} failed in repeat {rep + 1}")
                    continue
                runs.setdefault((impl, mode), []).append(res)
                if not args.keep:
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        summary = {}
        for (impl, mode), rs in runs.items():
            summary.setdefault(impl, {})[mode] = _summarize(rs)
        results = {
            "workload": WORKLOAD,
            "command": sys.argv,
            "summary": summary,
            "runs": {f"{k[0]}/{k[1]}": v for k, v in runs.items()},
            "skipped": skipped,
        }
        (out / "benchmark_results.json").write_text(json.dumps(results, indent=1))
        _print_table(summary, skipped)
        if own_out and not args.keep:
            shutil.rmtree(out, ignore_errors=True)
        else:
            print(f"results: {out / 'benchmark_results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
