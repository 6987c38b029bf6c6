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

from collections.abc import Callable, Mapping
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
    rows: list[dict[str, Any]] = []
    config_keys: set[str] = set()
    kpi_keys: set[str] = set()
    for info in group.list_trials():
        trial = info.trial_id
        recorded, first, last = group.step_summary(trial)
        row: dict[str, Any] = {
            "trial_id": trial, "status": info.status, "created": info.created,
            "ranks": len(group.list_ranks(trial)), "steps_recorded": recorded,
            "first_step": first, "last_step": last,
        }
        for key, value in info.config.items():
            column = CONFIG_PREFIX + key
            row[column] = value if not isinstance(value, list) else str(value)
            config_keys.add(column)
        for (kpi_group, kpi_name), value in group.last_kpis(trial).items():
            column = kpi_column(kpi_group, kpi_name)
            row[column] = value
            kpi_keys.add(column)
        if findings is not None:
            counts = findings(trial) if callable(findings) else findings.get(trial, {})
            for severity in ("error", "warning", "info"):
                row[FINDINGS_PREFIX + severity] = int(counts.get(severity, 0))
        rows.append(row)
    columns = list(FIXED_COLUMNS) + sorted(config_keys) + sorted(kpi_keys)
    if findings is not None:
        columns += [FINDINGS_PREFIX + s for s in ("error", "warning", "info")]
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("first_step", "last_step"):
        frame[column] = frame[column].astype("Int64")
    return frame
