"""The Compare page's reads, through :class:`~app.data.AppData` and the query API only:
the trials table, the quantities the selected trials share (KPIs, a tensor's statistic,
per-module metrics), one quantity of one trial as a series, and the first divergence of
two trials. Everything is cached in AppData's one cache under keys holding the trials'
data versions, so a refresh that finds new data makes it stale by construction.

A quantity is a small JSON-able list (the value of the page's dropdown):
``["kpi", kpi_group, kpi_name]``, ``["tensor", iteration, node, role, recording_type,
aggregation]`` (with a statistic chosen beside it) or ``["metric", module, metric]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from comgra_like.analysis import SEVERITIES
from comgra_like.analysis.core import where as finding_where
from comgra_like.query.trials import CONFIG_PREFIX, FINDINGS_PREFIX, table_of_rows, trial_row
from comgra_like.vocabulary import BATCH_MEAN, FORWARD, NO_BATCH, STATISTIC_LABELS

from . import compare_figures as cf
from . import selection as sel
from .views import graph_model

KPI, TENSOR, METRIC = "kpi", "tensor", "metric"
KINDS = (KPI, TENSOR, METRIC)
#: A tensor is offered with the first of these aggregations it has (one line per trial).
TENSOR_AGGREGATIONS = (BATCH_MEAN, NO_BATCH)
#: The ticked trials' series are read in at most this many threads at once.
READERS = 4


def versions(data: Any, trials: Sequence[str]) -> tuple:
    return tuple((t, data.trial_version(t)) for t in trials)


def trials_frame(data: Any) -> pd.DataFrame:
    """``Group.read_trials`` of the whole group, without findings (:func:`with_findings`
    adds them).

    Built row by row, each row cached per trial and data version: while a sweep runs, a
    refresh that finds new data in one trial reads that trial's row again, not 200."""
    if data.group is None:
        return pd.DataFrame(columns=["trial_id"])
    infos = data.group.list_trials()
    key = ("compare-trials", versions(data, [i.trial_id for i in infos]))
    return data.cached(key, lambda: _table(data, infos))


def _table(data: Any, infos: Sequence[Any]) -> pd.DataFrame:
    # rows as dicts, one DataFrame at the end (a one-row frame per trial and their concat
    # took seconds for 2,000 trials)
    rows = [data.cached(("compare-row", i.trial_id, data.trial_version(i.trial_id)),
                        lambda i=i: trial_row(data.group, i))
            for i in infos]
    return table_of_rows(rows, False)


def findings_counts(data: Any, trials: Sequence[str], wait: float
                    ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """(the findings of the trials scanned so far counted by severity, by trial; the
    trials still waiting to be scanned). The scan runs in the background thread the
    Findings page uses (``AppData.gather_findings``: each trial once per data version),
    waited for at most ``wait`` seconds; ask again for the rest."""
    found, waiting = data.gather_findings(list(trials), wait)
    counts = {}
    for trial, findings in found.items():
        out = dict.fromkeys(SEVERITIES, 0)
        for f in findings:
            out[f["severity"]] = out.get(f["severity"], 0) + 1
        counts[trial] = out
    return counts, waiting


def with_findings(frame: pd.DataFrame, counts: dict[str, dict[str, int]]) -> pd.DataFrame:
    """The table with the columns ``findings.error/warning/info``: the counts of the
    trials in ``counts``, empty (NA) for the trials not counted yet."""
    out = frame.copy()
    trials = out["trial_id"].tolist()
    for severity in ("error", "warning", "info"):
        out[FINDINGS_PREFIX + severity] = pd.array(
            [counts[t].get(severity, 0) if t in counts else None for t in trials],
            dtype="Int64")
    return out


def config_keys(frame: pd.DataFrame) -> list[str]:
    """The config keys of the table (without the ``config.`` prefix)."""
    prefix = CONFIG_PREFIX
    return [c[len(prefix):] for c in frame.columns if c.startswith(prefix)]


def config_values(frame: pd.DataFrame, key: str) -> dict[str, Any]:
    column = CONFIG_PREFIX + key
    if column not in frame.columns:
        return {}
    return dict(zip(frame["trial_id"], frame[column]))


def encode(quantity: Sequence[Any]) -> str:
    return json.dumps(list(quantity), separators=(",", ":"))


def decode(value: str | None) -> list | None:
    if not value:
        return None
    try:
        quantity = json.loads(value)
    except ValueError:
        return None
    return quantity if isinstance(quantity, list) and quantity and quantity[0] in KINDS \
        else None


def quantity_label(quantity: Sequence[Any], statistic: str | None = None) -> str:
    kind = quantity[0]
    if kind == KPI:
        return f"KPI {quantity[1]}" + (f" · {quantity[2]}" if quantity[2] else "")
    if kind == METRIC:
        return f"{quantity[2]} of {quantity[1]}"
    _, iteration, node, role, rt, agg = quantity
    role_text = "" if role == node else f" ({role})"
    it = "" if int(iteration) < 0 else f" it {iteration}"
    return (f"{statistic or 'mean'} of {node}{role_text}{it} · "
            f"{sel.option_label('recording_type', rt)} · {sel.option_label('aggregation', agg)}")


def quantity_options(data: Any, trials: Sequence[str], kind: str) -> list[dict[str, str]]:
    """The quantities of ``kind`` found in the selected trials (KPIs and metrics: of any
    of them; tensors: those of the first trial's last recorded step)."""
    trials = [t for t in trials if t in set(data.trial_ids())]
    if not trials or data.group is None:
        return []
    key = ("compare-options", kind, versions(data, trials))
    return data.cached(key, lambda: _options(data, trials, kind))


def _options(data: Any, trials: Sequence[str], kind: str) -> list[dict[str, str]]:
    found: list[list] = []
    if kind == KPI:
        pairs = set()
        for t in trials:
            kpis = data.kpis(t)
            if len(kpis):
                pairs |= set(zip(kpis["kpi_group"].astype(str), kpis["kpi_name"].astype(str)))
        found = [[KPI, g, n] for g, n in sorted(pairs)]
    elif kind == METRIC:
        pairs = set()
        for t in trials:
            listed = data.group.list_metrics(t)
            pairs |= set(zip(listed["module"].astype(str), listed["metric"].astype(str)))
        found = [[METRIC, m, name] for m, name in sorted(pairs)]
    elif kind == TENSOR:
        steps = data.steps(trials[0])
        recorded = sorted(steps) if len(steps) else []
        if recorded:
            index = data.tensor_index(trials[0], int(recorded[-1]))
            for (it, node, role), by_type in index.items():
                for rt in sorted(by_type, key=sel.recording_type_sort_key):
                    agg = next((a for a in TENSOR_AGGREGATIONS if a in by_type[rt]), None)
                    if agg is not None:
                        found.append([TENSOR, it, node, role, rt, agg])
            found.sort(key=lambda q: (sel.recording_type_sort_key(q[4]), q[2], q[3], q[1]))
    return [{"label": quantity_label(q).replace("mean of ", "", 1) if q[0] == TENSOR
             else quantity_label(q), "value": encode(q)} for q in found]


def series(data: Any, trial: str, quantity: Sequence[Any], statistic: str = "mean"
           ) -> cf.Series:
    """One quantity of one trial over its recorded steps (empty arrays: none)."""
    key = ("compare-series", trial, data.trial_version(trial), tuple(quantity), statistic)
    empty = (np.zeros(0, np.int64), np.zeros(0))

    def read() -> cf.Series:
        frame = _read(data, trial, quantity, statistic)
        if frame is None or frame.empty:
            return empty
        return cf.as_series(frame.iloc[:, 0].to_numpy(), frame.iloc[:, 1].to_numpy())

    return data.cached(key, lambda: data.safely(
        f"{quantity_label(quantity, statistic)} of {trial}", read, empty))


def series_of(data: Any, trials: Sequence[str], quantity: Sequence[Any],
              statistic: str = "mean") -> dict[str, cf.Series]:
    """:func:`series` of several trials, read in up to :data:`READERS` threads (the
    Parquet reads release the GIL: 20 trials' tensor read in ~0.15 s instead of ~0.29 s
    at load 2.6 on 2 cores); trials in their order."""
    trials = list(trials)
    if len(trials) < 2:
        return {t: series(data, t, quantity, statistic) for t in trials}
    with ThreadPoolExecutor(min(READERS, len(trials)), thread_name_prefix="comgra-compare"
                            ) as pool:
        found = list(pool.map(lambda t: series(data, t, quantity, statistic), trials))
    return dict(zip(trials, found))


def _read(data: Any, trial: str, quantity: Sequence[Any], statistic: str
          ) -> pd.DataFrame | None:
    kind = quantity[0]
    group = data.group
    if kind == KPI:
        kpis = data.kpis(trial)
        if kpis.empty:
            return None
        chosen = kpis[(kpis["kpi_group"].astype(str) == quantity[1])
                      & (kpis["kpi_name"].astype(str) == quantity[2])]
        return chosen.sort_values("timepoint", kind="stable")[["timepoint", "value"]]
    if kind == METRIC:
        frame = group.read_metrics(trial, module=quantity[1], metric=quantity[2])
        return frame[["training_step", "value"]]
    return tensor_statistics(data, trial, quantity)[["training_step", statistic]]


def tensor_statistics(data: Any, trial: str, quantity: Sequence[Any]) -> pd.DataFrame:
    """Every statistic the page offers (``selection.SERIES_STATISTICS``) of one tensor
    quantity of one trial over its steps: ONE read, cached per data version, so that
    choosing another statistic reads nothing (20 trials: ~0.4 s of reads at load 5 before,
    each time)."""
    key = ("compare-tensor", trial, data.trial_version(trial), tuple(quantity))

    def read() -> pd.DataFrame:
        _, iteration, node, role, rt, agg = quantity
        wanted = list(sel.SERIES_STATISTICS)
        # as Arrow, only the columns used to numpy: a pandas frame of every column took
        # a third of the read's time
        table = data.group.read_statistics(trial, nodes=node, roles=role, recording_types=rt,
                                           aggregations=agg, iterations=int(iteration),
                                           statistics=wanted, as_pandas=False)
        columns = {c: table.column(c).to_numpy(zero_copy_only=False)
                   for c in ["training_step", *wanted]}
        if "sample_index" in table.column_names:
            batch = table.column("sample_index").to_numpy(zero_copy_only=False) < 0
            columns = {c: values[batch] for c, values in columns.items()}
        return pd.DataFrame(columns)

    return data.cached(key, read)


def divergence(data: Any, trial_a: str, trial_b: str, tolerance: float = 1e-5
               ) -> dict[str, Any]:
    """``first_divergence`` of two trials as a dict: ``text`` (the explanation, or why
    there is none), ``where_a``/``where_b`` (the Tensors page's selection of the named
    tensor in each trial; None without a divergence)."""
    key = ("compare-divergence", versions(data, [trial_a, trial_b]), tolerance)

    def compute() -> dict[str, Any]:
        from comgra_like.analysis import first_divergence
        from comgra_like.errors import ComgraError

        try:
            found = first_divergence(data.group, trial_a, trial_b, tolerance=tolerance)
        except ComgraError as e:
            return {"text": f"Not compared: {e}", "where_a": None, "where_b": None}
        if found is None:
            return {"text": f"{trial_a!r} and {trial_b!r} agree on every step both "
                            f"recorded (tolerance {tolerance:g}).",
                    "where_a": None, "where_b": None, "step": None}
        place = {"step": found.step, "iteration": found.iteration, "node": found.node,
                 "role": found.role, "recording_type": found.recording_type,
                 "aggregation": found.aggregation, "sample_index": found.sample_index,
                 "statistic": found.statistic if found.statistic in
                 sel.SERIES_STATISTICS else None}
        return {"text": found.explain(), "step": found.step,
                "where_a": finding_where(trial_a, **place),
                "where_b": finding_where(trial_b, **place)}

    return data.cached(key, compute)


def common_steps(data: Any, trial_a: str, trial_b: str) -> list[int]:
    """The training steps both trials recorded, ascending."""
    both = np.intersect1d(data.steps(trial_a).steps, data.steps(trial_b).steps)
    return [int(s) for s in both]


def difference_defaults(found: dict[str, Any] | None, steps: Sequence[int]
                        ) -> tuple[int | None, str, str]:
    """(step, statistic, recording type) the difference is painted with at first: the
    first divergence's place (``found``: :func:`divergence`; its statistic when the graph
    can be painted with it, else the mean), else the last step both trials recorded,
    the mean of the forward values."""
    where = (found or {}).get("where_a")
    if where and where.get("training_step") is not None:
        return (int(where["training_step"]), where.get("statistic") or "mean",
                where.get("recording_type") or FORWARD)
    return (int(steps[-1]) if len(steps) else None), "mean", FORWARD


def recording_types(data: Any, trial: str, statistic: str) -> list[str]:
    """The recording types of ``statistic`` that ``trial`` holds (forward first)."""
    table = data.statistic_table(trial, statistic)
    if table is None:
        return []
    return sorted(table.recording_types(), key=sel.recording_type_sort_key)


def difference_label(statistic: str, recording_type: str) -> str:
    return (f"relative difference of {STATISTIC_LABELS.get(statistic, statistic)} · "
            f"{sel.option_label('recording_type', recording_type)}")


def difference_graph(data: Any, trial_a: str, trial_b: str, step: int,
                     statistic: str = "mean", recording_type: str = FORWARD
                     ) -> tuple[Any, Any] | None:
    """Trial A's graph at ``step`` (its last iteration) and its Paint: each node by the
    relative difference ``|a - b| / max(|a|, |b|)`` between A and B of ``statistic`` of
    ``recording_type``, batch mean (tensors without a batch dimension: their own), on
    :func:`difference_scale` (every step both recorded). None: A has no graph at that
    step, or either trial no statistics there."""
    info = data.steps(trial_a).get(step) if step is not None else None
    if info is None or not info.graph_hashes:
        return None
    iteration = max(info.graph_hashes)
    model = graph_model(data, trial_a, step, iteration)
    values = [data.node_values(t, step, iteration, statistic, recording_type, BATCH_MEAN)
              for t in (trial_a, trial_b)]
    if model is None or values[0] is None or values[1] is None:
        return None
    scale = difference_scale(data, trial_a, trial_b, statistic, recording_type)
    return model, cf.difference_paint(values[0], values[1],
                                      difference_label(statistic, recording_type), step,
                                      scale)


def difference_scale(data: Any, trial_a: str, trial_b: str, statistic: str,
                     recording_type: str) -> Any:
    """The colour scale of the relative differences of ``statistic`` of
    ``recording_type`` (batch mean) between the two trials over every tensor row of
    every step both recorded (``cf.difference_scale``'s rules), so that a colour means
    the same difference at every step; None: no row in common."""
    key = ("compare-difference-scale", versions(data, [trial_a, trial_b]), statistic,
           recording_type)

    def compute() -> Any:
        rows = [_rows_of(data.statistic_table(t, statistic), recording_type)
                for t in (trial_a, trial_b)]
        if rows[0] is None or rows[1] is None:
            return False
        both = rows[0].merge(rows[1], on=["step", "iteration", "node", "role"],
                             suffixes=("_a", "_b"))
        return cf.difference_scale(cf.relative_differences(both["value_a"], both["value_b"])
                                   ) or False

    return data.cached(key, compute) or None


def _rows_of(table: Any, recording_type: str) -> pd.DataFrame | None:
    """A statistic table's recorded values of ``recording_type``, batch mean or without
    a batch dimension, with their step, iteration, node and role."""
    if table is None or recording_type not in table.names["recording_type"]:
        return None
    aggregations = table.names["aggregation"]
    wanted = [aggregations.index(a) for a in (BATCH_MEAN, NO_BATCH) if a in aggregations]
    chosen = ((table.codes["recording_type"]
               == table.names["recording_type"].index(recording_type))
              & np.isin(table.codes["aggregation"], wanted) & ~table.missing)
    nodes = np.asarray(table.names["node"], dtype=object)
    roles = np.asarray(table.names["role"], dtype=object)
    return pd.DataFrame({"step": table.steps[chosen], "iteration": table.iterations[chosen],
                         "node": nodes[table.codes["node"][chosen]],
                         "role": roles[table.codes["role"][chosen]],
                         "value": table.values[chosen]})
