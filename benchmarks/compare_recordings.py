"""Compare two recordings of the same training run, row by row (not byte by byte).

    python benchmarks/compare_recordings.py GROUP_A GROUP_B

Used to check that a change of the recorder or the writer records the same data: record
the tutorial with a fixed seed before and after the change (``comgra-test-run --steps
300 --path DIR --quiet`` with each version), then compare. Wall times, creation times and
version strings differ between any two runs and are left out; everything else (every
row of steps, tensors and KPIs, sorted; graph structures; modules; notes' text and step;
trial settings) must be equal. Prints what differs and exits 1 if anything does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

IGNORED_COLUMNS = {"wall_time"}
IGNORED_TRIAL_FIELDS = {"created", "versions", "ended"}


def _table(folder: Path) -> pa.Table | None:
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))
    if not files:
        return None
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    keep = [c for c in table.column_names if c not in IGNORED_COLUMNS]
    table = table.select(keep)
    # Dictionary columns compare by value, rows in a canonical order.
    table = pa.table({c: (table[c].cast(table[c].type.value_type)
                          if pa.types.is_dictionary(table[c].type) else table[c])
                      for c in table.column_names})
    sortable = [c for c in table.column_names
                if not pa.types.is_list(table[c].type) and not pa.types.is_large_list(
                    table[c].type)]
    return table.sort_by([(c, "ascending") for c in sortable])


def _notes(trial: Path) -> list:
    notes = []
    legacy = trial / "notes.jsonl"
    if legacy.exists():
        for line in legacy.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                notes.append((d.get("text"), d.get("training_step")))
    table = _table(trial / "notes") if (trial / "notes").is_dir() else None
    if table is not None:
        notes += list(zip(table["text"].to_pylist(), table["training_step"].to_pylist()))
    return sorted(notes, key=repr)


def compare_trials(a: Path, b: Path) -> list[str]:
    problems = []
    info_a = json.loads((a / "trial.json").read_text(encoding="utf-8"))
    info_b = json.loads((b / "trial.json").read_text(encoding="utf-8"))
    for key in sorted((set(info_a) | set(info_b)) - IGNORED_TRIAL_FIELDS):
        if info_a.get(key) != info_b.get(key):
            problems.append(f"{a.name}: trial.json {key}: {info_a.get(key)!r} != "
                            f"{info_b.get(key)!r}")
    for name in ("modules.json",):
        if json.loads((a / name).read_text()) != json.loads((b / name).read_text()):
            problems.append(f"{a.name}: {name} differs")
    graphs_a = {p.name: json.loads(p.read_text()) for p in (a / "graphs").glob("*.json")}
    graphs_b = {p.name: json.loads(p.read_text()) for p in (b / "graphs").glob("*.json")}
    if graphs_a != graphs_b:
        problems.append(f"{a.name}: graph structures differ ({len(graphs_a)} vs {len(graphs_b)})")
    if _notes(a) != _notes(b):
        problems.append(f"{a.name}: notes differ")
    for kind in ("steps", "tensors", "kpis"):
        ta, tb = _table(a / kind), _table(b / kind)
        if ta is None or tb is None:
            if (ta is None) != (tb is None):
                problems.append(f"{a.name}: {kind}: present in one recording only")
            continue
        if ta.schema != tb.schema:
            problems.append(f"{a.name}: {kind}: schemas differ:\n{ta.schema}\n{tb.schema}")
        elif not ta.equals(tb):
            problems.append(f"{a.name}: {kind}: {ta.num_rows} vs {tb.num_rows} rows, contents "
                            "differ")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    group_a, group_b = (Path(p) for p in argv)
    trials_a = sorted(p.name for p in (group_a / "trials").iterdir() if p.is_dir())
    trials_b = sorted(p.name for p in (group_b / "trials").iterdir() if p.is_dir())
    problems = []
    if trials_a != trials_b:
        problems.append(f"trials differ: {trials_a} vs {trials_b}")
    for trial in sorted(set(trials_a) & set(trials_b)):
        problems += compare_trials(group_a / "trials" / trial, group_b / "trials" / trial)
    for p in problems:
        print(p)
    print("same rows" if not problems else f"{len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
