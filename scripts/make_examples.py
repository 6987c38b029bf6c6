"""Regenerate the committed example group ``example_runs/tutorial``, every trial of it.

    python -m comgra_like.scripts.make_examples                # example_runs/ of this checkout
    python -m comgra_like.scripts.make_examples --out DIR      # DIR/tutorial
    python -m comgra_like.scripts.make_examples --only watched # one part (tutorial, watched)

The group is what ``comgra --path example_runs/tutorial`` (``bash scripts/dev.sh gui``)
opens, so that every page has something to show without training anything:

* ``trial_bugged_original_version`` and ``trial_no_activation_function_on_output_layer``:
  the tutorial (``scripts/tutorial.py``), 600 steps each, steps 4, 590 and 592 recorded
  (Tensors, Network, Notes, Graphs, Visualization; Findings names the bug of the first);
* ``trial_watched_classifier``: the tutorial's task without the recurrence (a sequence of
  6 steps, flattened) learnt by a small MLP under ``comgra_like.watch(model,
  metrics=...)``: module graph and histograms (Modules), per-module metrics (Metrics),
  and the gradient flows of one batch after training (Flow).

Deterministic: the same seeds, data and recorded steps every time; the files differ
only in wall-clock times, version strings and random ids (flow record names): the
watched trial regenerates bit for bit. About 1.5 MB in all, a minute on two cores.
Needs torch.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from comgra_like.scripts.tutorial import run_tutorial_with_summaries

GROUP = "tutorial"
SEED = 0
#: The tutorial's two trials: steps trained and the steps recorded.
TUTORIAL_STEPS = 600
TUTORIAL_RECORD_STEPS = (4, 590, 592)

WATCHED_TRIAL = "trial_watched_classifier"
WATCHED_STEPS = 401  # steps 0 .. 400; watch records every LOG_FREQ-th
LOG_FREQ = 50
SEQUENCE_LENGTH = 6
CHANNELS = 5
BATCH = 64
#: Per-module metrics of the watched trial (Taiyi's config format, docs/METRICS.md).
METRICS = {
    "Linear": [["WeightNorm", "linear(10, 0)"], ["InputCovSpectrum", "linear(50, 0)"],
               "OutputRMS"],
    "ReLU": ["OutputRMS"],
}
PARTS = ("tutorial", "watched")


def default_output_root() -> Path | None:
    """``example_runs/`` of the checkout this file lives in, None if not in a checkout."""
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").is_file() and (repo / "example_runs").is_dir():
        return repo / "example_runs"
    return None


def make_tutorial_trials(root: Path, progress: bool = False) -> None:
    """The tutorial's two trials into ``<root>/tutorial`` (replacing them)."""
    _, summaries = run_tutorial_with_summaries(
        root, GROUP, steps=TUTORIAL_STEPS, seed=SEED, progress=progress,
        record_steps=TUTORIAL_RECORD_STEPS)
    for s in summaries:
        print(f"{s.trial_id}: final training loss {s.final_training_loss:.3f}, "
              f"test loss {s.final_test_loss:.3f}")


def build_classifier():
    """input (30) -> fc1 (64) -> relu1 -> fc2 (32) -> relu2 -> out (5); a sigmoid after."""
    from collections import OrderedDict

    from torch import nn

    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(SEQUENCE_LENGTH * CHANNELS, 64), relu1=nn.ReLU(),
        fc2=nn.Linear(64, 32), relu2=nn.ReLU(), out=nn.Linear(32, CHANNELS)))


def _batch(generator):
    """Sequences of SEQUENCE_LENGTH x CHANNELS numbers in [-1, 1], flattened; target 1
    where a channel's sum is positive (the tutorial's task)."""
    import torch

    x = torch.rand((BATCH, SEQUENCE_LENGTH, CHANNELS), generator=generator) * 2 - 1
    return x.flatten(1), (x.sum(dim=1) > 0).float()


def make_watched_trial(root: Path) -> None:
    """``trial_watched_classifier`` into ``<root>/tutorial`` (replacing it)."""
    import torch

    import comgra_like
    from comgra_like import FlowChain, write_flows

    group_dir = root / GROUP
    trial_dir = group_dir / "trials" / WATCHED_TRIAL
    if trial_dir.exists():
        shutil.rmtree(trial_dir)
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED + 1)
    model = build_classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with comgra_like.watch(model, log_freq=LOG_FREQ, standalone_dir=group_dir,
                               trial_id=WATCHED_TRIAL, verbose=False, seed=SEED,
                               metrics=METRICS) as handle:
            handle.recorder.add_note(
                f"{WATCHED_TRIAL}: the tutorial's task without the recurrence (sequences of "
                f"{SEQUENCE_LENGTH} steps, flattened), an MLP under watch(model, "
                f"log_freq={LOG_FREQ}, metrics=...), {WATCHED_STEPS} steps, Adam lr 3e-3, "
                f"batch {BATCH}")
            for _ in range(WATCHED_STEPS):
                x, target = _batch(generator)
                output = torch.sigmoid(model(x))
                loss = ((output - target) ** 2).mean()
                optimizer.zero_grad()
                loss.backward()
                handle.log_loss(loss)
                optimizer.step()
            handle.recorder.add_note(f"final loss {loss.item():.4f}; the flows of one batch "
                                     f"after training are stored at step {WATCHED_STEPS - 1}")
        # The flows of one batch through the trained network, sample 0 (docs/FLOW.md).
        x, target = _batch(generator)
        chain = FlowChain()
        h = chain.node("input", x)
        for name, module in model.named_children():
            h = chain.node(f"model.{name}", module(h))
        chain.backward(((torch.sigmoid(h) - target) ** 2).mean())
        write_flows(chain.flows(0), group_dir, WATCHED_TRIAL, training_step=WATCHED_STEPS - 1)
        chain.release()
        model.zero_grad()
    finally:
        torch.set_num_threads(before)
    print(f"{WATCHED_TRIAL}: final loss {loss.item():.3f}")


def make_examples(root: str | Path, parts: tuple[str, ...] = PARTS,
                  progress: bool = False) -> Path:
    """Write the chosen parts of the example group to ``<root>/tutorial``; return it."""
    root = Path(root)
    group_dir = root / GROUP
    if group_dir.exists() and any(group_dir.iterdir()) and not (group_dir / "trials").is_dir():
        raise SystemExit(f"{group_dir} does not look like a recording; not writing into it")
    if "tutorial" in parts:
        make_tutorial_trials(root, progress)
    if "watched" in parts:
        make_watched_trial(root)
    # The recorders have finished: their lock files (docs/FORMAT.md, "Recording ranks")
    # only say that nobody writes any more; they are not part of the example.
    for lock in (group_dir / "trials").glob(".*.lock*"):
        lock.unlink()
    return group_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="directory to write the group 'tutorial' into "
                             "(default: example_runs/ of this checkout)")
    parser.add_argument("--only", choices=PARTS, action="append", default=None,
                        help="write only this part (repeatable; default: all)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    root = args.out or default_output_root()
    if root is None:
        print("not inside a checkout: say where to write with --out DIR", file=sys.stderr)
        return 2
    group_dir = make_examples(root, tuple(args.only or PARTS), progress=not args.quiet)
    size = sum(p.stat().st_size for p in group_dir.rglob("*") if p.is_file())
    files = sum(1 for p in group_dir.rglob("*") if p.is_file())
    print(f"Wrote {group_dir}: {files} files, {size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
