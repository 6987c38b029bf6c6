"""``ComgraCallback`` for Hugging Face's ``Trainer``:
``Trainer(..., callbacks=[ComgraCallback()])`` records the model with
``comgra_like.watch`` (docs/INTEGRATIONS.md).

* The trial: in the group folder ``<args.output_dir>/comgra`` (``path=`` to choose),
  watch()'s default trial id; the ``TrainingArguments`` (``to_dict()``: enums as their
  values, lists as JSON text) are its config, or ``config=``.
* Watching starts at ``on_train_begin`` (the optimizer exists then) and stops at
  ``on_train_end``: an ``evaluate()`` during training (``eval_strategy``) is recorded as
  validation in ``<trial>.validation``; a ``trainer.evaluate()`` called after
  ``train()`` returned is not.
* Steps: what watch() counts. With the optimizer recording (``watch(optimizer=)``,
  docs/OPTIMIZER.md) a step is one optimizer step (``gradient_accumulation_steps``
  micro-batches are its iterations), and the gradient it records is the one the
  optimizer used: accumulated and *clipped* (``max_grad_norm``): transformers clips
  before its ``on_pre_optimizer_step`` event, so the norm before clipping is the one at
  the end of the step's last backward pass (the optimizer recording's default), not
  read at that event.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "comgra_like.integrations.huggingface needs the transformers package (pip install "
        "transformers)", name="transformers") from e

from .callbacks import WatchSettings, plain_config, start_watch

log = logging.getLogger("comgra_like")

DEFAULT_LOG_FREQ = 50  # as the Lightning callback (TrainingArguments' logging_steps is 500)

__all__ = ["DEFAULT_LOG_FREQ", "ComgraCallback"]


class ComgraCallback(TrainerCallback, WatchSettings):
    """Record a Hugging Face ``Trainer`` run with ``comgra_like.watch`` (module docstring).

    ``path``: the group folder (default ``<output_dir>/comgra``); ``log_freq``: record
    every ``log_freq``-th step; ``metrics``, ``flight_recorder``: as watch() takes them;
    ``config``: the trial's hyperparameters (default: the TrainingArguments); further
    keyword arguments go to watch() (``log=``, ``bins=``, ``trial_id=``, ``name=``...).
    ``handle``: watch()'s ``WatchHandle`` while training runs (and after it).
    """

    def __init__(self, path: str | Path | None = None, log_freq: int = DEFAULT_LOG_FREQ,
                 metrics: dict | None = None, config: dict | None = None,
                 flight_recorder=None, **watch_kwargs: Any):
        WatchSettings.__init__(self, path, log_freq, metrics, config, flight_recorder,
                               watch_kwargs)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.watching:
            return
        if not isinstance(model, torch.nn.Module):
            log.warning("comgra_like ComgraCallback: the Trainer passed no model; nothing "
                        "is recorded")
            return
        path = Path(self.path) if self.path is not None else self.default_path(args)
        config = self.config if self.config is not None else plain_config(args.to_dict())
        self.handle = start_watch(model, path, self.log_freq, self.metrics, config,
                                  self.flight_recorder, torch_optimizers(optimizer), None,
                                  self.watch_kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        self.stop()

    @staticmethod
    def default_path(args) -> Path:
        """``<args.output_dir>/comgra``."""
        return Path(args.output_dir or ".") / "comgra"

    def stop(self) -> None:
        """Stop watching: the recording is finalized (the callback's end of training)."""
        self.unwatch_quietly()


def torch_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    """The torch optimizer behind the Trainer's (accelerate's ``AcceleratedOptimizer``
    wraps it in ``.optimizer`` and calls its ``step``: its step hooks are the ones that
    run)."""
    inner = getattr(optimizer, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer):
        return [inner]
    return [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else []
