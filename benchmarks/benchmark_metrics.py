#!/usr/bin/env python
"""Cost of each per-module metric (issue 16), ours beside Taiyi's approach, in one run.

Usage::

    python benchmarks/benchmark_metrics.py [--repeats N] [--threads N] [--no-sweep]
                                           [--no-loop]

Workloads (fixed seeds):

* ``mlp``: the recorder benchmark's MLP (benchmarks/benchmark_recorder.py: 4 Linear
  layers of width 256, input 256, batch 64, ReLU between them), as in watch_workloads.py.
* ``cnn``: a small CNN: conv 3->32 (3x3), BatchNorm, ReLU, 2x2 max-pool, conv 32->64,
  BatchNorm, ReLU, max-pool, Linear 64*8*8 -> 10; 32x32 RGB images, batch 64.

One training step runs with hooks that copy every module's input, output, output
gradient, weight, bias and their gradients to numpy (what the collector ships to the
writer on a scheduled step). Then, for each quantity, its compute() runs on every module
it applies to, on fresh ModuleData (no spectrum shared with another quantity), and the
median over ``--repeats`` of the sum over modules is reported: the writer's cost of one
scheduled computation of that quantity on the whole model. "cov family, shared" is the
cost of all covariance quantities of the input computed together on one ModuleData (one
decomposition, as the writer does when several are configured).

Taiyi's approach, timed in the same run on the same captured tensors: on the training
thread, in torch, per module: the covariance (torch.cov of the input, conv inputs reshaped
with Taiyi's view), its full decomposition (torch.linalg.svd, as Taiyi's cal_eig), sorted.

The spectrum sweep (``--no-sweep`` to skip) times, for n = 4 d samples of d features, the
exact path (eigvalsh of the d x d matrix, including forming it) against the randomized
block Krylov top-1 and top-32, and their error: the numbers behind spectra.EXACT_MAX_DIM.

If ``comgra_like.watch`` accepts ``metrics=`` (issue 16's framework), a real training loop
of the MLP runs with every applicable built-in metric at every step and without, and the
wall time per step of each is printed (``--no-loop`` to skip).

BLAS and torch run on ``--threads`` threads (default 1: the writer process shares the
machine with training).
"""

from __future__ import annotations

import argparse
import os
import sys


def _set_threads(argv: list[str]) -> int:
    threads = 1
    if "--threads" in argv:
        threads = int(argv[argv.index("--threads") + 1])
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    return threads


THREADS = _set_threads(sys.argv)  # before numpy loads BLAS

import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import watch_workloads

from comgra_like.metrics import spectra
from comgra_like.metrics.quantities import QUANTITIES, ModuleData, features_2d

COV_FAMILY = ("InputCovMaxEig", "InputCovStableRank", "InputCovCondition",
              "InputCovCondition20", "InputCovCondition50", "InputCovCondition80",
              "InputCovSpectrum")


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.fc = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        x = self.pool2(self.relu2(self.bn2(self.conv2(x))))
        return self.fc(x.flatten(1))


def build(name: str):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if name == "mlp":
        work = watch_workloads.build("mlp")
        return work.model, work.batch(g), work.loss
    model = SmallCNN()
    batch = (torch.randn(64, 3, 32, 32, generator=g), torch.randint(10, (64,), generator=g))
    return model, batch, nn.functional.cross_entropy


def capture(model: nn.Module, batch, loss_fn) -> dict[str, ModuleData]:
    """One training step with hooks; every leaf module's arrays as the collector ships them."""
    data: dict[str, ModuleData] = {}
    handles = []

    def forward_hook(name):
        def hook(module, inputs, output):
            record = data.setdefault(name, ModuleData(type(module).__name__))
            record.input = inputs[0].detach().numpy().copy()
            record.output = output.detach().numpy().copy()
            if isinstance(module, nn.BatchNorm2d):
                rows = inputs[0].detach().transpose(0, 1).reshape(inputs[0].shape[1], -1)
                record.extra["bn_batch_mean"] = rows.mean(1)[None].numpy()
                record.extra["bn_batch_var"] = rows.var(1)[None].numpy()
        return hook

    def backward_hook(name):
        def hook(module, grad_input, grad_output):
            data[name].output_grad = grad_output[0].detach().numpy().copy()
        return hook

    for name, module in model.named_modules():
        if len(list(module.children())) == 0:
            handles.append(module.register_forward_hook(forward_hook(name)))
            handles.append(module.register_full_backward_hook(backward_hook(name)))
    x, y = batch
    loss = loss_fn(model(x), y)
    loss.backward()
    for handle in handles:
        handle.remove()
    for name, module in model.named_modules():
        record = data.get(name)
        if record is None:
            continue
        for attr in ("weight", "bias"):
            p = getattr(module, attr, None)
            if isinstance(p, torch.Tensor):
                setattr(record, attr, p.detach().numpy().copy())
                if p.grad is not None:
                    if attr == "weight":
                        record.weight_grad = p.grad.numpy().copy()
                    else:
                        record.extra["bias_grad"] = p.grad.numpy().copy()
        if isinstance(module, nn.BatchNorm2d):
            record.extra["bn_running_mean"] = module.running_mean.numpy().copy()
            record.extra["bn_running_var"] = module.running_var.numpy().copy()
    return data


def fresh(record: ModuleData) -> ModuleData:
    return ModuleData(record.module_class, input=record.input, output=record.output,
                      output_grad=record.output_grad, weight=record.weight,
                      weight_grad=record.weight_grad, bias=record.bias,
                      extra=dict(record.extra))


ACTIVATION_QUANTITIES = ("DeadUnitFraction", "SaturatedUnitFraction", "ActivationRate")


def applicable(quantity, record: ModuleData) -> bool:
    """The modules a typical config gives each quantity: activation statistics on the
    activations, MeanTID/VarTID on BatchNorm, everything else on Linear and Conv2d."""
    if not quantity.applies_to(record.module_class):
        return False
    if quantity.name in ACTIVATION_QUANTITIES:
        return record.module_class == "ReLU"
    if quantity.module_classes is None and record.module_class not in ("Linear", "Conv2d"):
        return False
    for need in quantity.needs:
        value = getattr(record, need, None) if need in (
            "input", "output", "output_grad", "weight", "weight_grad", "bias") else \
            record.extra.get(need)
        if value is None:
            return False
    return True


def median_ms(fn, repeats: int) -> float:
    start = time.perf_counter()
    fn()  # warm-up
    if time.perf_counter() - start > 5.0:  # Taiyi's 4096 x 4096 SVD: one more run is enough
        repeats = 1
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_quantities(data: dict[str, ModuleData], repeats: int) -> dict[str, tuple[float, int]]:
    rows: dict[str, tuple[float, int]] = {}
    for name, quantity in QUANTITIES.items():
        targets = [r for r in data.values() if applicable(quantity, r)]
        if not targets:
            continue

        def run(targets=targets, quantity=quantity):
            for record in targets:
                state: dict = {}
                quantity.compute(fresh(record), state)
                if quantity.stateful:  # a second computation: the one that has a previous
                    quantity.compute(fresh(record), state)

        cost = median_ms(run, repeats)
        if quantity.stateful:
            cost /= 2
        rows[name] = (cost, len(targets))
    cov_targets = [r for r in data.values() if r.module_class in ("Linear", "Conv2d")]

    def family():
        for record in cov_targets:
            shared = fresh(record)
            for name in COV_FAMILY:
                QUANTITIES[name].compute(shared, {})

    rows["cov family, shared"] = (median_ms(family, repeats), len(cov_targets))
    return rows


def taiyi_cost(data: dict[str, ModuleData], repeats: int) -> tuple[float, float, int]:
    """Taiyi's input covariance spectrum per Linear/Conv2d module, in torch (ms), and the
    copy to numpy our training side does instead (ms)."""
    tensors = [(r.module_class, torch.from_numpy(r.input)) for r in data.values()
               if r.module_class in ("Linear", "Conv2d")]

    def taiyi():
        for cls, x in tensors:
            if cls == "Conv2d":
                x = x.transpose(0, 1).contiguous().view(-1, x.shape[1])
            cov = torch.cov(x.T)
            values = torch.linalg.svd(cov.float())[1]
            torch.sort(values, descending=True)

    def copy():
        for _, x in tensors:
            x.detach().numpy().copy()

    return median_ms(taiyi, repeats), median_ms(copy, repeats), len(tensors)


def sweep(repeats: int) -> None:
    print("\nSpectrum sweep: n = 4 d samples (float32), exact eigvalsh vs randomized block "
          "Krylov; error = max relative error of the top-k against exact")
    print(f"{'d':>6} {'exact ms':>10} {'top-1 ms':>10} {'top-1 err':>10} "
          f"{'top-32 ms':>10} {'top-32 err':>11}  (decaying spectrum / white noise)")
    rng = np.random.default_rng(0)
    for d in (64, 128, 256, 512, 1024, 1536, 2048):
        n = 4 * d
        for kind in ("decaying", "noise"):
            x = rng.standard_normal((n, d)).astype(np.float32)
            if kind == "decaying":
                x *= (0.97 ** np.arange(d)).astype(np.float32)
            reps = max(1, repeats // (4 if d >= 1024 else 1))
            exact_ms = median_ms(lambda x=x: spectra.exact_spectrum(x), reps)
            exact = spectra.exact_spectrum(x)
            out = [f"{d:>6} {exact_ms:>10.1f}"]
            for k in (1, 32):
                ms = median_ms(lambda x=x, k=k: spectra.top_spectrum(x, k=k), reps)
                top = spectra.top_spectrum(x, k=k)
                err = float(np.max(np.abs(top - exact[:k]) / exact[:k]))
                out.append(f"{ms:>10.1f} {err:>10.2e}" + (" " if k == 32 else ""))
            print(" ".join(out) + f"  {kind}")


def loop(steps: int) -> None:
    import inspect

    from comgra_like import watch
    if "metrics" not in inspect.signature(watch).parameters:
        print("\n(watch(model, metrics=...) not available yet: loop timing skipped)")
        return
    print(f"\nReal loop (MLP, {steps} steps): wall ms per step")
    names = [n for n, q in QUANTITIES.items() if q.module_classes is None]
    for label, config in (("bare", None), ("all metrics, every step", {"Linear": names}),
                          ("all metrics, linear(10, 0)",
                           {"Linear": [[n, "linear(10, 0)"] for n in names]})):
        torch.manual_seed(0)
        work = watch_workloads.build("mlp")
        opt = torch.optim.SGD(work.model.parameters(), lr=work.lr)
        g = torch.Generator().manual_seed(0)
        with tempfile.TemporaryDirectory() as folder:
            handle = None
            if config is not None:
                # tensors logged once in 10**6 steps: the metrics alone are measured
                handle = watch(work.model, metrics=config, log_freq=10**6,
                               standalone_dir=folder, verbose=False)
            for _ in range(3):
                watch_workloads.train_step(work.model, opt, work, g)
            start = time.perf_counter()
            for _ in range(steps):
                watch_workloads.train_step(work.model, opt, work, g)
            training = (time.perf_counter() - start) / steps * 1e3
            if handle is not None:
                start = time.perf_counter()
                handle.flush()
                handle.unwatch()
                drain = (time.perf_counter() - start) * 1e3
                print(f"  {label:<28} {training:8.2f} ms/step on the training thread, "
                      f"{drain:8.1f} ms to drain the writer at the end")
            else:
                print(f"  {label:<28} {training:8.2f} ms/step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-loop", action="store_true")
    parser.add_argument("--loop-steps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads: {THREADS} (BLAS and torch); median of {args.repeats} repeats; "
          f"spectra.EXACT_MAX_DIM = {spectra.EXACT_MAX_DIM}")
    results = {}
    taiyi = {}
    for workload in ("mlp", "cnn"):
        data = capture(*build(workload))
        shapes = {name: features_2d(r.input, r.module_class).shape for name, r in data.items()
                  if r.module_class in ("Linear", "Conv2d")}
        print(f"{workload}: covariance inputs (rows x features): {shapes}")
        results[workload] = time_quantities(data, args.repeats)
        taiyi[workload] = taiyi_cost(data, args.repeats)
    print(f"\n{'quantity':<26} {'mlp ms':>9} {'(mods)':>6} {'cnn ms':>9} {'(mods)':>6}")
    names = list(dict.fromkeys([*results["mlp"], *results["cnn"]]))
    for name in names:
        cells = []
        for workload in ("mlp", "cnn"):
            cost, count = results[workload].get(name, (math.nan, 0))
            cells.append(f"{cost:>9.3f} {count:>6}" if count else f"{'-':>9} {'':>6}")
        print(f"{name:<26} " + " ".join(cells))
    print("\nTaiyi's approach (torch.cov + full SVD per Linear/Conv2d input, on the training "
          "thread) vs ours (the training thread only copies; the writer decomposes):")
    for workload in ("mlp", "cnn"):
        t_ms, copy_ms, count = taiyi[workload]
        ours = results[workload]["cov family, shared"][0]
        print(f"  {workload}: Taiyi {t_ms:8.2f} ms on the training thread ({count} modules); "
              f"ours {copy_ms:6.3f} ms copying on the training thread + {ours:8.2f} ms "
              f"in the writer for the whole covariance family")
    if not args.no_sweep:
        sweep(max(3, args.repeats // 2))
    if not args.no_loop:
        loop(args.loop_steps)


if __name__ == "__main__":
    main()
