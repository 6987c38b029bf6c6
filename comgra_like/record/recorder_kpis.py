"""The recorder's KPI calls: ``record_kpi_in_graph`` checks a value and hands it to the
KPI buffer (record/kpi.py), which thins the curve and sends rows with the steps.

A mixin of ``ComgraRecorder`` (record/recorder.py): it uses the recorder's state.
"""

from __future__ import annotations

import numbers

import torch

from ..errors import CallOrderError, ConfigurationError
from ..vocabulary import DEFAULT_TYPE_OF_EXECUTION
from .recorder_checks import INT64_MAX, INT64_MIN_ABS, as_step


class KpiCalls:
    """``record_kpi_in_graph`` and the KPI rows' way to the writer."""

    def record_kpi_in_graph(self, kpi_group, kpi_name, val, timepoint=None,
                            record_even_if_recording_is_inactive=False) -> None:
        """A point of a KPI curve (Graphs page), stored densely early and sparser later."""
        if not self.comgra_is_active:
            return
        if (self._flight is not None and self._stage != "idle"
                and isinstance(val, (numbers.Real, torch.Tensor)) and not isinstance(val, bool)):
            self._flight.observe_kpi(kpi_group, kpi_name, val)
        if not self._recording and not record_even_if_recording_is_inactive:
            return
        if self._finalized:
            raise CallOrderError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}) was called after finalize(): "
                "the trial is finished; record KPIs before finalize()"
            )
        if isinstance(val, torch.Tensor):
            if val.numel() != 1:
                raise ConfigurationError(
                    f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): the value must be a "
                    f"number or a one-element tensor, got shape {tuple(val.shape)}"
                )
            val = val.item()
        elif isinstance(val, (str, bytes)):
            # float() would parse it; comgra refuses it, and a number was meant
            raise ConfigurationError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): value {val!r} is not a "
                "number but a string; pass the number itself (a float, an int, a numpy scalar "
                "or a one-element tensor)"
            )
        elif getattr(val, "ndim", 0) and getattr(val, "size", 0) == 1:
            val = val.item()  # a one-element numpy array, like a one-element tensor
        try:
            val = float(val)
        except (TypeError, ValueError, OverflowError):
            raise ConfigurationError(
                f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}): value {val!r} is not a number"
            ) from None
        if timepoint is None:
            if self.training_step is None:
                raise CallOrderError(
                    "record_kpi_in_graph() without a timepoint needs a training step: call "
                    "start_batch() first or pass timepoint="
                )
            timepoint = self.training_step
        elif type(timepoint) is not int or not -INT64_MIN_ABS <= timepoint <= INT64_MAX:
            timepoint = as_step(timepoint, f"record_kpi_in_graph({kpi_group!r}, {kpi_name!r}, "
                                            "timepoint=...)")
        args = (str(kpi_group), str(kpi_name), timepoint, val)
        if self._recording and not self._decided:
            self._step.pending_kpis.append(args)
        else:
            self._offer_kpi(*args)

    def _offer_kpi(self, group, name, timepoint, val) -> None:
        self._kpis.offer(group, name, self.type_of_execution or DEFAULT_TYPE_OF_EXECUTION,
                         timepoint, val)

    def _submit_kpis(self) -> None:
        if self._kpis.rows:
            self._writer.submit_kpis(self._kpis.take())
