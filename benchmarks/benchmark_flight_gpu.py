#!/usr/bin/env python
"""The flight recorder on a GPU (issue 30): a check and the cost on a GPT-2-small-sized
model.

Usage (on a machine with CUDA, from the repository root)::

    PYTHONPATH=. python benchmarks/benchmark_flight_gpu.py [--steps N] [--batch B]
        [--seq S] [--out DIR]

1. Check: a small MLP on the GPU, recorded 1 step in 1,000, a NaN injected at step 37 in
   'hidden' -> the flight recorder fires non_finite at step 37 in 'hidden' (judged one
   step later on a GPU: no host synchronisation) and the window reads back.
2. Cost: GPT-2 small (12 layers, width 768, 124M parameters, from a config: no weights
   downloaded) with the comgra API (track_module, the loss registered, gradients), AdamW,
   bf16 autocast; bare and armed (``FlightRecorder()``: window 64, full_steps 2) train
   side by side in alternating chunks; printed: ms per step and armed / bare (issue 30's
   target: <= x1.02).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time


def check(torch, root: str) -> None:
    from comgra_like import (
        ComgraRecorder,
        DecisionMakerForRecordingsFrequencyPerType,
        FlightRecorder,
    )
    from comgra_like.query.flight import list_flight_triggers, read_flight

    dev = "cuda"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fr = FlightRecorder(window=16)
    rec = ComgraRecorder(root, "gpu", "check", DecisionMakerForRecordingsFrequencyPerType(1000),
                         flight_recorder=fr)
    rec.track_module("net", model)
    for step in range(45):
        x = torch.randn(8, 32, device=dev)
        rec.start_batch(step, 8)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        h = model[0](x)
        if step == 37:
            h = h * float("nan")
        rec.register_tensor("hidden", h)
        out = model[2](model[1](h))
        rec.register_tensor("out", out)
        loss = (out ** 2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("default")
        rec.finish_iteration()
        opt.step()
        rec.finish_batch()
    rec.finalize()
    fired = [(f["kind"], f["step"], f["tensor"]) for f in fr.fired]
    triggers = list_flight_triggers(f"{root}/gpu", "check")
    rows = read_flight(f"{root}/gpu", "check")
    ok = fired[:1] == [("non_finite", 37, "hidden")] and len(triggers) == 1 and sorted(
        rows["training_step"].unique().tolist()) == list(range(22, 38))
    print(f"CHECK {'OK' if ok else 'FAILED'}: fired {fired}, windows "
          f"{[t.name for t in triggers]}, steps {sorted(rows['training_step'].unique())}")


def cost(torch, root: str, steps: int, batch: int, seq: int, chunk: int,
         flight_kwargs: dict) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from comgra_like import (
        ComgraRecorder,
        DecisionMakerForRecordingsFrequencyPerType,
        FlightRecorder,
    )

    dev = "cuda"
    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=seq)).to(dev)
    runs = {}
    for name in ("bare", "armed"):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        rec = None
        if name == "armed":
            rec = ComgraRecorder(root, "gpu", "gpt2", DecisionMakerForRecordingsFrequencyPerType(
                10**6), max_num_batch_size_to_record=0, flight_recorder=FlightRecorder(**flight_kwargs))
            rec.track_module("gpt2", model)
        runs[name] = (model, opt, rec, [])
    ids = torch.randint(0, 50257, (batch, seq), device=dev)

    def step_of(model, opt, rec, s):
        if rec is not None:
            rec.start_batch(s, batch)
            rec.start_iteration()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        if rec is not None:
            rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if rec is not None:
            rec.record_current_gradients("default")
            rec.finish_iteration()
        opt.step()
        if rec is not None:
            rec.finish_batch()

    for name, (model, opt, rec, _) in runs.items():
        for s in range(5):
            step_of(model, opt, rec, s)
    torch.cuda.synchronize()
    s0 = 5
    for _ in range(steps // chunk):
        for name, (model, opt, rec, times) in runs.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            for s in range(s0, s0 + chunk):
                step_of(model, opt, rec, s)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        s0 += chunk
    bare = runs["bare"][3]
    armed = runs["armed"][3]
    ratio = statistics.median(a / b for a, b in zip(armed, bare))
    print(f"GPT-2 small, batch {batch} x {seq} tokens, bf16 autocast, AdamW, "
          f"{torch.cuda.get_device_name()}, FlightRecorder({flight_kwargs}):")
    print(f"  bare  {1000 * statistics.median(bare) / chunk:8.2f} ms/step")
    print(f"  armed {1000 * statistics.median(armed) / chunk:8.2f} ms/step   x{ratio:.3f} "
          "(target <= x1.02)")
    print(f"  triggers on the clean run: {runs['armed'][2]._flight.fired if runs['armed'][2]._flight else 'disarmed'}")
    runs["armed"][2].finalize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--chunk", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--full-steps", type=int, default=2)
    ap.add_argument("--no-updates", action="store_true")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 1
    root = args.out or tempfile.mkdtemp(prefix="comgra-flight-gpu-")
    if not args.no_check:
        check(torch, root)
    sys.stdout.flush()
    cost(torch, root, args.steps, args.batch, args.seq, args.chunk,
         {"full_steps": args.full_steps, "updates": not args.no_updates})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
