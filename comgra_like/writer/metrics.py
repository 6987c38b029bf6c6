"""The per-module metrics in the writer process (issue 16): computes the built-in
quantities (``comgra_like.metrics.quantities``, numpy) of the data a
``protocol.MetricData`` carries and makes the rows of the ``metrics`` table.

The state of stateful quantities (WeightParamJump, correlations of consecutive passes,
updates) is kept here per (module, metric) of the trial. A quantity that fails on its
data stores NaN and says why once on stderr: one bad metric never stops the recording.
"""

from __future__ import annotations

import base64
import math
import os
import sys

import numpy as np
import pyarrow as pa

from ..format.layout import METRICS
from ..format.schema import METRICS_SCHEMA
from ..metrics.quantities import QUANTITIES, ModuleData
from ..protocol import MetricData, ProtocolError, Start
from .step_processor import StepProcessor

_PLAIN = pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                    for f in METRICS_SCHEMA])
_FIELDS = ("input", "output", "weight", "weight_grad", "bias")


def unpack(packed: list, blob: np.ndarray | None = None) -> np.ndarray:
    """The array of a ``[dtype, shape, data]`` entry of a MetricData message (``data`` an
    offset into ``blob``, the message's file, or the bytes themselves)."""
    dtype, shape, data = packed
    dtype = np.dtype(dtype)
    shape = [int(s) for s in shape]
    if isinstance(data, int):
        if blob is None:
            raise ProtocolError("a metrics array names an offset, but the message has no file")
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(blob, dtype=dtype, count=count, offset=data).reshape(shape)
    buffer = base64.b64decode(data) if isinstance(data, str) else data
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def read_blob(path: str) -> np.ndarray:
    """The bytes of a MetricData file; the file is unlinked (it is this process's)."""
    try:
        return np.fromfile(path, dtype=np.uint8)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


class Metrics(StepProcessor):
    """The writer's processor of the per-module metrics: rows of the metrics table from
    MetricData messages (``metric_data``), state kept per (module, metric)."""

    def __init__(self, trial_id: str):
        self.trial_id = trial_id
        self.states: dict[tuple[str, str], dict] = {}
        self._warned: set[tuple[str, str]] = set()

    @classmethod
    def from_start(cls, start: Start) -> Metrics:
        """The processor of a trial (an entry of ``processors.PROCESSORS``)."""
        return cls(start.trial_id)

    def metric_data(self, msg: MetricData) -> dict[str, pa.Table]:
        return self.table(msg)

    def table(self, msg: MetricData) -> dict[str, pa.Table]:
        """The metrics rows of one message (``{}`` when it has none)."""
        rows: list[tuple] = []
        blob = read_blob(msg.path) if msg.path else None
        for module, module_class, names, arrays in msg.modules:
            self._module(module, module_class, names, arrays, rows, blob)
        step, wall = int(msg.step), float(msg.time)
        rows = [(step, *row, wall) for row in rows]
        for step, module, module_class, metric, backward, value, wall in msg.values:
            rows.append((int(step), module, module_class, metric, int(backward),
                         math.nan if value is None else float(value), None, float(wall)))
        if not rows:
            return {}
        n = len(rows)
        step, module, module_class, metric, backward, value, vector, wall = zip(*rows)
        table = pa.table({
            "trial_id": [self.trial_id] * n,
            "training_step": list(step),
            "type_of_execution": [msg.toe] * n,
            "module": list(module),
            "module_class": list(module_class),
            "metric": list(metric),
            "backward_pass": list(backward),
            "value": list(value),
            "vector": list(vector),
            "wall_time": list(wall),
        }, schema=_PLAIN)
        return {METRICS: table.cast(METRICS_SCHEMA)}

    def _module(self, module: str, module_class: str, names: list[str], arrays: dict,
                rows: list, blob: np.ndarray | None) -> None:
        data = ModuleData(module_class)
        grads: list[np.ndarray] = []
        for need, packed in arrays.items():
            if need == "output_grad":
                grads = [unpack(p, blob) for p in packed]
            elif need in _FIELDS:
                setattr(data, need, unpack(packed, blob))
            else:
                data.extra[need] = unpack(packed, blob)
        for name in names:
            quantity = QUANTITIES.get(name)
            if quantity is None:
                self._warn(module, name, "no such built-in quantity in this writer")
                continue
            state = self.states.setdefault((module, name), {})
            if quantity.per_backward:
                for index, grad in enumerate(grads):
                    data.output_grad = grad
                    rows.append(self._row(module, module_class, name, index,
                                          lambda q=quantity, s=state: q.compute(data, s)))
                data.output_grad = None
            else:
                if "output_grad" in quantity.needs and grads:
                    data.output_grad = grads[-1]
                rows.append(self._row(module, module_class, name, 0,
                                      lambda q=quantity, s=state: q.compute(data, s)))
                data.output_grad = None

    def _row(self, module: str, module_class: str, name: str, backward: int, compute
             ) -> tuple:
        try:
            result = compute()
        except Exception as e:  # noqa: BLE001 - one failing quantity must not stop the writer
            self._warn(module, name, f"{type(e).__name__}: {e}")
            return (module, module_class, name, backward, math.nan, None)
        if isinstance(result, np.ndarray) and result.ndim >= 1:
            vector = [float(v) for v in result.ravel()]
            return (module, module_class, name, backward,
                    vector[0] if vector else math.nan, vector)
        return (module, module_class, name, backward, float(result), None)

    def _warn(self, module: str, name: str, why: str) -> None:
        if (module, name) not in self._warned:
            self._warned.add((module, name))
            print(f"comgra_like writer: metric {name} of {module} could not be computed "
                  f"({why}); it is stored as NaN", file=sys.stderr)
