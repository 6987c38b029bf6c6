"""Taiyi's entry point: ``Monitor(model, config)``, ``monitor.track(step)`` after
``backward()``, ``monitor.get_output()`` -> ``{module_name: {quantity: {step: value}}}``.

Taiyi's users switch by changing the import (``from comgra_like import Monitor``). The
numbers are recorded like every other recording: a trial of its own in a group folder
(``path``, default ``./comgra_monitor``) that ``comgra --path <path>`` opens on its
Metrics page and ``Group.read_metrics`` reads; ``get_output`` reads them back from there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigurationError
from ..format.schema import TRIAL_ID_PATTERN
from ..objects import DecisionMakerForRecordingsFrequencyPerType
from ..query import open_group
from ..record.metric_collect import Collector
from ..record.metric_config import resolve_config
from ..record.ranks import common_time
from ..record.recorder import ComgraRecorder

DEFAULT_PATH = "./comgra_monitor"


class Monitor:
    """Per-module metrics on Taiyi's schedules, recorded into a trial of their own.

    ``config``: Taiyi's format (see ``comgra_like.record.metric_config``). ``path``: the group
    folder; ``trial_id``: default ``monitor-<date>-<time>``; ``name``: the model's name
    in the recording (module names are ``<name>.<module>``).

    ``track(step, loss=None)`` after ``backward()`` (before or after the optimizer's
    step: the weights are read when it is called, as Taiyi does) computes the metrics
    due at ``step``; the hooks collect during the forward and backward passes that
    precede it, expecting the steps to count up by one (a ``track`` with another step
    number computes what can still be read then: weights and their gradients).
    """

    def __init__(self, model: torch.nn.Module, config: Mapping | None = None, *,
                 path: str = DEFAULT_PATH, trial_id: str | None = None,
                 name: str = "model"):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(
                f"Monitor needs a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(name, str) or not name or "." in name or "#" in name:
            raise ConfigurationError(
                f"name={name!r}: the model's name must be non-empty, without '.' or '#'")
        specs = resolve_config(model, {} if config is None else config, name)
        if trial_id is None:
            # the same on every rank of a distributed job (rank 0's clock)
            trial_id = "monitor-" + time.strftime("%Y%m%d-%H%M%S",
                                                  time.localtime(common_time()))
        if not isinstance(trial_id, str) or not TRIAL_ID_PATTERN.match(trial_id):
            raise ConfigurationError(
                f"trial_id {trial_id!r} is not a valid trial id: letters, digits, '.', '_' "
                "and '-', not starting with '.'")
        folder = Path(path).expanduser().resolve()
        self.model = model
        self.name = name
        self.recorder = ComgraRecorder(
            folder.parent, folder.name, trial_id,
            DecisionMakerForRecordingsFrequencyPerType(1), max_num_batch_size_to_record=0,
            calculate_svd_and_other_expensive_operations_of_parameters=False)
        try:
            self.recorder.track_module(name, model)  # the module tree (Modules page)
        except BaseException:
            self.recorder.finalize()
            raise
        self._next = 0
        self.collector = Collector(model, specs, name, self.recorder.writer,
                                   lambda: self._next)
        self._closed = False

    @property
    def group_path(self) -> Path:
        """The group folder (``comgra --path`` opens it)."""
        return self.recorder.group_path

    @property
    def trial_id(self) -> str:
        return self.recorder.trial_id

    def track(self, global_step: int, loss: Any = None) -> None:
        """Compute the metrics due at ``global_step`` (call it after ``backward()``);
        ``loss`` (a number or a one-element tensor) is recorded as the metric ``loss``."""
        if self._closed:
            raise ConfigurationError("track() after close(): make a new Monitor")
        if type(global_step) is not int:
            if not isinstance(global_step, (int, np.integer)) or isinstance(global_step, bool):
                raise ConfigurationError(
                    f"track(global_step={global_step!r}): the step must be an integer")
            global_step = int(global_step)
        c = self.collector
        if c.open != global_step:
            # the hooks expected another step: what they hold is not this step's
            c.discard()
            if c.current != global_step:
                c.begin(global_step)
        if loss is not None:
            c.log_loss(loss, global_step)
        c.finish()
        self._next = global_step + 1

    def get_output(self) -> dict[str, dict[str, dict[int, Any]]]:
        """``{module_name: {quantity: {step: value}}}`` of everything tracked so far
        (Taiyi's shape): module names as ``model.named_modules()`` gives them (``''``:
        the model, which holds ``loss``); per-backward quantities give the last pass's
        value (as Taiyi), spectra a numpy array."""
        if not self._closed:
            self.collector.flush()
            self.recorder.flush()
        group = open_group(self.group_path)
        # this process's rank: under torch.distributed every rank records its own rows
        frame = group.read_metrics(self.trial_id, rank=getattr(self.recorder, "rank", 0))
        out: dict[str, dict[str, dict[int, Any]]] = {}
        prefix = self.name + "."
        for row in frame.itertuples(index=False):
            module = row.module
            local = "" if module == self.name else module.removeprefix(prefix)
            value = row.vector if row.vector is not None else float(row.value)
            # rows are sorted by backward pass: the last pass's value stays
            out.setdefault(local, {}).setdefault(row.metric, {})[int(row.training_step)] = value
        return out

    def close(self) -> None:
        """Remove the hooks, write everything and finish the trial (compacted)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.collector.close()
        finally:
            self.recorder.finalize()

    def __enter__(self) -> Monitor:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, *exc) -> None:
        self.close()
