"""The flight recorder's window (issue 30, ``record/flight.py``): the ring of the last
``window`` steps' statistics, the full values of the last ``full_steps`` steps (within
``max_full_bytes``), and the writing of both into the trial's ``flight/`` folder
(``format/flight.py``) with the trigger named in trial.json. A mixin of
:class:`~comgra_like.record.flight.FlightRecorder`: its state lives on the recorder
(``_init_window``)."""

from __future__ import annotations

import logging
from collections import deque

import torch

from ..format import flight as ff
from .flight_catalog import StepRecord
from .flight_stats import trial_json_entry
from .module_io import tensor_version

log = logging.getLogger("comgra_like")


class FlightWindow:
    """The ring, the full values kept, and the window written on a trigger."""

    def _init_window(self, window: int, full_steps: int) -> None:
        self._ring: deque[StepRecord] = deque(maxlen=window)
        self._full_ring: deque[tuple[int, list]] = deque(maxlen=max(full_steps, 1))
        self._full: list = []  # the open step's full values: (name, role, tensor, version)
        self._full_bytes = 0
        self._seq = 0
        self._warned: set[str] = set()

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message)

    def _keep(self, name: str, role: str, t: torch.Tensor, copied: bool) -> None:
        """Keep a full value for the full_steps ring, within the per-step share of
        max_full_bytes (the ring holds full_steps steps and the open one)."""
        if not self.full_steps:
            return
        nbytes = t.numel() * t.element_size()
        if self._full_bytes + nbytes > self.max_full_bytes // (self.full_steps + 1):
            self._warn("full", "comgra_like: the flight recorder keeps full values of at most "
                       f"{self.max_full_bytes // (self.full_steps + 1)} bytes per step "
                       "(max_full_bytes / (full_steps + 1)); the rest of a step is kept as "
                       "statistics only (this warning is shown once)")
            return
        self._full_bytes += nbytes
        # not a copy: the tensor itself and its version; one changed in place later (a
        # gradient zeroed in place, an in-place op on an activation) is left out when the
        # window is written. Copies (the parameters before the step, the updates) are
        # the flight recorder's own: version None.
        self._full.append((name, role, t, None if copied else tensor_version(t)))

    def _keep_many(self, names: list, role: str, tensors: list, copied: bool,
                   nbytes: int) -> None:
        """``_keep`` for a role of all parameters at once (``nbytes``: theirs in all)."""
        if not self.full_steps:
            return
        if self._full_bytes + nbytes > self.max_full_bytes // (self.full_steps + 1):
            for name, t in zip(names, tensors):  # as many as fit, with the warning
                self._keep(name, role, t, copied)
            return
        self._full_bytes += nbytes
        self._full.extend((name, role, t, None if copied else tensor_version(t))
                          for name, t in zip(names, tensors))

    def _name_in_trial(self, trigger: dict, steps: list[int]) -> None:
        """trial.json names the trigger (through the writer: ``notify``)."""
        if self._notify is None:
            return
        try:
            self._notify(trial_json_entry(trigger, steps))
        except Exception as e:  # noqa: BLE001 - the window is written; training goes on
            self._warn("notify", "comgra_like: the flight recorder's trigger could not be "
                       f"named in trial.json ({type(e).__name__}: {e}); the window is in "
                       "the trial's flight/ folder (shown once)")

    def _write(self, trigger: dict) -> str:
        cols: dict[str, list] = {f: [] for f in ff.STATS_SCHEMA.names}
        for rec in self._ring:
            n = len(rec.idx)
            cols["training_step"].extend([rec.step] * n)
            cols["order"].extend(range(n))
            for key in rec.idx.tolist():
                cols["name"].append(self._names[key])
                cols["node"].append(self._nodes[key])
                cols["role"].append(self._roles[key])
                cols["kind"].append(self._kinds[key])
                cols["numel"].append(self._numel[key])
            for i, stat in enumerate(ff.STATISTICS):
                cols[stat].extend(rec.values[:, i].tolist())
        full, changed = [], []
        for step, kept in (self._full_ring if self.full_steps else ()):
            for name, role, t, version in kept:
                if version is not None and tensor_version(t) != version:
                    changed.append(f"{name} ({role}, step {step})")
                    continue
                full.append((step, name, role, t.detach().float().cpu().numpy()))
        if changed:
            trigger["full_values_changed_in_place"] = changed
            self._warn("in-place", "comgra_like: the flight recorder left out the full values "
                       "of tensors changed in place after their step (listed in the "
                       "window's JSON as full_values_changed_in_place), e.g. "
                       f"{changed[0]}; their statistics are kept (shown once)")
        seq = self._seq
        self._seq += 1
        return ff.write_window(self._trial_path, seq, self._rank, trigger, cols, full)
