"""The flight recorder's arithmetic (issue 30, ``record/flight.py``): the sums of many
tensors with few launches, a step's statistics from its reductions, and a trigger as
trial.json names it. Torch and numpy only; nothing here keeps state."""

from __future__ import annotations

import numpy as np
import torch

from ..format import flight as ff

BLOCK = "block"  # the tag of a row of a batched block
SUM_CHUNK = 2**25  # values summed in one concatenation (a 128 MiB copy, 256 MiB float64)


def batched_sums(ts: list, ends_cache: dict) -> torch.Tensor:
    """The sum of each tensor with a few launches, not one per tensor (hundreds per
    step on a GPT-2 made the GPU wait for the CPU): the tensors of a chunk of at most
    ``SUM_CHUNK`` values are concatenated, summed cumulatively in float64, and the
    sums are the differences at the tensors' ends (no host synchronisation; the ends
    are put on the device once per layout). A segmented reduction was tried first:
    7.7 ms per call on an H100 and a host synchronisation each."""
    groups, group, count = [], [], 0
    for t in ts:
        n = t.numel()
        if group and count + n > SUM_CHUNK:
            groups.append(group)
            group, count = [], 0
        group.append(t)
        count += n
    if group:
        groups.append(group)
    out = []
    for g in groups:
        if len(g) == 1:
            out.append(g[0].sum(dtype=torch.float64).reshape(1))
            continue
        sizes, dev = tuple(int(t.numel()) for t in g), g[0].device
        ends = ends_cache.get((sizes, dev))
        if ends is None:  # a copy to the device, once per layout
            if len(ends_cache) > 16:  # a few layouts per model (roles with / without grad)
                ends_cache.clear()
            ends = ends_cache[(sizes, dev)] = torch.tensor(
                np.cumsum(sizes) - 1, dtype=torch.int64, device=dev)
        running = torch.cat([t.reshape(-1) for t in g]).cumsum(0, dtype=torch.float64)
        at = running.index_select(0, ends)
        out.append(torch.diff(at, prepend=at.new_zeros(1)))
    return (torch.cat(out) if len(out) > 1 else out[0]).to(ts[0].dtype)


def derive(rows: list, raw: list) -> np.ndarray:
    """The statistics of a step's rows from their reductions, for all rows at once.

    A row is a tuple of 7 numbers (reduced on the CPU, or a KPI given as a number: sum,
    sum of squares, min, max, NaN count, Inf count, numel), a device row ``(its 4 0-dim
    reductions, None, numel)`` whose numbers are in ``raw``, or ``(BLOCK, i, numel)``, a
    row of a batched block. ``raw``: the stacked device rows' reductions (sum, L2 norm,
    min, max), then the blocks' (the same 4 per row). mean = sum / n, L2 = sqrt(sum of
    squares), std from both (population), abs max = max(max, -min). A device or block
    row's NaN and Inf are not counted: 0 when its abs max is finite (then there are
    none), NaN ("not counted") when it is not (the observer's ``_complete`` counts them
    from the step's full values where those are kept)."""
    m = len(rows)
    if not raw:  # the CPU: every row is its numbers already
        red = np.array(rows, np.float64).reshape(m, 7)
    else:
        red = np.zeros((m, 7), np.float64)
        n_blocks = sum(1 for r in rows if r[0] is BLOCK)
        n_single = len(raw) - 4 * n_blocks
        pos = 0
        for i, row in enumerate(rows):
            if row[0] is BLOCK:
                at = n_single + 4 * row[1]
                red[i, :4] = raw[at:at + 4]
            elif type(row[0]) is tuple:
                red[i, :4] = raw[pos:pos + 4]
                pos += 4
            else:
                red[i] = row
                continue
            red[i, 1] *= red[i, 1]  # the L2 norm, squared
            red[i, 4:6] = np.nan  # not counted
            red[i, 6] = row[2]
    out = np.empty((m, len(ff.STATISTICS)), np.float64)
    with np.errstate(all="ignore"):
        n = red[:, 6]
        mean = red[:, 0] / n
        var = red[:, 1] / n - mean * mean
        out[:, 0] = mean
        out[:, 1] = np.where(var > 0, np.sqrt(np.abs(var)), np.where(np.isnan(var), var, 0.0))
        one = n == 1  # one value (a loss): no spread, whatever the rounding says
        out[one, 1] = np.where(np.isfinite(mean[one]), 0.0, np.nan)
        low, high = red[:, 2], red[:, 3]
        out[:, 2] = np.where(np.isnan(low) | np.isnan(high), np.nan, np.fmax(high, -low))
        out[:, 3] = np.sqrt(red[:, 1])
        out[:, 4:6] = red[:, 4:6]
        # a row not counted whose abs max is finite has neither
        uncounted = np.isnan(out[:, 4]) & np.isfinite(out[:, 2])
        out[uncounted, 4:6] = 0.0
    return out


def trial_json_entry(trigger: dict, steps: list[int]) -> dict:
    """A fired trigger as ``WriterClient.flight_trigger`` takes it (trial.json's
    ``flight_triggers``): kind, step, tensor, value, the window's steps, and the rest
    (the window's file name, node, role, a spike's median and threshold) as detail."""
    detail = {k: trigger[k] for k in ("name", "node", "role", "median", "threshold",
                                      "growth", "rows_non_finite", "said")
              if trigger.get(k) is not None}
    if len(trigger["triggers"]) > 1:
        detail["also"] = [t["kind"] for t in trigger["triggers"][1:]]
    value = trigger.get("value")
    return {"kind": trigger["kind"], "training_step": int(trigger["step"]),
            "tensor": trigger.get("tensor"), "value": None if value is None else float(value),
            "window_steps": list(steps), "detail": detail, "wall_time": trigger["time"]}
