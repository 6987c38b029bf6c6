"""``comgra diff``: where two trials (or two ranks of one trial) first differ.

comgra diff --path GROUP TRIAL_A [TRIAL_B] [--rank-a R --rank-b R] [--tolerance T]
            [--atol A] [--json]

Exit status: 0 when the recordings agree on every step both recorded, 1 when they
differ (the first difference is printed), 2 when the group, a trial or a rank cannot be
read. Needs numpy and pandas through the query API; never torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from ..errors import ComgraError
from .divergence import first_divergence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comgra diff",
        description="The first recorded step where two trials (or two ranks of one trial) "
        "differ beyond a tolerance, and the first tensor in graph order at that step "
        "(forward values, then gradients traced backwards, then updates).")
    parser.add_argument("--path", required=True,
                        help="the group folder (<comgra_root_path>/<group>) or s3://...")
    parser.add_argument("trial_a")
    parser.add_argument("trial_b", nargs="?", default=None,
                        help="the other trial (leave out, with --rank-a/--rank-b, to "
                        "compare two ranks of TRIAL_A)")
    parser.add_argument("--rank-a", type=int, default=None)
    parser.add_argument("--rank-b", type=int, default=None)
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="relative to the tensor's abs max (default 1e-5; 0 finds the "
                        "first bitwise difference)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute slack (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = sys.stdout if out is None else out
    path = args.path if args.path.startswith("s3://") else str(
        Path(args.path).expanduser().absolute())
    try:
        found = first_divergence(path, args.trial_a, args.trial_b, tolerance=args.tolerance,
                                 atol=args.atol, rank_a=args.rank_a, rank_b=args.rank_b)
    except ComgraError as e:
        print(f"comgra diff: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"divergence": None if found is None else found.to_dict()}), file=out)
    elif found is None:
        print("No difference beyond the tolerance on any step both recorded.", file=out)
    else:
        print(found.explain(), file=out)
    return 0 if found is None else 1
