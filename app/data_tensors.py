"""The tensor reads of :class:`~app.data.AppData`: one tensor, a series, a painted value.

:class:`TensorReads` is a mixin of ``AppData`` (app/data.py). It finds where a graph
node's tensor is stored (imports follow their alias), reads the selected tensor or its
statistic over all steps (one rank's or all ranks merged), and the per-node values the
graph is painted with (:class:`~app.statistic_table.StatisticTable`, cached per data
version). The listing it builds on (graphs, the tensor index, ``cached``, ``safely``,
``trial_version``) is the using class's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.vocabulary import ANY_TYPE, BATCH_AGGREGATIONS, NO_BATCH

from . import selection as sel
from .controls.rank_selector import MERGED
from .statistic_table import StatisticTable


class TensorReads:
    """Reads of recorded tensors and their statistics, for a selection or a whole graph.

    A mixin: the class using it has ``_group``, ``cached``, ``safely``, ``trial_version``,
    ``trial_ids``, ``graph``, ``graph_node`` and ``tensor_index``.
    """

    def data_location(self, node: Any, role: str) -> tuple[str, str, int]:
        """(node, role, iteration) where a graph node's tensor is stored (follows aliases)."""
        alias = (getattr(node, "alias_of", None) or {}).get(role)
        if alias:
            return str(alias[0]), str(alias[1]), int(alias[2])
        return str(getattr(node, "node", node.name)), role, int(node.iteration)

    def recorded(
        self, trial_id: str, training_step: int, node: Any, role: str
    ) -> dict[str, tuple[str, ...]]:
        """Recording type -> aggregation keys recorded for one role of a graph node."""
        stored_node, stored_role, iteration = self.data_location(node, role)
        return self.tensor_index(trial_id, training_step).get(
            (iteration, stored_node, stored_role), {}
        )

    def ranks(self, trial_id: str | None) -> list[int]:
        """The ranks that recorded a trial ([0] for a single process; [] when unknown)."""
        if not trial_id:
            return []
        return self.safely("ranks", lambda: self._group.list_ranks(trial_id), [])

    def _stored(self, current: Mapping[str, Any]) -> tuple:
        """Where a complete selection's data is stored: (node, role, iteration,
        aggregation, sample index); NotFoundError for a node not in the step's graph."""
        node = self.graph_node(
            current["trial"], current["training_step"], current["iteration"], current["node"]
        )
        if node is None:
            raise NotFoundError(f"node {current['node']!r} is not in this graph")
        stored_node, stored_role, iteration = self.data_location(node, current["role"])
        return (stored_node, stored_role, iteration, *sel.parse_aggregation(
            current["aggregation"]))

    def read_tensor(self, current: Mapping[str, Any], rank: Any = None) -> Any:
        """The TensorRecord of a complete selection (raises NotFoundError); ``rank``: one
        rank's (None: the lowest) or ``MERGED`` (``controls.rank_selector``), all ranks
        merged (a selection of one sample cannot be merged: a ConfigurationError says so)."""
        stored_node, stored_role, iteration, aggregation, sample_index = self._stored(current)
        args = (current["trial"], current["training_step"], iteration, stored_node,
                stored_role, current["recording_type"], aggregation)
        if rank == MERGED:
            return self._group.read_merged_tensor(*args)
        return self._group.read_tensor(*args, sample_index, rank)

    def read_series(self, current: Mapping[str, Any], statistic: str,
                    rank: Any = None) -> pd.DataFrame:
        """The statistic of the selected tensor over all recorded steps (cached per
        version), of one rank (None: the lowest) or ``MERGED``."""
        stored_node, stored_role, iteration, aggregation, sample_index = self._stored(current)
        toe = current.get("type_of_execution")
        toe = None if toe in (None, ANY_TYPE) else toe
        # Iterations are relative for nodes of a recurrent graph: a node stored at the
        # current iteration is followed at that iteration; step-level data at -1.
        key = (
            "series",
            current["trial"],
            self.trial_version(current["trial"]),
            stored_node,
            stored_role,
            iteration,
            current["recording_type"],
            aggregation,
            sample_index,
            statistic,
            toe,
            rank,
        )
        if rank == MERGED:
            return self.cached(key, lambda: self._merged_series(
                current["trial"], stored_node, stored_role, iteration,
                current["recording_type"], aggregation, statistic, toe))
        return self.cached(
            key,
            lambda: self._group.read_series(
                current["trial"],
                stored_node,
                stored_role,
                current["recording_type"],
                aggregation,
                statistic,
                iteration=iteration,
                sample_index=sample_index,
                type_of_execution=toe,
                rank=rank,
            ),
        )

    def _merged_series(self, trial_id: str, node: str, role: str, iteration: int,
                       recording_type: str, aggregation: str, statistic: str,
                       toe: str | None) -> pd.DataFrame:
        """read_series' frame of every rank merged (query/ranks.py's rules)."""
        if aggregation not in (*BATCH_AGGREGATIONS, NO_BATCH):
            raise ConfigurationError(
                "one sample belongs to one rank's batch and cannot be merged over ranks: "
                "choose a rank, or a batch aggregation")
        frame = self._group.read_merged_statistics(
            trial_id, nodes=node, roles=role, recording_types=recording_type,
            aggregations=aggregation, statistics=statistic, iterations=iteration,
            types_of_execution=toe)
        return frame[["training_step", "type_of_execution", "iteration", statistic]].rename(
            columns={statistic: "value"}).reset_index(drop=True)

    def statistic_table(self, trial_id: str, statistic: str) -> StatisticTable | None:
        """One statistic of the whole trial for painting (one query, cached per version;
        None: the trial has no readable statistics)."""
        if self._group is None or trial_id not in self.trial_ids():
            return None
        key = ("statistic_table", trial_id, self.trial_version(trial_id), statistic)
        return self.cached(
            key,
            lambda: self.safely(
                f"{statistic} of {trial_id}",
                lambda: StatisticTable(self._group, trial_id, statistic),
                None,
            ),
        )

    def node_values(
        self,
        trial_id: str,
        training_step: int,
        iteration: int,
        statistic: str,
        recording_type: str,
        aggregation: str,
    ) -> dict[str, tuple[float | None, str | None, bool]] | None:
        """Graph node name -> (value, role, holds NaN/Inf) of ``statistic`` at a step.

        A node shows its first role (in graph order) with a value of ``recording_type``
        and ``aggregation`` (a tensor without a batch dimension its own); it holds
        NaN/Inf when any of its roles does. Nodes are found where their data is stored
        (imports follow their alias, like :meth:`read_tensor`). None: no table or graph.
        """
        table = self.statistic_table(trial_id, statistic)
        graph = self.graph(trial_id, training_step, iteration)
        if table is None or graph is None:
            return None
        at_step = table.at_step(training_step, recording_type, aggregation)
        out: dict[str, tuple[float | None, str | None, bool]] = {}
        for node in graph.nodes:
            value, shown_role, non_finite = None, None, False
            for role in node.roles:
                found = at_step.get(self._stored_key(node, role))
                if found is None:
                    continue
                non_finite |= found[1]
                if value is None and found[0] is not None:
                    value, shown_role = found[0], role
            out[node.name] = (value, shown_role, non_finite)
        return out

    def _stored_key(self, node: Any, role: str) -> tuple[int, str, str]:
        stored_node, stored_role, iteration = self.data_location(node, role)
        return iteration, stored_node, stored_role
