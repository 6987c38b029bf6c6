"""Per-module metrics (issue 16): Taiyi's quantities and monitorch's lenses on a schedule.

``quantities.py`` defines every built-in quantity (Taiyi's and monitorch's), ``spectra.py``
the covariance spectra that stay affordable on wide layers; the writer process computes
them (numpy only). ``schedule.py`` (``linear(k, o)``) and ``user.py`` (user metrics) are
torch-free too. The training side (torch) lives in ``record/``: ``metric_config.py``
(Taiyi's config resolved on a model) and ``metric_collect.py`` (the hooks); Taiyi's
``Monitor`` is ``integrations/taiyi.py`` (exported as ``comgra_like.Monitor``);
``comgra_like.watch(model, metrics=...)`` and ``track_module(..., metrics=...)`` use them.
"""

from __future__ import annotations

from .user import UserMetric

__all__ = ["UserMetric"]
