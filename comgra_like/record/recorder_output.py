"""The recorder's side of the writer: flushing, finalizing, graphs and recorded steps
sent to the writer process (comgra_like/transport/client.py).

A mixin of ``ComgraRecorder`` (record/recorder.py): it uses the recorder's state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..vocabulary import FORWARD, UPDATE
from .lifecycle import Stage

if TYPE_CHECKING:
    from .capture import Capturer

log = logging.getLogger("comgra_like")


class WriterCalls:
    """flush, drain, finalize and what is sent to the writer."""

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything sent to the writer so far (recorded steps, KPIs, notes,
        ...) is on disk, in shards a reader sees. ``timeout``: seconds to wait at most
        (a StorageError then). A failure of the writer is raised here as StorageError."""
        if not self.comgra_is_active or self._finalized:
            return
        self._submit_kpis()
        for collector in self._metrics:
            collector.flush()
        self._writer.flush(timeout)
        if self._flight is not None:  # a GPU's last step is judged now (may raise on purpose)
            self._flight.settle()

    def drain(self) -> None:
        """Block until the writer has taken in every recorded step sent so far (their
        shared memory is free again); the rows may still wait in the writer for their
        shard (``flush`` writes them). Benchmarks use it to measure the writer's work."""
        if not self.comgra_is_active or self._finalized:
            return
        self._writer.drain()

    @property
    def capturer(self) -> Capturer:
        """The step capture (``record/capture.py``), public for tests and benchmarks: its
        counters ``plans_made`` (captures planned afresh) and ``captures``."""
        return self._capturer

    @property
    def writer(self):
        """The connection to this recorder's writer (``comgra_like.transport.client``),
        None when the recorder is inactive. Its public part: ``mode`` ("process" or
        "thread"), ``pid`` (the writer process, None in a thread), ``flush_seconds``
        (settable: how old buffered rows may get before they are written, default 1),
        ``flush(timeout=None)``, ``drain()`` and ``close()`` (write everything and end the
        writer without finalizing: the trial stays uncompacted and "running")."""
        return getattr(self, "_writer", None)

    def finalize(self) -> None:
        """Write everything still buffered, compact the trial and mark it finished."""
        if not self.comgra_is_active or self._finalized:
            return
        if self._stage != "idle":
            log.warning(
                "comgra_like: finalize() was called inside step %s (finish_batch() was not "
                "called), so that step is not recorded; call finish_batch() before finalize()",
                self.training_step)
            self._drop_step()
            self._stage = Stage.IDLE
            if self._lifecycle:
                self._lifecycle.step_dropped(self._event())
        self._finalized = True
        if self._lifecycle:
            try:
                self._lifecycle.finalize()
            except BaseException:
                self._finalize_writer()
                raise
        flight, self._flight = self._flight, None
        try:
            if flight is not None:  # a GPU's last step is judged now (may raise on purpose)
                flight.settle()
        finally:
            self._finalize_writer()

    def _finalize_writer(self) -> None:
        for collector in self._metrics:  # the last step's metrics, then no more hooks
            collector.close()
        self._metrics = []
        # A script that keeps its finished recorders (to report on them, or in a global
        # until the next model replaces it) must not keep the models' tensors alive.
        self._params = []
        self._param_template = None
        self._submit_kpis()
        self._writer.close(finish=True)  # compacts the trial and marks it finished

    def _write_graph(self, digest: str, structure: dict) -> None:
        """A graph structure seen for the first time in this trial: the writer stores it."""
        self._writer.submit_graph(digest, structure)

    def _send_step(self) -> None:
        """Copy the forward values and the updated parameters, and send the step.

        Forward values are copied now (training code may reuse its buffers), gradients were
        copied when recorded, parameters at start_batch; the parameters after the
        optimizer step are copied too, and the writer subtracts. Statistics, singular
        values and Arrow tables are the writer process's work.
        """
        step = self._step
        regs = [reg for reg in step.regs if reg.alias_of is None]
        self._capturer.capture(step, self._batch_size, regs,
                               [reg.tensor if reg.values is None else reg.values for reg in regs],
                               [UPDATE if reg.param_index >= 0 else FORWARD for reg in regs])
        body = self._capturer.message(step, self.type_of_execution, self._sample_indices,
                                      self._sample_categories, self._batch_size)
        slot, step.slot = step.slot, None
        self._writer.submit_batch(slot, body)
        if self._kpis.rows:
            self._submit_kpis()
