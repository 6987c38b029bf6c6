#!/usr/bin/env python
"""monitorch 0.1.0.7 and comgra_like's metrics side by side, number by number (issue 16).

Usage (from the project's venv)::

    python benchmarks/compare_monitorch.py [--venv DIR] [--steps N]

It makes a separate virtual environment (in a temporary folder unless ``--venv`` names
one; never the project's), installs torch==2.13.0 and then monitorch==0.1.0.7 (and numpy,
which monitorch imports without declaring it), and runs this same file there as a worker
that trains the model below with monitorch's lenses attached (``inplace=False``, so every
per-step value is kept) and prints them as JSON. Then it trains the same model on the same
data with the same seed here, computes comgra_like's quantities at every step
(comgra_like.metrics.quantities on arrays copied by plain hooks: the numbers the writer
would store), and prints both with the largest relative difference per pair.

Pairs (monitorch lens -> ours): OutputNorm -> OutputNorm / OutputRMS (normalize_by_size),
OutputGradientGeometry -> OutputGradSndNorm / OutputGradRMS, OutputGradCorrelation,
ParameterGradientGeometry -> WeightGradNorm, WeightGradCorrelation, BiasGradNorm,
BiasGradCorrelation, ParameterUpdateGeometry -> WeightUpdateNorm, WeightUpdateCorrelation,
BiasUpdateNorm, BiasUpdateCorrelation, OutputActivation -> ActivationRate,
DeadUnitFraction.

Known differences, reported apart from the tolerance check: a correlation's first value
(monitorch correlates with a zero tensor and stores 0; we store NaN: there is no previous
value), and monitorch's correlation adds 1e-8 to the denominator (ours is the plain
cosine), which matters for small norms (updates of 1e-3: a 1e-3 relative difference);
the comparison applies monitorch's 1e-8 to our cosines (with our own norms) before
comparing, so that what remains is arithmetic (float32 in monitorch, float64 in ours).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TORCH = "torch==2.13.0"
MONITORCH = "monitorch==0.1.0.7"
SEED, BATCH, WIDTH = 0, 16, 32
MARKER = "MONITORCH_RESULT "


def build(torch, steps: int):
    """The model, its optimizer and the batches: identical in both interpreters."""
    nn = torch.nn
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(20, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    with torch.no_grad():  # some units of the first layer dead on every input
        model[0].bias[:4] = -50.0
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(SEED)
    batches = [(torch.randn(BATCH, 20, generator=g), torch.randn(BATCH, 10, generator=g))
               for _ in range(steps)]
    return model, opt, batches


def train(torch, model, opt, batches, after_step=None) -> None:
    for step, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if after_step is not None:
            after_step(step)


# --- the worker, in monitorch's venv -------------------------------------------------------

def _values(seq) -> list[float]:
    return [float(v) for v in seq]


def monitorch_worker(steps: int) -> None:
    import torch
    from monitorch.inspector import PyTorchInspector
    from monitorch.lens import (
        OutputActivation,
        OutputGradientGeometry,
        OutputNorm,
        ParameterGradientGeometry,
        ParameterUpdateGeometry,
    )

    result: dict[str, dict[str, list[float]]] = {}
    for normalize in (False, True):  # one run per setting: same seed, same numbers
        model, opt, batches = build(torch, steps)
        out_norm = OutputNorm(inplace=False, normalize_by_size=normalize)
        grad_geo = OutputGradientGeometry(inplace=False, normalize_by_size=normalize)
        lenses = [out_norm, grad_geo]
        if not normalize:
            param_grad = ParameterGradientGeometry(inplace=False)
            update = ParameterUpdateGeometry(opt, inplace=False)
            activation = OutputActivation(inplace=False)
            lenses += [param_grad, update, activation]
        PyTorchInspector(lenses, module=model, visualizer="print")
        train(torch, model, opt, batches)
        suffix = "RMS" if normalize else "Norm"
        for name, values in out_norm._preprocessor.value.items():
            result.setdefault(f"Output{suffix}", {})[name] = _values(values)
        for name, (norms, products) in grad_geo._preprocessor.value.items():
            result.setdefault(f"OutputGrad{suffix}", {})[name] = _values(norms)
            result.setdefault("OutputGradCorrelation", {})[name] = _values(products)
        if normalize:
            continue
        for lens, kind in ((param_grad, "Grad"), (update, "Update")):
            for parameter, preprocessor in lens._preprocessors.items():
                prefix = "Weight" if parameter == "weight" else "Bias"
                for name, (norms, products) in preprocessor.value.items():
                    result.setdefault(f"{prefix}{kind}Norm", {})[name] = _values(norms)
                    result.setdefault(f"{prefix}{kind}Correlation", {})[name] = _values(
                        products)
        for name, (rates, deaths) in activation._preprocessor.value.items():
            result.setdefault("ActivationRate", {})[name] = _values(rates)
            result.setdefault("DeadUnitFraction", {})[name] = _values(deaths)
    print(MARKER + json.dumps(result))


# --- ours ---------------------------------------------------------------------------------

OURS = {"OutputNorm": "OutputNorm", "OutputRMS": "OutputRMS",
        "OutputGradNorm": "OutputGradSndNorm", "OutputGradRMS": "OutputGradRMS",
        "OutputGradCorrelation": "OutputGradCorrelation",
        "WeightGradNorm": "WeightGradNorm", "WeightGradCorrelation": "WeightGradCorrelation",
        "BiasGradNorm": "BiasGradNorm", "BiasGradCorrelation": "BiasGradCorrelation",
        "WeightUpdateNorm": "WeightUpdateNorm",
        "WeightUpdateCorrelation": "WeightUpdateCorrelation",
        "BiasUpdateNorm": "BiasUpdateNorm", "BiasUpdateCorrelation": "BiasUpdateCorrelation",
        "ActivationRate": "ActivationRate", "DeadUnitFraction": "DeadUnitFraction"}


def ours(steps: int) -> dict[str, dict[str, list[float]]]:
    import torch

    from comgra_like.metrics.quantities import QUANTITIES, ModuleData

    model, opt, batches = build(torch, steps)
    captured: dict[str, ModuleData] = {}
    for name, module in model.named_modules():
        if name == "":
            continue

        def forward_hook(module, inputs, output, name=name):
            captured[name] = ModuleData(type(module).__name__, input=inputs[0].detach().numpy(),
                                        output=output.detach().numpy().copy())

        def backward_hook(module, grad_input, grad_output, name=name):
            captured[name].output_grad = grad_output[0].detach().numpy().copy()

        module.register_forward_hook(forward_hook)
        module.register_full_backward_hook(backward_hook)
    states: dict[tuple[str, str], dict] = {}
    result: dict[str, dict[str, list[float]]] = {}

    def after_step(step: int) -> None:
        for name, module in model.named_modules():
            data = captured.get(name)
            if data is None:
                continue
            if isinstance(module, torch.nn.Linear):
                data.weight = module.weight.detach().numpy().copy()
                data.bias = module.bias.detach().numpy().copy()
                data.weight_grad = module.weight.grad.numpy().copy()
                data.extra["bias_grad"] = module.bias.grad.numpy().copy()
            for theirs, mine in OURS.items():
                quantity = QUANTITIES[mine]
                if quantity.name.startswith(("Weight", "Bias")) and data.weight is None:
                    continue
                if mine in ("ActivationRate", "DeadUnitFraction") and data.module_class != "ReLU":
                    continue
                if mine.startswith("Output") and data.module_class == "ReLU" and "Grad" in mine:
                    continue  # monitorch's OutputGradientGeometry skips activations
                state = states.setdefault((name, mine), {})
                value = quantity.compute(data, state)
                result.setdefault(theirs, {}).setdefault(name, []).append(float(value))

    train(torch, model, opt, batches, after_step)
    return result


# --- orchestration ------------------------------------------------------------------------

def make_venv(folder: Path) -> Path:
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    for requirement in (TORCH, MONITORCH, "numpy"):
        print(f"installing {requirement} into {folder} ...", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return python


def _with_monitorch_eps(key: str, module: str, cosines: list[float], mine: dict) -> list[float]:
    """Our cosines as monitorch computes them: <a, b> / (|a| |b| + 1e-8). The norms are our
    own norms of the same tensors (the steps after the first of the matching Norm)."""
    norms = mine[key.replace("Correlation", "Norm")][module]
    if key.startswith(("WeightUpdate", "BiasUpdate")):
        norms = norms[1:]
    adjusted = []
    for i, cosine in enumerate(cosines, start=1):
        product = norms[i] * norms[i - 1]
        adjusted.append(cosine * product / (product + 1e-8))
    return adjusted


def compare(theirs: dict, mine: dict) -> tuple[float, list[str]]:
    worst = 0.0
    notes: list[str] = []
    print(f"\n{'quantity':<24} {'module':<8} {'step':>4} {'monitorch':>14} {'comgra_like':>14} "
          f"{'rel diff':>10}")
    for key in OURS:
        for module, their_values in sorted(theirs.get(key, {}).items()):
            name = module.lstrip(".")
            my_values = mine.get(key, {}).get(name)
            if my_values is None:
                notes.append(f"{key} {name}: no value of ours")
                continue
            if key.startswith(("WeightUpdate", "BiasUpdate")):
                my_values = my_values[1:]  # monitorch has no update before the second step
            if key.endswith("Correlation"):
                first_theirs, first_mine = their_values[0], my_values[0]
                notes.append(f"{key} {name}: first value monitorch {first_theirs:g}, ours "
                             f"{first_mine:g} (no previous value: we store NaN)")
                their_values, my_values = their_values[1:], my_values[1:]
                my_values = _with_monitorch_eps(key, name, my_values, mine)
            for step, (a, b) in enumerate(zip(their_values, my_values, strict=False)):
                diff = abs(a - b) / max(abs(a), 1e-12) if a != b else 0.0
                if math.isnan(b) and not math.isnan(a):
                    diff = math.inf
                worst = max(worst, diff)
                print(f"{key:<24} {name:<8} {step:>4} {a:>14.8g} {b:>14.8g} {diff:>10.2e}")
            if len(their_values) != len(my_values):
                notes.append(f"{key} {name}: {len(their_values)} monitorch values, "
                             f"{len(my_values)} ours")
    return worst, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", help="the venv for monitorch (made if missing; default: a "
                                       "temporary folder, removed at the end)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--monitorch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.monitorch_worker:
        monitorch_worker(args.steps)
        return
    with tempfile.TemporaryDirectory(prefix="monitorch-venv-") as temporary:
        folder = Path(args.venv) if args.venv else Path(temporary) / "venv"
        python = make_venv(folder)
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        run = subprocess.run([str(python), str(Path(__file__).resolve()), "--monitorch-worker",
                              "--steps", str(args.steps)], capture_output=True, text=True,
                             env=env, cwd=temporary, check=False)
    lines = [line for line in run.stdout.splitlines() if line.startswith(MARKER)]
    if run.returncode != 0 or not lines:
        sys.exit(f"the monitorch worker failed:\n{run.stdout}\n{run.stderr}")
    theirs = json.loads(lines[-1][len(MARKER):])
    mine = ours(args.steps)
    worst, notes = compare(theirs, mine)
    print("\nnotes:")
    for note in notes:
        print("  " + note)
    print(f"\nlargest relative difference (same definitions, {args.steps} steps): {worst:.3e}")


if __name__ == "__main__":
    main()
