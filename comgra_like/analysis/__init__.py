"""Findings: analyses of a recording that point a person at what went wrong.

``find(group)`` runs every detector over every trial (or one) and returns
:class:`Finding` values, most severe first. One module per detector, each reading one
trial's statistics through the query API (``Group.read_statistics``, one call per trial,
shared by all detectors through :class:`TrialData`):

- ``nonfinite``     the first NaN/Inf: step, origin node in graph order, last finite step
- ``gradients``     vanishing/exploding gradients along the graph and over the steps;
                    update / weight ratios out of range
- ``units``         dead units and saturated units, with the fraction affected
- ``losses``        loss spikes against the trend; outlier samples within a batch
- ``correlations``  which tensor statistics the per-sample loss rises or falls with
- ``outputs``       outputs that cannot reach one end of their targets' range
- ``flight``        the flight recorder's triggers with their origin (the first
                    non-finite tensor; the tensors that moved first before a spike)
- ``optimizer``     the optimizer's state (``watch(optimizer=)``): updates dominated by
                    Adam's eps, a second moment that collapses, updates too large

``comgra findings --path GROUP`` (``cli.py``) prints them. ``first_divergence``
(``divergence.py``, ``comgra diff``) compares two trials or two ranks instead. Needs numpy and pandas
through the query API; never torch or dash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..query import Group, open_group
from . import correlations, flight, gradients, losses, nonfinite, optimizer, outputs, units
from .core import (
    ERROR,
    INFO,
    SEVERITIES,
    WARNING,
    Finding,
    TrialData,
    at_least,
    severity_rank,
    sort_findings,
)
from .divergence import Divergence, first_divergence

Detector = Callable[[TrialData], list[Finding]]

#: Every detector by name, in the order they run.
DETECTORS: dict[str, Detector] = {
    "non_finite": nonfinite.detect,
    "gradients": gradients.detect,
    "units": units.detect,
    "losses": losses.detect,
    "correlations": correlations.detect,
    "outputs": outputs.detect,
    "flight": flight.detect,
    "optimizer": optimizer.detect,
}


def find_in_trial(group: Group, trial_id: str,
                  detectors: Iterable[str] | None = None) -> list[Finding]:
    """The findings of one trial (``detectors``: names from :data:`DETECTORS`, default
    all), most severe first."""
    chosen = _choose(detectors)
    data = TrialData(group, trial_id)
    found: list[Finding] = []
    for detector in chosen:
        found.extend(detector(data))
    return sort_findings(found)


def find(group: Group | str, trial_id: str | None = None,
         detectors: Iterable[str] | None = None) -> list[Finding]:
    """The findings of every trial of ``group`` (a Group or a group folder), or of one."""
    if not isinstance(group, Group):
        group = open_group(group)
    trials = [trial_id] if trial_id is not None else [t.trial_id for t in group.list_trials()]
    found: list[Finding] = []
    for t in trials:
        found.extend(find_in_trial(group, t, detectors))
    return sort_findings(found)


def count_findings(group: Group | str, trial_id: str | None = None
                   ) -> dict[str, dict[str, int]]:
    """Findings per trial and severity (``{trial_id: {"error": 1, ...}}``), e.g. for
    ``Group.read_trials(findings=...)``."""
    out: dict[str, dict[str, int]] = {}
    for f in find(group, trial_id):
        counts = out.setdefault(f.trial_id, {})
        counts[f.severity] = counts.get(f.severity, 0) + 1
    return out


def _choose(names: Iterable[str] | None) -> list[Detector]:
    if names is None:
        return list(DETECTORS.values())
    chosen = []
    for name in names:
        if name not in DETECTORS:
            from ..errors import ConfigurationError

            raise ConfigurationError(
                f"unknown detector {name!r}; choose from {', '.join(DETECTORS)}")
        chosen.append(DETECTORS[name])
    return chosen


__all__ = [
    "DETECTORS",
    "ERROR",
    "INFO",
    "SEVERITIES",
    "WARNING",
    "Divergence",
    "Finding",
    "TrialData",
    "at_least",
    "count_findings",
    "find",
    "find_in_trial",
    "first_divergence",
    "severity_rank",
    "sort_findings",
]
