"""What ``watch()``'s driver (``record/hooks.py``) sends to the writer besides the step's
tensors: the module graph of each recorded forward (hashed once per structure, sent once
per trial), the watch configuration and the watch report. A mixin of ``Watcher``."""

from __future__ import annotations

import logging

from ..format.graphs import canonical_hash
from ..protocol import ModuleGraph, Watch, WatchReport, WatchStep
from .module_graph import Invocation, edges_of, structure, structure_key
from .watch_report import build_report, summary_line

log = logging.getLogger("comgra_like")


class WatchOutput:
    """The module graphs, the configuration and the report of a ``Watcher``."""

    # ----- module graph, configuration, report ------------------------------------------

    def _send_module_graph(self, invocations: list[Invocation],
                           more_edges: list[list[str]] = ()) -> None:
        edges = edges_of(invocations)
        if more_edges:
            edges = sorted({tuple(e): e for e in [*edges, *more_edges]}.values())
        # Steps repeat their structure: a key of plain tuples finds its hash without
        # building and hashing the JSON again
        key = structure_key(invocations, edges, self.batch_size)
        digest = self._graph_keys.get(key)
        writer = self.rec.writer
        graph = None
        if digest is None:
            graph = structure(invocations, edges, self.batch_size, self.shared)
            digest = canonical_hash(graph)
            self.graphs_hashed += 1
            if len(self._graph_keys) >= 4096:  # structures that change every step
                self._graph_keys.clear()
            self._graph_keys[key] = digest
        sent = self._sent_graphs.setdefault(id(self.rec), set())
        if digest not in sent:  # each trial (training, validation) has its own graphs
            sent.add(digest)
            if graph is None:  # known by its key, new to this trial
                graph = structure(invocations, edges, self.batch_size, self.shared)
            writer.submit(ModuleGraph(digest, graph))
        try:
            time = float(self.s.time_fn(self.module, self.step_no))
        except Exception:  # noqa: BLE001 - a time_log that fails falls back to the step
            time = float(self.step_no)
        writer.submit(WatchStep(int(self.step_no), str(self.toe), int(self.iteration),
                                         digest, time))
        if not self.own:
            self.steps_recorded += 1
            self._write_report()

    def params_map(self) -> dict[str, list[str]]:
        """{parameter full name (as the recorder tracks it): [module name, parameter]}."""
        out = {}
        for sub in self.module.modules():
            name = self.names[id(sub)]
            for p_name, _p in sub.named_parameters(recurse=False):
                out.setdefault(f"{name}.{p_name}", [name, p_name])
        return out

    def _send_config(self, rec=None) -> None:
        if self.s.structure_only:
            return
        config = {**self.s.histogram, "log": list(self.s.log),
                  "io_nodes": sorted(self.io_nodes), "no_io_grad": sorted(self.ignored),
                  "params": self.params_map(),
                  "time_unit": self.s.time_name}
        for r in [rec] if rec is not None else self.recorders():
            r.writer.submit(Watch(config))

    def recorders(self) -> list:
        """The recorders of this watcher: the training trial's, the validation trial's."""
        return [r for r in (self.train_rec, self.val_rec) if r is not None]

    def report(self) -> dict:
        """Which modules were hooked, which were skipped and why (``watch_report.py``)."""
        return build_report(self)

    def _write_report(self) -> None:
        report = self.report()
        if report == self._last_report:
            return
        self._last_report = report
        for rec in self.recorders():
            if rec.writer is not None and not rec.finalized:
                rec.writer.submit(WatchReport(report))
        if not self._logged and self.steps_recorded:
            self._logged = True
            msg = summary_line(report)
            if self.s.verbose:
                log.warning(msg)
            else:
                log.info(msg)

