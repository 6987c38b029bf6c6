"""Regenerate ``example_runs/tutorial``: a small committed recording of the tutorial.

    python benchmarks/make_example_run.py            # writes example_runs/ of this checkout
    python benchmarks/make_example_run.py --out DIR  # writes DIR/tutorial

The recording has two uses. It lets people open the GUI on real data without training
anything (``comgra --path example_runs/tutorial``), and it is a fixture for
``tests/test_example_run.py``: recordings written by an older version must stay
readable, so a change of the storage format that breaks them fails CI.

It is deterministic: the same seed, data, batches and recorded steps every time (file
contents differ only in wall-clock times and version strings). To stay at about 2 MB it
trains 600 steps per trial but records only three of them: step 4 (05_iterations, at
the start), and steps 590 (03_iterations) and 592 (05_iterations) near the end, when the
bug is already visible in subnet_out's output. KPIs and notes cover every step.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from comgra_like.scripts.tutorial import run_tutorial_with_summaries

GROUP = "tutorial"
STEPS = 600
RECORD_STEPS = (4, 590, 592)
SEED = 0


def default_output_root() -> Path | None:
    """``example_runs/`` of the checkout this file lives in, None if not in a checkout."""
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").is_file() and (repo / "example_runs").is_dir():
        return repo / "example_runs"
    return None


def make_example_run(root: str | Path, progress: bool = False) -> Path:
    """Write the example group to ``<root>/tutorial`` (replacing it); return that path."""
    group_dir = Path(root) / GROUP
    if group_dir.exists():
        if any(group_dir.iterdir()) and not (group_dir / "trials").is_dir():
            raise SystemExit(f"{group_dir} does not look like a recording; not deleting it")
        shutil.rmtree(group_dir)  # no stale trials or shards from an older run
    group_dir, summaries = run_tutorial_with_summaries(
        root, GROUP, steps=STEPS, seed=SEED, progress=progress, record_steps=RECORD_STEPS
    )
    for s in summaries:
        print(f"{s.trial_id}: final training loss {s.final_training_loss:.3f}, "
              f"test loss {s.final_test_loss:.3f}")
    return group_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="directory to write the group 'tutorial' into "
                             "(default: example_runs/ of this checkout)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    root = args.out or default_output_root()
    if root is None:
        print("not inside a checkout: say where to write with --out DIR", file=sys.stderr)
        return 2
    group_dir = make_example_run(root, progress=not args.quiet)
    size = sum(p.stat().st_size for p in group_dir.rglob("*") if p.is_file())
    files = sum(1 for p in group_dir.rglob("*") if p.is_file())
    print(f"Wrote {group_dir}: {files} files, {size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
