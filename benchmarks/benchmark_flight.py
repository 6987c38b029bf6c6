#!/usr/bin/env python
"""Benchmark the flight recorder (issue 30): what arming it costs on every step.

Usage::

    python benchmarks/benchmark_flight.py [--steps N] [--chunk K] [--threads T] [--settings]

The workload is the recorder benchmark's MLP (``benchmark_recorder.py``'s ``WORKLOAD``
and ``_train_step``: width 256, 4 Linear layers, batch 64, 11 registered tensors and 8
parameters, SGD, 1 torch thread). Five copies of the model train side by side in one
process, in alternating chunks of ``--chunk`` steps (same data, same seeds):

* ``bare``     no recorder;
* ``recorder`` ComgraRecorder recording 1 step in 1,000, no flight recorder;
* ``armed``    the same with ``FlightRecorder()`` (defaults: window 64, full_steps 2);
* ``bound``    the unavoidable work: one read pass over each tensor the flight recorder
               reduces (one ``torch.sum`` per registered tensor, its gradient, each
               parameter, its gradient and its value after the step), nothing else;
* ``reductions`` the flight recorder's own arithmetic alone: its three reductions per
               tensor (sum, L2 norm, min and max, read as floats), the copy of the
               parameters and the updates' subtraction; no bookkeeping, hooks or judging.

``--settings``: three more copies, armed with ``full_steps=0`` (no full values kept),
``updates=False`` (no parameter copy, no update statistics) and both.

``--watch``: the transformer of ``benchmark_watch.py`` instead: bare, ``watch(log_freq=100)``,
the same with ``flight_recorder=FlightRecorder()`` (target: x1.10), and ``watch+bound``:
watch with one sum per tensor the flight recorder reduces, through the same kinds of
hooks (the unavoidable work).

Printed: ms per step of each and the ratios to ``bare`` (the median over rounds of the
per-round ratio), for each of ``--repeats`` whole measurements (default 3), then the
median of the repeats, the load average before and after, and the distances: armed minus
bound (the targets of issue 30: armed <= x1.05 and within 0.03 of the bound), split into
reductions minus bound (the arithmetic beyond one read pass) and armed minus reductions
(the bookkeeping).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_recorder as br

#: ``--settings``: the flight recorder with the settings that trade what it keeps for cost.
SETTINGS = {
    "full_steps=0": {"full_steps": 0},
    "updates=False": {"updates": False},
    "both": {"full_steps": 0, "updates": False},
}


class _Bound:
    """One read pass (a sum) over everything the flight recorder reduces; no copies."""

    def __init__(self, torch):
        self.torch, self.params, self.sink = torch, [], []

    def reduce(self, t):
        return t.sum()

    def track_module(self, _name, module):
        self.params = list(module.parameters())

    def start_batch(self, *_a, **_k):
        self.sink = [self.reduce(p.detach()) for p in self.params]

    def start_iteration(self):
        pass

    def register_tensor(self, _name, tensor, *_a, **_k):
        self.sink.append(self.reduce(tensor.detach()))
        if tensor.requires_grad and tensor.grad_fn is not None:
            tensor.register_hook(lambda g: self.sink.append(self.reduce(g)) and None)

    def record_current_gradients(self, *_a):
        self.sink.extend(self.reduce(p.grad) for p in self.params if p.grad is not None)

    def finish_iteration(self):
        pass

    def finish_batch(self):
        self.sink.extend(self.reduce(p.detach()) for p in self.params)  # the update's read
        self.sink = []

    def finalize(self):
        pass


class _Reductions(_Bound):
    """The flight recorder's own arithmetic and nothing else: its three reductions per
    tensor on the CPU (sum, L2 norm, min and max, read as floats), the copy of the
    parameters at the start of the step and the updates (after - before) reduced the same
    way; no catalog, ring, hooks of its own or judging. armed - reductions is what the
    flight recorder's bookkeeping costs; reductions - bound what its arithmetic costs
    beyond one read pass."""

    def reduce(self, t):
        low, high = self.torch.aminmax(t)
        return (t.sum().item(), self.torch.linalg.vector_norm(t).item(), low.item(), high.item())

    def start_batch(self, *_a, **_k):
        super().start_batch()
        self.before = [p.detach().clone() for p in self.params]

    def finish_batch(self):
        self.sink.extend(self.reduce(p.detach() - b) for p, b in zip(self.params, self.before))
        self.sink, self.before = [], []


class _WatchBound:
    """The unavoidable work of the armed watch(): one read pass (a sum) over each tensor
    its flight recorder reduces, seen through the same kinds of hooks (every module's
    floating-point output and its gradient, every parameter's gradient, the parameters at
    each training forward and once more after the optimizer's step); no copies."""

    def __init__(self, torch, model):
        self.torch, self.sink, self.open = torch, [], False
        self.params = list(model.parameters())
        self.handles = [model.register_forward_pre_hook(self._pre, prepend=True)]
        self.handles += [m.register_forward_hook(self._out) for m in model.modules()]
        self.handles += [p.register_post_accumulate_grad_hook(self._grad) for p in self.params]

    def _pre(self, module, args):
        if not module.training:
            return
        if self.open:  # the values after the optimizer's step: the update's read
            self.sink.extend(p.detach().sum() for p in self.params)
        self.sink = [p.detach().sum() for p in self.params]
        self.open = True

    def _out(self, module, args, output):
        for t in _floats(output):
            self.sink.append(t.detach().sum())
            if t.requires_grad:
                t.register_hook(self._seen)

    def _seen(self, grad):
        self.sink.append(grad.sum())

    def _grad(self, p):
        self.sink.append(p.grad.sum())

    def remove(self):
        for h in self.handles:
            h.remove()


def _floats(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _floats(v)]
    return []


def watch_main(args) -> int:
    """--watch: the transformer of benchmark_watch.py (watch_workloads.py), bare vs
    watch(log_freq=100) vs watch(log_freq=100, flight_recorder=FlightRecorder()),
    side by side in chunks (issue 30's target: armed watch <= x1.10)."""
    import torch
    import watch_workloads as W

    from comgra_like import FlightRecorder, watch

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    base = W.build("transformer")
    root = tempfile.mkdtemp(prefix="comgra-flight-watch-")
    runs = {}
    bounds = []
    for name in ("bare", "watch", "watch+flight", "watch+bound"):
        work = copy.copy(base)
        work.model = copy.deepcopy(base.model)
        opt = torch.optim.SGD(work.model.parameters(), lr=work.lr)
        gen = torch.Generator().manual_seed(99)
        handle = None
        if name != "bare":
            handle = watch(work.model, log_freq=100, verbose=False, standalone_dir=root,
                           trial_id=name.replace("+", "_"),
                           flight_recorder=FlightRecorder() if "flight" in name else None)
        if name == "watch+bound":
            bounds.append(_WatchBound(torch, work.model))
        runs[name] = (work, opt, gen, handle, [])
    for name, (work, opt, gen, _, _) in runs.items():
        for _ in range(10):
            W.train_step(work.model, opt, work, gen)
    for _ in range(args.steps // args.chunk):
        for name, (work, opt, gen, _, times) in runs.items():
            t0 = time.perf_counter()
            for _ in range(args.chunk):
                W.train_step(work.model, opt, work, gen)
            times.append(time.perf_counter() - t0)
    for (_, _, _, handle, _) in runs.values():
        if handle is not None:
            handle.unwatch()
    for bound in bounds:
        bound.remove()
    bare = runs["bare"][4]
    print(f"watch workload 'transformer' (benchmark_watch.py), log_freq 100, "
          f"{args.threads} torch thread(s), {args.steps} steps per variant")
    ratios = {}
    for name, (_, _, _, _, times) in runs.items():
        ratios[name] = statistics.median(t / b for t, b in zip(times, bare))
        print(f"  {name:13s} {1000 * statistics.median(times) / args.chunk:7.3f} ms/step   "
              f"x{ratios[name]:.3f}")
    print("target: watch+flight <= x1.10; watch+bound: watch with one sum per tensor "
          "the flight recorder reduces (the unavoidable work)")
    return ratios


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3,
                    help="whole measurements, one after the other (the medians are printed)")
    ap.add_argument("--steps", type=int, default=600, help="steps per variant")
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--threads", type=int, default=br.WORKLOAD["torch_threads"])
    ap.add_argument("--settings", action="store_true",
                    help="also the MLP armed with full_steps=0, with updates=False and with "
                         "both (what each costs)")
    ap.add_argument("--watch", action="store_true",
                    help="the watch() transformer workload instead of the recorder's MLP")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    results = [watch_main(args) if args.watch else mlp_once(args)
               for _ in range(max(1, args.repeats))]
    print(f"median of {len(results)} repeats (load {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores):")
    for name in results[0]:
        print(f"  {name:13s} x{statistics.median(r[name] for r in results):.3f}   "
              f"({', '.join(f'{r[name]:.3f}' for r in results)})")
    if not args.watch:
        gap = statistics.median(r["armed"] - r["bound"] for r in results)
        print(f"armed - bound: {gap:+.3f} (target <= 0.03); armed x"
              f"{statistics.median(r['armed'] for r in results):.3f} (target <= 1.05)")
        arith = statistics.median(r["reductions"] - r["bound"] for r in results)
        books = statistics.median(r["armed"] - r["reductions"] for r in results)
        print(f"  of which reductions - bound (arithmetic beyond one read pass): {arith:+.3f}; "
              f"armed - reductions (bookkeeping, hooks, judging): {books:+.3f}")
    else:
        gap = statistics.median(r["watch+flight"] - r["watch+bound"] for r in results)
        print(f"watch+flight - watch+bound: {gap:+.3f}; watch+flight x"
              f"{statistics.median(r['watch+flight'] for r in results):.3f} (target <= 1.10)")
    return 0


def mlp_once(args) -> dict:
    """One measurement of the MLP's four variants; returns their ratios to bare."""
    import torch

    from comgra_like import FlightRecorder
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder

    torch.set_num_threads(args.threads)
    torch.manual_seed(br.WORKLOAD["seed"])
    base = br._build_model(torch)
    root = tempfile.mkdtemp(prefix="comgra-flight-bench-")
    names = ("bare", "recorder", "armed", "reductions", "bound")
    if args.settings:
        names += tuple(SETTINGS)
    runs = {}
    for name in names:
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=br.WORKLOAD["lr"])
        gen = torch.Generator().manual_seed(br.WORKLOAD["seed"] + 1)
        rec = None
        if name in ("recorder", "armed") or name in SETTINGS:
            flight = (FlightRecorder(**SETTINGS.get(name, {}))
                      if name != "recorder" else None)
            rec = ComgraRecorder(root, "bench", name.replace(" ", "_").replace("=", "-"),
                                 DecisionMakerForRecordingsFrequencyPerType(1000),
                                 max_num_batch_size_to_record=5, flight_recorder=flight)
            rec.track_module("mlp", model)
        elif name in ("bound", "reductions"):
            rec = _Bound(torch) if name == "bound" else _Reductions(torch)
            rec.track_module("mlp", model)
        runs[name] = [model, opt, gen, rec, []]
    for name in names:  # warm-up (allocator, kernels, the writer's start)
        model, opt, gen, rec, _ = runs[name]
        for s in range(br.WORKLOAD["warmup_steps"]):
            br._train_step(torch, model, opt, gen, s, rec)
    step = br.WORKLOAD["warmup_steps"]
    for _ in range(args.steps // args.chunk):
        for name in names:
            model, opt, gen, rec, times = runs[name]
            t0 = time.perf_counter()
            for s in range(step, step + args.chunk):
                br._train_step(torch, model, opt, gen, s, rec)
            times.append(time.perf_counter() - t0)
        step += args.chunk
    for name in names:
        rec = runs[name][3]
        if rec is not None:
            rec.finalize()
    bare = runs["bare"][4]
    print(f"workload: MLP width {br.WORKLOAD['width']}, {br.WORKLOAD['n_linear_layers']} "
          f"layers, batch {br.WORKLOAD['batch_size']}, {args.threads} torch thread(s); "
          f"{args.steps} steps per variant in chunks of {args.chunk}")
    ratios = {}
    for name in names:
        times = runs[name][4]
        ms = 1000 * statistics.median(times) / args.chunk
        ratios[name] = statistics.median(t / b for t, b in zip(times, bare))
        print(f"  {name:13s} {ms:7.3f} ms/step   x{ratios[name]:.3f}")
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
