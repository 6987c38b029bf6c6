"""The flight recorder's judging of a step (issue 30, ``record/flight.py``): the step's
scalars (loss, gradient norm, update ratio) from its statistics, the triggers (a
non-finite value, a spike above median + ``spike_mads`` x the MAD's scale of the
window's earlier values, a user predicate), and the cooldown after a written window. A
mixin of :class:`~comgra_like.record.flight.FlightRecorder`: its state lives on the
recorder (``_init_judge``); a trigger that fires has its window written by
``record/flight_window.py``."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import FlightTriggerError
from ..format import flight as ff
from .flight_catalog import LOSS_KPI, LOSS_VALUE, PARAM_GRAD, PARAM_UPDATE, PARAM_VALUE, StepRecord

log = logging.getLogger("comgra_like")

MAD_TO_SIGMA = 1.4826


@dataclass
class FlightStep:
    """One step as a predicate sees it (``FlightRecorder(predicate=...)``)."""

    step: int
    loss: float | None
    grad_norm: float | None
    update_ratio: float | None
    stats: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)


class TriggerJudge:
    """Judges each step as it enters the ring; fires (writes the window) on a trigger."""

    def _init_judge(self, window: int) -> None:
        #: Every trigger written so far (the records of the window files).
        self.fired: list[dict] = []
        #: Triggers seen inside a cooldown, not written.
        self.suppressed = 0
        self._history = {k: deque(maxlen=window) for k in ("loss", "grad_norm", "update_ratio")}
        self._after_left = 0
        self._cooldown_until: int | None = None
        self._non_finite_latched = False
        self._thresholds: dict[str, tuple[float, float, int]] = {}  # med, threshold, age

    def _judge(self, rec: StepRecord) -> None:
        with np.errstate(all="ignore"):  # inf / inf of a diverged step: NaN, not judged
            self._judge_step(rec)

    def _judge_step(self, rec: StepRecord) -> None:
        v = rec.values
        codes = self._codes_np[rec.idx] if len(rec.idx) else np.zeros(0, np.int8)
        l2sq = np.square(v[:, 3]) if len(v) else np.zeros(0)
        scalars = rec.scalars
        grads = np.flatnonzero(codes == PARAM_GRAD)
        if len(grads):  # a parameter's last row of the step: the gradient its update used
            keys = rec.idx[grads][::-1]  # (several with accumulation: one per backward)
            grads = grads[::-1][np.unique(keys, return_index=True)[1]]
        scalars["grad_norm"] = float(math.sqrt(l2sq[grads].sum())) if len(grads) else None
        pv, pu = l2sq[codes == PARAM_VALUE].sum(), l2sq[codes == PARAM_UPDATE].sum()
        scalars["update_ratio"] = (float(math.sqrt(pu / pv)) if (codes == PARAM_UPDATE).any()
                                   and pv > 0 else None)
        loss = np.flatnonzero(codes == LOSS_VALUE)
        if not len(loss):
            loss = np.flatnonzero(codes == LOSS_KPI)
        if len(loss):  # the first loss, over every iteration (micro-batch) of the step
            loss = loss[rec.idx[loss] == rec.idx[loss[0]]]
        scalars["loss"] = float(np.mean(v[loss, 0])) if len(loss) else None
        self._ring.append(rec)
        fired = []
        if ff.NON_FINITE in self.triggers and len(v):
            bad = ff.non_finite_rows(v)  # the counts and the abs max say
            if not bad.any():
                self._non_finite_latched = False
            elif not self._non_finite_latched:  # one trigger per non-finite stretch
                self._non_finite_latched = True
                row = int(np.flatnonzero(bad)[0])
                key = int(rec.idx[row])
                fired.append({"kind": ff.NON_FINITE, "tensor": self._names[key],
                              "node": self._nodes[key], "role": self._roles[key],
                              "value": float(v[row, 4] + v[row, 5]) or float(v[row, 0]),
                              "rows_non_finite": int(bad.sum())})
        for kind, scalar in ((ff.LOSS_SPIKE, "loss"), (ff.GRAD_NORM_SPIKE, "grad_norm"),
                             (ff.UPDATE_SPIKE, "update_ratio")):
            value, history = scalars[scalar], self._history[scalar]
            if value is None or not math.isfinite(value):
                continue
            if kind in self.triggers and len(history) >= self.warmup:
                med, threshold = self._threshold(scalar, history)
                if value > threshold:
                    fired.append({"kind": kind, "value": value, "median": med,
                                  "threshold": threshold, **self._mover(scalar)})
            history.append(value)
        if self.predicate is not None:
            said = self.predicate(self._view(rec))
            if said:
                fired.append({"kind": ff.PREDICATE, "value": said if isinstance(
                    said, (int, float)) and not isinstance(said, bool) else 1.0,
                    "said": str(said) if isinstance(said, str) else None})
        if fired:
            self._fire(rec.step, fired)

    def _threshold(self, scalar: str, history: deque) -> tuple[float, float]:
        """(median, spike threshold) of a scalar's window; recomputed every 8th step (the
        median and MAD of up to ``window`` values move slowly; the cost was a third of
        the flight recorder's per-step time on the benchmark MLP)."""
        cached = self._thresholds.get(scalar)
        if cached is not None and cached[2] < 7:
            self._thresholds[scalar] = (cached[0], cached[1], cached[2] + 1)
            return cached[0], cached[1]
        h = np.asarray(history)
        med = float(np.median(h))
        scale = max(MAD_TO_SIGMA * float(np.median(np.abs(h - med))),
                    self.spike_floor * abs(med), 1e-12)
        self._thresholds[scalar] = (med, med + self.spike_mads * scale, 0)
        return med, med + self.spike_mads * scale

    def _mover(self, scalar: str) -> dict:
        """For a spike: the tensor whose statistic grew most against its window median."""
        code = {"loss": LOSS_VALUE, "grad_norm": PARAM_GRAD, "update_ratio": PARAM_UPDATE}[scalar]
        last = self._ring[-1]
        best, best_ratio = None, 0.0
        for row, key in enumerate(last.idx):
            if self._codes[key] != code:
                continue
            past = [r.values[r.idx == key, 3] for r in list(self._ring)[:-1]]
            past = np.concatenate(past) if past else np.zeros(0)
            med = float(np.median(past)) if len(past) else 0.0
            ratio = float(last.values[row, 3]) / med if med > 0 else math.inf
            if best is None or ratio > best_ratio:
                best, best_ratio = int(key), ratio
        if best is None:
            return {"tensor": None}
        return {"tensor": self._names[best], "node": self._nodes[best],
                "role": self._roles[best], "growth": best_ratio}

    def _view(self, rec: StepRecord) -> FlightStep:
        stats = {}
        for row, key in enumerate(rec.idx):
            stats[(self._names[key], self._roles[key])] = dict(zip(ff.STATISTICS,
                                                                   rec.values[row].tolist()))
        return FlightStep(rec.step, rec.scalars["loss"], rec.scalars["grad_norm"],
                          rec.scalars["update_ratio"], stats)

    def _fire(self, step: int, fired: list[dict]) -> None:
        if self._cooldown_until is not None and step < self._cooldown_until:
            self.suppressed += 1
            return
        self._cooldown_until = step + self.cooldown + 1
        first = self._ring[0].step
        trigger = {**fired[0], "step": step, "window": [first, step],
                   "steps_in_window": len(self._ring), "triggers": fired,
                   "after": self.after, "time": time.time(),
                   "sample_ids": {str(r.step): r.sample_ids for r in self._ring
                                  if r.sample_ids is not None}}
        name = None
        try:
            name = self._write(trigger)
            trigger["name"] = name
        except Exception as e:  # noqa: BLE001 - a failed write must not stop training
            log.warning("comgra_like: the flight recorder could not write the window of "
                        "step %s (%s: %s)", step, type(e).__name__, e)
        self.fired.append(trigger)
        self._after_left = self.after
        self._name_in_trial(trigger, [r.step for r in self._ring])
        log.warning("comgra_like: flight recorder trigger %s at step %s (tensor %s, value %s); "
                    "window of steps %s-%s %s", fired[0]["kind"], step,
                    fired[0].get("tensor"), fired[0].get("value"), first, step,
                    f"written as flight/{name}" if name else "NOT written")
        if self.on_trigger == "raise":
            raise FlightTriggerError(
                f"flight recorder: {fired[0]['kind']} at training step {step}"
                + (f" in {fired[0]['tensor']!r}" if fired[0].get("tensor") else "")
                + f" (value {fired[0].get('value')}); "
                + (f"the window of steps {first}-{step} is stored in the trial's flight/"
                   f"{name} (Group.read_flight)" if name else "the window could NOT be written")
                + ". FlightRecorder(on_trigger='raise') stops training here; "
                "on_trigger='record' records and goes on")
