"""Exploding and vanishing gradients, along the graph and over the steps, and parameter
updates out of proportion to their weights.

Along the graph: for each recorded step and iteration, the gradient of every batched
tensor (calculated or input) is measured by its root mean square per value,
``norm / sqrt(numel)`` of its ``batch_mean`` row (the per-sample L2 norm averaged over
the batch), which makes tensors of different sizes comparable. A tensor's *gain* is its
gradient RMS divided by the largest gradient RMS among the tensors that depend on it in
the step's dependency graph: how much of the gradient arriving from downstream is left
(below 1) or how much more there is (above 1) once it has flowed back to this tensor.
The batch dimension's mean in the loss scales every batched gradient alike, so it
cancels.

A small gain alone is not a vanishing gradient: the query and key projections of
attention get little gradient by construction (the softmax's Jacobian and 1/sqrt(d)),
as does a branch scaled by a small learnable factor (ConvNeXt's LayerScale, initialised
at 1e-6), while the hidden states they are computed from get a full gradient through
the value path and the residual connection. A gradient has vanished when it does not
reach the inputs of the computation: so the finding is judged on the tensor's *reach*,
the largest gradient RMS among the tensor and every tensor it depends on, divided by the
same downstream reference. In a chain (a stack of sigmoids) the reach is the gain; on a
side branch it is the gain of the branch's sources. A reach whose median over the
recorded steps is below 1e-4 is reported as vanishing (warning; what a deep stack of
sigmoids does: each one passes at most a quarter), below 1e-3 as a hint (info); a gain
above 1e4 (1e3) as exploding. ``gain_table`` lists both medians of every tensor.

Calibration: the tutorial's fixed trial has no gain below 2.3e-3 (its sigmoid and the
MSE on 5 outputs already take a factor of ~500 between the per-sample loss and the last
hidden layer); the bugged trial, whose LeakyReLU after the output layer passes 1 % of
the gradient of negative outputs, has 3.9e-4 there; 12 stacked sigmoids have 4e-11.
On the healthy real models of tests/realmodels (8 AdamW steps from the initialisation)
the gains of BERT's query/key projections are down to 7e-7, Whisper's to 2e-6, ViT's
to 6e-5, ConvNeXt's LayerScale branch to 2e-8 (warnings before the reach), while every
reach stays above 1e-3 but that of Whisper's encoder convolutions (4e-4, an info hint:
at initialisation the encoder reaches the loss through the cross-attention alone).
Tensors whose gradient is exactly 0 are left out: nothing reaches them (a branch the
loss does not use), which is not a gradient that shrank.

Over the steps: for each tensor and parameter (per type of execution and iteration) the
gradient RMS of each recorded step relative to the median of its first three recorded
steps. Growth beyond 1e3 is reported as exploding (warning; beyond 1e6 an error): a loss
that decreases does not make gradients grow a thousandfold. A median over the last
quarter of the steps below 1e-4 of the first quarter's is reported as vanishing over
training.

Updates: ``update_ratio`` is ||update|| / ||weight before the update||, recorded for
every parameter on every recorded step. The common rule of thumb is about 1e-3 per
step; Adam at its default learning rate on freshly initialised layers gives 1e-3 to
2e-2 (the tutorial: 1.7e-3 to 1.7e-2). A parameter whose ratio is above 0.1 at most of
its recorded steps after step 0 (the median) has a learning rate too large for it: each
step rewrites a tenth of the weights' size (warning). A single step above 0.1 is not
enough, nor the first update of training: Adam's first step moves every weight by the
learning rate whatever its gradient, 0.1 of the weights' RMS for GPT-2's scaled
initialisation (std 0.02 / sqrt(2 layers)) at lr 1e-3, and 0.07, 0.06, ... after it;
with only step 0 recorded (watch's log_freq on a short run) its ratio says what
lr / RMS(w) is, not whether training is stable. Above 1 at any step, step 0 included,
the update replaces the weights by something larger than themselves (error). A median
below 1e-7 (steps without an update, ratio exactly 0, such as evaluation steps, left
out) means the parameter practically does not learn (info). Non-finite ratios (a weight
of norm 0 at initialisation, or non-finite values, which ``first_non_finite`` reports)
are left out.
Only weights with two or more dimensions are judged: biases and gains start at or near 0
and are small, so their ratios are large in healthy training and say little.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..vocabulary import BATCH_MEAN, CALCULATED, INPUT, NO_BATCH, PARAMETER, UPDATE
from .core import ERROR, INFO, WARNING, Finding, TrialData, fmt, where

VANISHING, EXPLODING = "vanishing_gradient", "exploding_gradient"
VANISHING_OVER_STEPS, EXPLODING_OVER_STEPS = "vanishing_over_steps", "exploding_over_steps"
UPDATE_RATIO_HIGH, UPDATE_RATIO_LOW = "update_ratio_high", "update_ratio_low"

GAIN_LOW, GAIN_HIGH = 1e-3, 1e3  # info
GAIN_WARNING_LOW, GAIN_WARNING_HIGH = 1e-4, 1e4
GROWTH_WARNING, GROWTH_ERROR = 1e3, 1e6
SHRINK = 1e-4
UPDATE_WARNING, UPDATE_ERROR, UPDATE_LOW = 0.1, 1.0, 1e-7
BASELINE_STEPS = 3
MIN_STEPS_OVER_TIME = 8


def detect(data: TrialData) -> list[Finding]:
    return [*along_graph(data), *over_steps(data), *update_ratios(data)]


# --- along the graph ----------------------------------------------------------------------


def _rms(rows: pd.DataFrame) -> np.ndarray:
    numel = rows["numel"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(numel > 0, rows["norm"].to_numpy(np.float64) / np.sqrt(numel), np.nan)


def along_graph(data: TrialData) -> list[Finding]:
    findings = []
    for recording_type, (gains, names) in _graph_gains(data).items():
        findings += _gain_findings(data, recording_type, gains, names)
    return findings


def gain_table(data: TrialData) -> pd.DataFrame:
    """Every tensor's gains along the graph: recording_type, node, role, iteration,
    median_gain (its gradient RMS over the largest of the tensors depending on it) and
    median_reach (the same with the largest gradient among the tensor and everything it
    is computed from), medians over the recorded steps; what the vanishing and exploding
    findings are judged on, for calibrating them."""
    out = []
    for recording_type, (gains, names) in _graph_gains(data).items():
        for col, series in gains.items():
            node, role, iteration = names[col]
            out.append({"recording_type": recording_type, "node": node, "role": role,
                        "iteration": iteration,
                        "median_gain": float(np.median([g for _, g, _, _ in series])),
                        "median_reach": float(np.median([r for _, _, _, r in series]))})
    return pd.DataFrame(out, columns=["recording_type", "node", "role", "iteration",
                                      "median_gain", "median_reach"])


def _graph_gains(data: TrialData) -> dict[str, tuple[dict, dict]]:
    """recording type -> (column -> [(step, gain, reference column, reach)], column ->
    (node, role, iteration))."""
    rows = data.rows(gradient=True, aggregation=BATCH_MEAN, kinds=(CALCULATED, INPUT))
    if rows.empty:
        return {}
    rows = rows.assign(rms=_rms(rows))
    result = {}
    steps_table = data.steps
    for recording_type, part in rows.groupby("recording_type", observed=True):
        # One column per tensor (node, role, iteration), one row per step.
        matrix = part.pivot_table(index="training_step", columns=["node", "role", "iteration"],
                                  values="rms", aggfunc="first", observed=True)
        if matrix.empty:
            continue
        columns = {(str(n), str(r), int(i)): c for c, (n, r, i) in enumerate(matrix.columns)}
        values = matrix.to_numpy(np.float64)
        step_pos = {int(s): i for i, s in enumerate(matrix.index)}
        gains: dict[int, list[tuple[int, float, int, float]]] = {}  # see _gain_findings
        for (digest, iteration), group in steps_table.groupby(["graph_hash", "iteration"],
                                                              observed=True):
            steps = [int(s) for s in group["training_step"] if int(s) in step_pos]
            if not steps:
                continue
            graph = data.graph(steps[0], int(iteration))
            if graph is None:
                continue
            descendants, ancestors = _related_columns(graph, columns)
            sub = values[[step_pos[s] for s in steps]]
            usable = np.where(np.isfinite(sub) & (sub > 0), sub, np.nan)
            for col, below in descendants.items():
                if not below:
                    continue
                own = sub[:, col]
                down = usable[:, below]
                valid = np.isfinite(own) & (own > 0) & ~np.all(np.isnan(down), axis=1)
                if not valid.any():
                    continue
                safe = np.where(np.isnan(down[valid]), -np.inf, down[valid])
                best = np.argmax(safe, axis=1)
                ref = np.take_along_axis(safe, best[:, None], axis=1)[:, 0]
                # What reaches the tensor's sources: the largest gradient among the tensor
                # and everything it is computed from (a side branch's inputs get theirs
                # through the other paths too).
                above = ancestors.get(col, [])
                reach = own[valid]
                if above:
                    up = usable[valid][:, above]
                    reach = np.fmax(reach, np.nanmax(np.where(np.isnan(up), -np.inf, up),
                                                     axis=1))
                gain = own[valid] / ref
                for s, g, b, r in zip(np.asarray(steps)[valid], gain, best, reach / ref):
                    gains.setdefault(col, []).append((int(s), float(g), below[int(b)],
                                                      float(r)))
        result[str(recording_type)] = (gains, {c: key for key, c in columns.items()})
    return result


def _related_columns(graph, columns: dict[tuple[str, str, int], int]
                     ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Column of each tensor in the graph -> columns of every tensor that depends on it
    (its descendants), and -> columns of every tensor it depends on (its ancestors)."""
    nodes = {n.name: n for n in graph.nodes}

    def key(node, role):
        alias = node.alias_of.get(role)
        return (alias[0], alias[1], int(alias[2])) if alias else (node.node, role,
                                                                  int(node.iteration))

    after: dict[tuple, set[tuple]] = {}
    before: dict[tuple, set[tuple]] = {}
    for e in graph.edges:
        if e.source in nodes and e.target in nodes:
            source = key(nodes[e.source], e.source_role)
            target = key(nodes[e.target], e.target_role)
            after.setdefault(source, set()).add(target)
            before.setdefault(target, set()).add(source)
    return _closure(after, columns), _closure(before, columns)


def _closure(links: dict[tuple, set[tuple]], columns: dict[tuple[str, str, int], int]
             ) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for start, nearest in links.items():
        if start not in columns:
            continue
        seen: set[tuple] = set()
        stack = list(nearest)
        while stack:
            k = stack.pop()
            if k in seen or k == start:
                continue
            seen.add(k)
            stack.extend(links.get(k, ()))
        out[columns[start]] = sorted(columns[k] for k in seen if k in columns)
    return out


def _gain_findings(data: TrialData, recording_type: str,
                   gains: dict[int, list[tuple[int, float, int, float]]],
                   names: dict[int, tuple[str, str, int]]) -> list[Finding]:
    """``gains``: column -> (step, gain, reference column, gain of what reaches its
    sources) per recorded step. Vanishing is judged on the last (a gradient that is small
    on a branch whose inputs get a large one by other paths has not vanished), exploding
    on the gain itself."""
    findings = []
    medians = {c: float(np.median([g for _, g, _, _ in v])) for c, v in gains.items() if v}
    reached = {c: float(np.median([r for _, _, _, r in v])) for c, v in gains.items() if v}
    for kind, judged, test, worst in ((VANISHING, reached, lambda m: m < GAIN_LOW, min),
                                      (EXPLODING, medians, lambda m: m > GAIN_HIGH, max)):
        hit = [c for c, m in judged.items() if test(m)]
        if not hit:
            continue
        col = worst(hit, key=judged.__getitem__)
        node, role, iteration = names[col]
        series = gains[col]
        last_step, last_gain, ref, _ = series[-1]
        ref_node, ref_role, ref_iteration = names[ref]
        others = sorted({names[c][0] for c in hit} - {node})
        severe = (judged[col] < GAIN_WARNING_LOW if kind == VANISHING
                  else judged[col] > GAIN_WARNING_HIGH)
        also = (f"; {len(others)} more tensors are below {fmt(GAIN_LOW)} too: "
                f"{', '.join(others[:5])}{'…' if len(others) > 5 else ''}"
                if kind == VANISHING and others else
                f"; {len(others)} more above {fmt(GAIN_HIGH)}: {', '.join(others[:5])}"
                if others else "")
        word = "shrinks" if kind == VANISHING else "grows"
        sources = (", and no tensor it is computed from gets more than "
                   f"{fmt(judged[col])} times that gradient" if kind == VANISHING else "")
        explanation = (f"The gradient {word} along the graph: at {node!r} (iteration "
                       f"{iteration}, {recording_type}) its RMS is {fmt(medians[col])} times "
                       f"that of the largest tensor depending on it{sources} (median over "
                       f"{len(series)} recorded steps; at step {last_step}: {fmt(last_gain)} "
                       f"of {ref_node!r}, iteration {ref_iteration}){also}.")
        findings.append(Finding(
            kind=kind, severity=WARNING if severe else INFO, trial_id=data.trial_id,
            steps=tuple(sorted({s for s, _, _, _ in series})), node=node, role=role,
            recording_type=recording_type, explanation=explanation,
            where=where(data.trial_id, step=last_step,
                        type_of_execution=data.type_of_execution.get(last_step),
                        iteration=iteration, node=node, role=role,
                        recording_type=recording_type, aggregation=BATCH_MEAN,
                        statistic="norm"),
            numbers={"median_gain": medians[col], "median_reach": reached[col],
                     "last_gain": last_gain, "reference_node": ref_node,
                     "reference_role": ref_role, "steps_measured": len(series),
                     "tensors_affected": len(hit),
                     "nodes": sorted({names[c][0] for c in hit})},
        ))
    return findings


# --- over the steps ------------------------------------------------------------------------


def over_steps(data: TrialData) -> list[Finding]:
    batched = data.rows(gradient=True, aggregation=BATCH_MEAN, kinds=(CALCULATED, INPUT))
    flat = data.rows(gradient=True, aggregation=NO_BATCH, kinds=(PARAMETER,))
    rows = pd.concat([batched, flat], ignore_index=True) if len(flat) else batched
    if rows.empty:
        return []
    rows = rows.assign(rms=_rms(rows))
    rows = rows[np.isfinite(rows["rms"].to_numpy()) & (rows["rms"].to_numpy() > 0)]
    if rows.empty:
        return []
    for column in ("node", "role", "recording_type", "type_of_execution"):
        rows[column] = rows[column].astype(str)
    keys = ["recording_type", "node", "role", "iteration", "type_of_execution"]
    rows = rows.sort_values(keys + ["training_step"], kind="stable")
    grouped = rows.groupby(keys, sort=False, observed=True)["rms"]
    position = grouped.cumcount()
    size = grouped.transform("size")
    first = rows["rms"].where(position < BASELINE_STEPS)
    baseline = first.groupby([rows[k] for k in keys], sort=False, observed=True) \
        .transform("median")
    rows = rows.assign(growth=rows["rms"] / baseline, position=position, size=size)
    findings = []
    for recording_type, part in rows.groupby("recording_type", sort=True, observed=True):
        grown = part[(part["position"] >= BASELINE_STEPS)
                     & (part["growth"] > GROWTH_WARNING)]
        if len(grown):
            first_row = grown.sort_values(["training_step", "growth"],
                                          ascending=[True, False]).iloc[0]
            tensors = grown.groupby(["node", "role"], observed=True).size()
            worst = float(grown["growth"].max())
            severity = ERROR if worst > GROWTH_ERROR else WARNING
            step = int(first_row["training_step"])
            findings.append(Finding(
                kind=EXPLODING_OVER_STEPS, severity=severity, trial_id=data.trial_id,
                steps=tuple(sorted({int(s) for s in grown["training_step"]})),
                node=str(first_row["node"]), role=str(first_row["role"]),
                recording_type=str(recording_type),
                explanation=(f"Gradients explode over training: at step {step} the gradient "
                             f"of {first_row['node']!r} is {fmt(first_row['growth'])} times "
                             f"its first recorded steps' (median RMS "
                             f"{fmt(first_row['rms'] / first_row['growth'])}); "
                             f"{len(tensors)} tensors grew more than {fmt(GROWTH_WARNING)}×, "
                             f"at most {fmt(worst)}×."),
                where=where(data.trial_id, step=step, type_of_execution=str(
                    first_row["type_of_execution"]), iteration=int(first_row["iteration"]),
                    node=str(first_row["node"]), role=str(first_row["role"]),
                    recording_type=str(recording_type), statistic="norm"),
                numbers={"first_step": step, "growth": float(first_row["growth"]),
                         "max_growth": worst, "tensors_affected": len(tensors)},
            ))
        findings += _shrunk(data, str(recording_type), part)
    return findings


def _shrunk(data: TrialData, recording_type: str, part: pd.DataFrame) -> list[Finding]:
    keys = ["node", "role", "iteration", "type_of_execution"]
    worst = None
    count = 0
    for key, series in part.groupby(keys, sort=False, observed=True):
        if len(series) < MIN_STEPS_OVER_TIME:
            continue
        quarter = max(2, len(series) // 4)
        early = float(series["rms"].iloc[:quarter].median())
        late = float(series["rms"].iloc[-quarter:].median())
        ratio = late / early
        if ratio < SHRINK:
            count += 1
            if worst is None or ratio < worst[1]:
                worst = (key, ratio, series)
    if worst is None:
        return []
    (node, role, iteration, toe), ratio, series = worst
    step = int(series["training_step"].iloc[-1])
    return [Finding(
        kind=VANISHING_OVER_STEPS, severity=WARNING, trial_id=data.trial_id,
        steps=(int(series["training_step"].iloc[0]), step), node=node, role=role,
        recording_type=recording_type,
        explanation=(f"Gradients vanish over training: the gradient of {node!r} in the last "
                     f"quarter of its {len(series)} recorded steps is {fmt(ratio)} of the "
                     f"first quarter's (median RMS); {count} tensors shrank below "
                     f"{fmt(SHRINK)} of their start."),
        where=where(data.trial_id, step=step, type_of_execution=toe, iteration=int(iteration),
                    node=node, role=role, recording_type=recording_type, statistic="norm"),
        numbers={"ratio": ratio, "tensors_affected": count},
    )]


# --- update / weight ratios ----------------------------------------------------------------


def update_ratios(data: TrialData) -> list[Finding]:
    rows = data.rows(recording_type=UPDATE, kinds=(PARAMETER,))
    shapes = data.parameter_shapes
    matrices = [len(shapes.get((str(n), str(r)), ())) >= 2
                for n, r in zip(rows["node"], rows["role"])]
    rows = rows[np.asarray(matrices, bool)]
    if rows.empty:
        return []
    ratio = rows["update_ratio"].to_numpy(np.float64)
    rows = rows[np.isfinite(ratio) & (ratio > 0)]
    if rows.empty:
        return []
    findings = []
    medians = rows.groupby(["node", "role"], observed=True)["update_ratio"].median()
    # A warning needs updates that stay large: the median over the recorded steps after
    # the first update of training (Adam's first step moves every weight by the learning
    # rate, whatever its gradient: on GPT-2's scaled initialisation that is 0.1 of the
    # weights' RMS at lr 1e-3, and it shrinks from the next step on). One step above 1
    # is an error on its own, the first one included.
    later = (rows["training_step"] > 0).to_numpy()
    steady_medians = rows[later].groupby(["node", "role"], observed=True)[
        "update_ratio"].median()
    lasting = pd.MultiIndex.from_arrays([rows["node"], rows["role"]]).isin(
        steady_medians[steady_medians > UPDATE_WARNING].index) & later
    ratio = rows["update_ratio"].to_numpy(np.float64)
    high = rows[ratio > UPDATE_WARNING]
    if len(high):
        steady = rows[lasting & (ratio > UPDATE_WARNING) & (ratio <= UPDATE_ERROR)]
        for severity, part in ((ERROR, high[high["update_ratio"] > UPDATE_ERROR]),
                               (WARNING, steady)):
            if part.empty:
                continue
            first = part.sort_values(["training_step", "update_ratio"],
                                     ascending=[True, False]).iloc[0]
            params = sorted({str(r) for r in part["role"]})
            step = int(first["training_step"])
            bound = UPDATE_ERROR if severity == ERROR else UPDATE_WARNING
            findings.append(Finding(
                kind=UPDATE_RATIO_HIGH, severity=severity, trial_id=data.trial_id,
                steps=tuple(sorted({int(s) for s in part["training_step"]})),
                node=str(first["node"]), role=str(first["role"]), recording_type=UPDATE,
                explanation=(f"Updates too large for their weights: at step {step} the "
                             f"optimizer changed {str(first['role'])!r} by "
                             f"{fmt(first['update_ratio'])} of its norm "
                             f"(||update|| / ||weight||; about 1e-3 is usual, above "
                             f"{fmt(bound)} the learning rate is too large); "
                             f"{len(params)} parameters, at most "
                             f"{fmt(part['update_ratio'].max())}"
                             + ("." if severity == ERROR else
                                f", above it at most of their recorded steps (median "
                                f"{fmt(steady_medians[(first['node'], first['role'])])}"
                                ").")),
                where=where(data.trial_id, step=step,
                            type_of_execution=data.type_of_execution.get(step), iteration=-1,
                            node=str(first["node"]), role=str(first["role"]),
                            recording_type=UPDATE, aggregation=NO_BATCH,
                            statistic="update_ratio"),
                numbers={"first_step": step, "update_ratio": float(first["update_ratio"]),
                         "max_update_ratio": float(part["update_ratio"].max()),
                         "parameters": params},
            ))
    low = medians[medians < UPDATE_LOW]
    if len(low):
        (node, role), value = low.idxmin(), float(low.min())
        findings.append(Finding(
            kind=UPDATE_RATIO_LOW, severity=INFO, trial_id=data.trial_id, steps=(),
            node=str(node), role=str(role), recording_type=UPDATE,
            explanation=(f"Parameters that barely learn: the median ||update|| / ||weight|| "
                         f"of {str(role)!r} is {fmt(value)} per step ({len(low)} parameters "
                         f"below {fmt(UPDATE_LOW)})."),
            where=where(data.trial_id, iteration=-1, node=str(node), role=str(role),
                        recording_type=UPDATE, aggregation=NO_BATCH, statistic="update_ratio"),
            numbers={"median_update_ratio": value, "parameters": [str(r) for _, r in low.index]},
        ))
    return findings
