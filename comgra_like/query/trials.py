"""The trials table: one row per trial of a group, for comparing runs (a sweep, A/B
variants): status, ranks, recorded steps, the trial's config, the last value of each KPI
and, on request, the findings by severity.

Columns, in this order:
- ``trial_id``, ``status``, ``created`` (unix time), ``ranks`` (how many recorded),
  ``steps_recorded``, ``first_step``, ``last_step`` (None without steps);
- ``config.<key>`` for every key any trial's config has (dotted keys as stored; missing
  in a trial: None), sorted;
- ``kpi.<kpi group>`` or ``kpi.<kpi group>.<kpi name>``: the value of the KPI at its
  largest timepoint (over every type of execution), sorted;
- with ``findings=...``: ``findings.error``, ``findings.warning``, ``findings.info``.

Everything comes from what the index already holds (trial.json, the steps and KPI
shards); nothing reads tensor values, so a table of hundreds of trials is quick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

FIXED_COLUMNS = ("trial_id", "status", "created", "ranks", "steps_recorded", "first_step",
                 "last_step")
CONFIG_PREFIX = "config."
KPI_PREFIX = "kpi."
FINDINGS_PREFIX = "findings."


def kpi_column(kpi_group: str, kpi_name: str) -> str:
    return KPI_PREFIX + kpi_group + (f".{kpi_name}" if kpi_name else "")


def trials_table(group, findings: Mapping[str, Mapping[str, int]] | Callable | None = None
                 ) -> pd.DataFrame:
    """The table for ``group`` (a ``Group``). ``findings``: counts per trial and severity
    (``{trial_id: {"error": 1, ...}}``), or a callable ``trial_id -> counts``."""
    counts = None
    if findings is not None:
        counts = findings if callable(findings) else (lambda t: findings.get(t, {}))
    rows = [trial_row(group, info, counts) for info in group.list_trials()]
    return table_of_rows(rows, findings is not None)


def trial_row(group, info, findings: Callable | None = None) -> dict[str, Any]:
    """One trial's row of the table as a dict (``info``: its ``TrialInfo``; ``findings``:
    ``trial_id -> counts by severity``). Cheap: numbers the index holds, no frames."""
    trial = info.trial_id
    ranks = group.list_ranks(trial)  # once: the summaries read the lowest rank
    low = ranks[0] if ranks else 0
    recorded, first, last = group.step_summary(trial, low)
    row: dict[str, Any] = {
        "trial_id": trial, "status": info.status, "created": info.created,
        "ranks": len(ranks), "steps_recorded": recorded,
        "first_step": first, "last_step": last,
    }
    for key, value in info.config.items():
        row[CONFIG_PREFIX + key] = value if not isinstance(value, list) else str(value)
    for (kpi_group, kpi_name), value in group.last_kpis(trial, low).items():
        row[kpi_column(kpi_group, kpi_name)] = value
    if findings is not None:
        counts = findings(trial)
        for severity in ("error", "warning", "info"):
            row[FINDINGS_PREFIX + severity] = int(counts.get(severity, 0))
    return row


def table_of_rows(rows: Sequence[Mapping[str, Any]], with_findings: bool) -> pd.DataFrame:
    """The table of rows made by :func:`trial_row`, its columns in the documented order."""
    named = {c for row in rows for c in row}
    columns = (list(FIXED_COLUMNS) + sorted(c for c in named if c.startswith(CONFIG_PREFIX))
               + sorted(c for c in named if c.startswith(KPI_PREFIX)))
    if with_findings:
        columns += [FINDINGS_PREFIX + s for s in ("error", "warning", "info")]
    frame = pd.DataFrame(list(rows), columns=columns)
    for column in ("first_step", "last_step"):
        frame[column] = frame[column].astype("Int64")
    return frame
