"""The query API's reads of the tables beside the tensors (a part of :class:`Group`):
what ``comgra_like.watch`` records (histograms, module graphs, the watch report), the
per-module metrics, the gradient flows and probes, and the flight recorder's windows.

The watch() and metrics tables are indexed at each refresh from the index's listing
(``query/watch.py``, ``query/metrics.py``); flows/, probes/ and flight/ hold immutable
records listed at each call (``query/flows.py``, ``query/flight.py``).

A mixin of :class:`comgra_like.query.provider.Group`, which gives it the trials and the
choice of ranks (``_trial``, ``_table_ranks``, ``_key``, ``_cache``, ``_watch``,
``_metrics``); users call these methods on a ``Group``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .metrics import list_metrics, read_metrics
from .watch import (
    merge_histograms,
    module_graph_hash,
    module_graph_steps,
    modules_argument,
    read_histograms,
    read_module_graph_file,
)


class TableReads:
    """Reads of the watch(), metrics, flows and flight tables: a part of :class:`Group`
    (a mixin)."""

    # ----- watch(): histograms, module graphs, the watch report ---------------------------

    def read_histograms(self, trial_id: str, *, modules: Any = None, roles: Any = None,
                        what: Any = None, steps: Any = None, recording_types: Any = None,
                        types_of_execution: Any = None, rank: int | None = None,
                        ranks: Any = None, nodes: Any = None) -> pd.DataFrame:
        """The histograms ``comgra_like.watch`` recorded, one row per (training_step,
        iteration, module, role, recording_type, what), sorted by step.

        Columns: training_step, type_of_execution, iteration, module (the module
        invocation, e.g. ``model.layer1.0.conv1`` or ``model.block#1``; called ``node``
        before the vocabulary was settled, docs/FORMAT.md "Vocabulary"), role
        (``input 0``, ``input mask``, ``output 0``, ``output logits``; for params and
        params_grad the parameter's name, ``weight``), recording_type (forward,
        gradient:<loss group>), what (io, io_grad, params, params_grad), time (the
        ``time_log`` value), lo, hi (the bins are ``len(counts)`` equal bins from lo to
        hi), counts (numpy int64 array), n (values counted), vmin, vmax (the extremes of
        all values before sampling). Each filter is a value or a list of values;
        ``nodes`` is the older name of ``modules`` (still accepted; not both).
        An empty frame for a trial without histograms.

        A parameter held by several modules (tied weights) is recorded once, under its
        first holder; its params/params_grad rows are shown under every holder, with
        ``shared_with`` (the other holders) and ``recorded_as`` (the module parameter it
        is stored under) saying so (docs/PAGES.md).

        A distributed recording: one rank's rows (``rank``, by default the lowest), or
        with ``ranks`` (``"all"`` or a list) those ranks' rows side by side, with a
        ``rank`` column; :meth:`read_merged_histograms` adds them up.
        """
        modules = modules_argument(modules, nodes)
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return read_histograms(self._watch, trial_id, ranks=chosen, with_rank=with_rank,
                               modules=modules, roles=roles, what=what, steps=steps,
                               recording_types=recording_types,
                               types_of_execution=types_of_execution)

    def read_merged_histograms(self, trial_id: str, *, modules: Any = None,
                               roles: Any = None, what: Any = None, steps: Any = None,
                               recording_types: Any = None, types_of_execution: Any = None,
                               ranks: Any = "all", rebin: bool = False,
                               nodes: Any = None) -> pd.DataFrame:
        """The histograms of several ranks (all by default) merged, one row per histogram
        (:func:`comgra_like.query.watch.merge_histograms`): counts add where the ranks'
        bin edges agree (``merge`` = ``exact``); where they differ a ConfigurationError,
        unless ``rebin=True`` spreads each rank's counts over common edges (``merge`` =
        ``rebinned``, approximate). Columns: those of :meth:`read_histograms`, ``ranks``
        and ``merge``; ``nodes`` is the older name of ``modules``."""
        frame = self.read_histograms(trial_id, modules=modules_argument(modules, nodes),
                                     roles=roles, what=what,
                                     steps=steps, recording_types=recording_types,
                                     types_of_execution=types_of_execution, ranks=ranks)
        return merge_histograms(frame, rebin=rebin)

    def list_module_graph_steps(self, trial_id: str, rank: int | None = None,
                                ranks: Any = None) -> pd.DataFrame:
        """training_step, type_of_execution, iteration, graph_hash of every step that has
        a module graph (``comgra_like.watch``): one rank's (``rank``, by default the
        lowest), or those of ``ranks`` with a ``rank`` column."""
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return module_graph_steps(self._watch, trial_id, chosen, with_rank)

    def read_module_graph(self, trial_id: str, training_step: int,
                          iteration: int | None = None,
                          rank: int | None = None) -> dict | None:
        """The module graph of a recorded step (docs/FORMAT.md, "watch()"): a dict with
        ``invocations`` and ``edges``; the first iteration's (root-module forward) unless
        ``iteration`` is given; as ``rank`` recorded it (by default the lowest rank: the
        ranks of data-parallel training share one graph file, written once by content
        hash). None when the step has none."""
        self._trial(trial_id)
        (chosen,), _ = self._table_ranks(trial_id, rank, None)
        digest = module_graph_hash(self._watch, trial_id, training_step, iteration, chosen)
        if digest is None:
            return None
        key = self._key("module_graph", trial_id, digest)
        structure = self._cache.get(key)
        if structure is None:
            structure = read_module_graph_file(self.path, trial_id, digest)
            self._cache.put(key, structure, 4096)
        return structure

    def read_watch_report(self, trial_id: str) -> dict | None:
        """Which modules ``comgra_like.watch`` hooked, which it skipped and why (a dict
        with ``hooked``, ``skipped``: [{module, reason}], ...); None without a watch."""
        self._trial(trial_id)
        return self._watch.report(trial_id)

    # ----- per-module metrics (watch(metrics=...), Monitor) --------------------------------

    def read_metrics(self, trial_id: str, module: Any = None, metric: Any = None,
                     steps: Any = None, *, rank: int | None = None,
                     ranks: Any = None) -> pd.DataFrame:
        """The per-module metrics of a trial, one row per (training_step, module, metric,
        backward_pass), sorted by (metric, module, training_step, backward_pass).

        Columns: training_step, type_of_execution, module (its qualified name, e.g.
        ``model.fc1``), module_class (``Linear``), metric (``InputCovMaxEig``, a user
        metric's name, ``loss``), backward_pass (0 unless the metric has a value per
        backward pass of the step), value, vector (a numpy float64 array for spectra,
        else None), wall_time (unix time; called ``time`` before the vocabulary was
        settled, docs/FORMAT.md "Vocabulary"). ``module``, ``metric`` and ``steps`` filter (a
        value or a list). An empty frame for a trial without metrics.

        A distributed recording: one rank's rows (``rank``, by default the lowest), or
        with ``ranks`` (``"all"`` or a list) those ranks' rows with a ``rank`` column.
        Metrics are not merged over ranks: each is a quantity of one rank's batch and
        model state (a spectrum or a dead-unit rate of the combined batch cannot be made
        from the ranks' values); compare the ranks side by side.
        """
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return read_metrics(self._metrics, trial_id, ranks=chosen, with_rank=with_rank,
                            module=module, metric=metric, steps=steps)

    def list_metrics(self, trial_id: str, rank: int | None = None,
                     ranks: Any = None) -> pd.DataFrame:
        """(module, module_class, metric, n_points) of every metric a trial has: one
        rank's (``rank``, by default the lowest), or those of ``ranks`` with a ``rank``
        column (one row per rank)."""
        self._trial(trial_id)
        chosen, with_rank = self._table_ranks(trial_id, rank, ranks)
        return list_metrics(self._metrics, trial_id, ranks=chosen, with_rank=with_rank)

    def read_optimizer_state(self, trial_id: str, **filters: Any) -> pd.DataFrame:
        """The optimizer's quantities of a trial recorded with ``watch(optimizer=)``
        (``query/optimizer.py`` ``read_optimizer_state``: parameters=, quantities=, steps=,
        rank=; docs/OPTIMIZER.md)."""
        from .optimizer import read_optimizer_state
        return read_optimizer_state(self, trial_id, **filters)

    # ----- gradient flows and probes (issue 18, comgra_like/query/flows.py) --------------
    # The flows/ and probes/ folders are listed at each call (immutable records, committed
    # by their JSON), so a probe's result shows on the GUI's next read without a refresh.

    def read_flows(self, trial_id: str, *, training_step: int | None = None,
                   probe_id: str | None = "*", source: str | None = None,
                   target: str | None = None) -> list:
        """The stored flows of a trial (``FlowInfo``, oldest first); ``probe_id``: "*" for
        all, None for the run's own flows, or one probe's id."""
        from .flows import list_flows
        return list_flows(self.path, trial_id, training_step=training_step, probe_id=probe_id,
                          source=source, target=target)

    def read_flow(self, trial_id: str, record_id: str) -> Any:
        """One flow with its arrays (``FlowData``; memory-mapped)."""
        from .flows import read_flow
        return read_flow(self.path, trial_id, record_id)

    def read_probes(self, trial_id: str) -> list:
        """The probes of a trial (``ProbeInfo``: pending, done or failed), oldest first."""
        from .flows import list_probes
        return list_probes(self.path, trial_id)

    def read_probe_input(self, trial_id: str, probe_id: str) -> np.ndarray:
        """The edited input a probe was submitted with."""
        from .flows import read_probe_input
        return read_probe_input(self.path, trial_id, probe_id)

    # ----- the flight recorder (issue 30, comgra_like/query/flight.py) --------------------
    # The flight/ folder is listed at each call, like flows/ (windows are immutable).

    def list_flight_triggers(self, trial_id: str) -> list:
        """The flight recorder's triggers of a trial (``FlightTrigger``), oldest first."""
        from .flight import list_flight_triggers
        return list_flight_triggers(self.path, trial_id)

    def read_flight(self, trial_id: str, name: str | None = None) -> pd.DataFrame:
        """The statistics rows of a trial's flight windows (or of one), ``flight=True``."""
        from .flight import read_flight
        return read_flight(self.path, trial_id, name)

    def read_flight_values(self, trial_id: str, name: str) -> dict:
        """The full values a flight window kept: {(step, tensor, role): array}."""
        from .flight import read_flight_values
        return read_flight_values(self.path, trial_id, name)
