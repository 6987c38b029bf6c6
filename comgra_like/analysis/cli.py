"""``comgra findings``: print the findings of a group and fail when one is severe enough.

comgra findings --path GROUP [--trial T] [--json] [--fail-on info|warning|error]

Exit status: 0 when no finding is as severe as ``--fail-on`` (default error), 1 when one
is, 2 when the group or trial cannot be read. A training script or CI can stop on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO

from ..errors import ComgraError
from ..query import open_group
from . import find
from .core import ERROR, SEVERITIES, Finding, at_least


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comgra findings",
        description="Look through recordings for the first NaN/Inf and where it came from, "
        "vanishing and exploding gradients, oversized updates, dead and saturated units, "
        "loss spikes, outlier samples and what the per-sample loss goes with.",
    )
    parser.add_argument("--path", type=Path, required=True,
                        help="the group folder: <comgra_root_path>/<group> of the recorder")
    parser.add_argument("--trial", default=None, help="only this trial (default: every trial)")
    parser.add_argument("--json", action="store_true",
                        help="print the findings as JSON (one object) instead of text")
    parser.add_argument("--fail-on", choices=SEVERITIES, default=ERROR,
                        help="exit with status 1 when a finding of this severity or a more "
                        f"severe one exists (default {ERROR})")
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = sys.stdout if out is None else out
    path = args.path.expanduser().absolute()
    try:
        group = open_group(path)
        trials = [t.trial_id for t in group.list_trials()]
        if args.trial is not None and args.trial not in trials:
            known = ", ".join(trials) if trials else "none"
            print(f"comgra findings: error: {path} has no trial {args.trial!r} (trials: "
                  f"{known})", file=sys.stderr)
            return 2
        if not trials:
            print(f"comgra findings: error: {path} holds no trials; pass a group folder "
                  "(<comgra_root_path>/<group>) a recorder has written to", file=sys.stderr)
            return 2
        findings = find(group, args.trial)
    except ComgraError as e:
        print(f"comgra findings: error: {e}", file=sys.stderr)
        return 2
    failing = at_least(findings, args.fail_on)
    # Damaged files are left out of the scan: say so, a finding may hide in them.
    skipped = [{"path": s.path, "reason": s.reason} for s in group.skipped]
    for s in skipped:
        print(f"comgra findings: warning: skipped a damaged file, its data is not scanned: "
              f"{s['path']}: {s['reason']}", file=sys.stderr)
    if args.json:
        json.dump({"group": str(path), "trials": [args.trial] if args.trial else trials,
                   "fail_on": args.fail_on, "failed": bool(failing),
                   "counts": _counts(findings), "skipped_files": skipped,
                   "findings": [f.to_dict() for f in findings]}, out, indent=2)
        out.write("\n")
    else:
        _print_text(findings, path, out)
    return 1 if failing else 0


def _counts(findings: list[Finding]) -> dict[str, int]:
    counted = Counter(f.severity for f in findings)
    return {s: counted.get(s, 0) for s in reversed(SEVERITIES)}


def _print_text(findings: list[Finding], path: Path, out: TextIO) -> None:
    if not findings:
        out.write(f"No findings in {path}.\n")
        return
    for f in findings:
        steps = ("" if not f.steps else f" step {f.steps[0]}" if len(f.steps) == 1
                 else f" steps {f.steps[0]}–{f.steps[-1]} ({len(f.steps)})")
        where = f" {f.node}" if f.node else ""
        if f.role and f.role != f.node:
            where += f" [{f.role}]"
        out.write(f"{f.severity.upper():8} {f.kind}  {f.trial_id}{steps}{where}\n")
        out.write(f"         {f.explanation}\n")
    summary = ", ".join(f"{n} {s}" for s, n in _counts(findings).items() if n)
    out.write(f"{len(findings)} findings in {path}: {summary}.\n")
