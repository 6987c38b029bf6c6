"""The flight recorder's catalog (issue 30, ``record/flight.py``): one entry per
(tensor name, role) ever seen, the codes that say what a row means for the step's
scalars (the gradient norm, the update ratio, the loss), and a step's record in the
ring. A mixin of :class:`~comgra_like.record.flight.FlightRecorder`: its state lives on
the recorder (``_init_catalog``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Codes of a row's meaning, for the step's scalars (grad norm, update ratio, loss).
OTHER, PARAM_VALUE, PARAM_GRAD, PARAM_UPDATE, LOSS_VALUE, LOSS_KPI = range(6)


@dataclass
class StepRecord:
    """One step's statistics in the ring: a catalog key and a row of statistics per
    tensor observed, the sample ids registered, and the step's scalars once judged."""

    step: int
    idx: np.ndarray  # catalog index per row
    values: np.ndarray  # (rows, len(STATISTICS)) float64
    sample_ids: list | None
    scalars: dict[str, float | None]


class FlightCatalog:
    """The catalog: the name, node, role, kind, size and code of every key."""

    def _init_catalog(self) -> None:
        self._keys: dict[tuple[str, str], int] = {}
        self._names: list[str] = []
        self._nodes: list[str] = []
        self._roles: list[str] = []
        self._kinds: list[str] = []
        self._numel: list[int] = []
        self._codes: list[int] = []
        self._codes_np = np.zeros(0, np.int8)

    def _key(self, name: str, node: str, role: str, kind: str, code: int,
             tensor: torch.Tensor | None) -> int:
        key = self._keys.get((name, role))
        if key is None:
            key = self._keys[(name, role)] = len(self._names)
            self._names.append(name)
            self._nodes.append(node)
            self._roles.append(role)
            self._kinds.append(kind)
            self._codes.append(code)
            self._numel.append(1 if tensor is None else int(tensor.numel()))
            self._codes_np = np.asarray(self._codes, np.int8)
        return key
