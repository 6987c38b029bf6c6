"""The body of the Lightning callback, without its base class: ``lightning.py`` makes it
a ``lightning.pytorch.Callback``, ``pytorch_lightning.py`` a ``pytorch_lightning.Callback``
(the two packages' classes are distinct). No framework is imported here; the behaviour
is described in ``lightning.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigurationError
from .callbacks import (
    WatchSettings,
    before_clipping,
    plain_config,
    remove_all,
    run_closure_first,
    start_watch,
)

log = logging.getLogger("comgra_like")

DEFAULT_LOG_FREQ = 50  # Lightning's own log_every_n_steps


class LightningRecording(WatchSettings):
    """Record a Lightning training run with ``comgra_like.watch`` (module docstring).

    ``path``: the group folder (default ``<trainer.log_dir>/comgra``); ``log_freq``:
    record every ``log_freq``-th step (steps ``k % log_freq == 0``); ``metrics``,
    ``flight_recorder``: as watch() takes them; ``config``: the trial's hyperparameters
    (default: the module's ``hparams``); ``module``: the attribute of the
    LightningModule to watch when its training step does not call ``self(...)``;
    further keyword arguments go to watch() (``log=``, ``bins=``, ``trial_id=``, ...).
    ``handle``: watch()'s ``WatchHandle`` while fit runs (and after it, for its trial).
    """

    def __init__(self, path: str | Path | None = None, log_freq: int = DEFAULT_LOG_FREQ,
                 metrics: dict | None = None, config: dict | None = None,
                 flight_recorder=None, module: str | None = None, **watch_kwargs: Any):
        WatchSettings.__init__(self, path, log_freq, metrics, config, flight_recorder,
                               watch_kwargs)
        if module is not None and (not isinstance(module, str) or not module):
            raise ConfigurationError(
                f"module= names an attribute of the LightningModule (e.g. 'model'), got "
                f"{module!r}")
        self.module_attribute = module
        self._called = False
        self._probe = None
        self._closure_hooks: list = []
        self._checked = False
        self._loss_failed = False

    # ----- Lightning's hooks ------------------------------------------------------------

    def on_fit_start(self, trainer, pl_module) -> None:
        # after the strategy's setup: the optimizers exist, the process group too
        if self.watching:
            return
        target = self._target(trainer, pl_module)
        path = Path(self.path) if self.path is not None else self.default_path(trainer)
        config = self.config if self.config is not None else plain_config(
            dict(pl_module.hparams))
        optimizers = [o for o in trainer.optimizers if isinstance(o, torch.optim.Optimizer)]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        # Lightning runs the forward and backward as optimizer.step()'s closure, after the
        # step's pre-hooks: run it first, so that watch()'s optimizer hooks (registered
        # after this one) see the gradients the step uses
        self._closure_hooks = [run_closure_first(o) for o in optimizers]
        self.handle = start_watch(target, path, self.log_freq, self.metrics, config,
                                  self.flight_recorder, optimizers, scaler,
                                  self.watch_kwargs)
        if self.handle is not None:
            self._probe = target.register_forward_pre_hook(self._seen)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.flight_recorder is not None and self.watching:
            self._loss_to_flight(outputs)
        if self._checked or self.handle is None:
            return
        self._checked = True
        if not self._called:
            log.warning(
                "comgra_like ComgraCallback: the training step did not call %s, so nothing "
                "of it is recorded: call self(...) in training_step, or pass "
                "ComgraCallback(module='<attribute>') for the submodule it calls",
                type(self.handle.module).__name__)

    def _loss_to_flight(self, outputs) -> None:
        """The training step's loss (what training_step returned) for the flight
        recorder's loss-spike trigger; a failure is said once, training goes on."""
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return
        try:
            self.handle.log_loss(loss.detach())
        except Exception as e:  # noqa: BLE001 - never into training
            if not self._loss_failed:
                self._loss_failed = True
                log.warning("comgra_like ComgraCallback: the loss does not reach the flight "
                            "recorder (%s: %s); its other triggers go on", type(e).__name__, e)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.watching:
            before_clipping(self.handle)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.stop()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.stop()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self.stop()

    # ----- helpers ----------------------------------------------------------------------

    @staticmethod
    def default_path(trainer) -> Path:
        """``<trainer.log_dir>/comgra`` (``<default_root_dir>/comgra`` without a logger).
        ``trainer.log_dir`` is broadcast from rank 0: call it on every rank."""
        folder = trainer.log_dir
        return Path(folder if folder is not None else trainer.default_root_dir) / "comgra"

    def stop(self) -> None:
        """Stop watching: the recording is finalized (the callback's end of fit)."""
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        remove_all(self._closure_hooks)
        self.unwatch_quietly()

    def _target(self, trainer, pl_module) -> torch.nn.Module:
        if self.module_attribute is None:
            # the strategy's model: the LightningModule, or the wrapper (DDP, FSDP) whose
            # forward Lightning calls once per step to run training_step/validation_step
            # (it redirects the wrapper's forward to them), the LightningModule being its
            # submodule; watching the LightningModule itself there would count its call
            # by the wrapper and its own self(...) as two steps
            model = trainer.model
            return model if isinstance(model, torch.nn.Module) else pl_module
        target = getattr(pl_module, self.module_attribute, None)
        if not isinstance(target, torch.nn.Module):
            raise ConfigurationError(
                f"ComgraCallback(module={self.module_attribute!r}): the LightningModule has "
                f"no submodule {self.module_attribute!r}")
        return target

    def _seen(self, module, args) -> None:
        if module.training:
            self._called = True
