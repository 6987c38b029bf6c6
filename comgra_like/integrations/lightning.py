"""``ComgraCallback`` for PyTorch Lightning: ``Trainer(callbacks=[ComgraCallback()])``
records the LightningModule with ``comgra_like.watch`` (docs/INTEGRATIONS.md).

* The trial: in the group folder ``<trainer.log_dir>/comgra`` (``path=`` to choose;
  without a logger ``<default_root_dir>/comgra``), watch()'s default trial id (every
  DDP rank agrees on it; each rank records its own part of the batch into the same
  trial, as plain DDP does).
* The config: the LightningModule's ``hparams`` (``save_hyperparameters()``), or
  ``config=``; values that are not JSON are stored as their ``str()``.
* Steps: what watch() counts. With the optimizer recording (``watch(optimizer=)``,
  docs/OPTIMIZER.md) a step is one optimizer step, its micro-batches (``accumulate_grad_
  batches``) its iterations; the gradient norm before clipping is read at
  ``on_before_optimizer_step`` (accumulated, unscaled, not yet clipped).
* Validation: Lightning's validation loop runs the module in eval mode, so watch()
  records the first validation forward after each recorded training step into
  ``<trial>.validation``; the sanity check before training is the validation of step -1.
* Watching stops at the end of ``fit`` (also when it fails).

The watched module is the strategy's model (``trainer.model``): the LightningModule on
one device, whose ``training_step`` must then call ``self(...)`` (one that calls a
submodule, ``self.model(x)``, names it with ``module="model"``); under DDP the
``DistributedDataParallel`` wrapper, whose forward Lightning redirects to
``training_step``/``validation_step``, so that each step is one forward of the root and
the module names are ``model.module.<name>`` (as with watch() of a DDP model). A module
that no training step calls is said once in the log.

``pytorch_lightning.Trainer`` (the older package name) calls a callback's hooks by name
and records with this callback too; ``comgra_like.integrations.pytorch_lightning.
ComgraCallback`` is the same callback on ``pytorch_lightning.Callback`` (a distinct
class), for code that checks the class.
"""

from __future__ import annotations

try:
    from lightning.pytorch import Callback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "comgra_like.integrations.lightning needs the lightning package (pip install "
        "lightning)", name="lightning") from e

from .lightning_callback import DEFAULT_LOG_FREQ, LightningRecording

__all__ = ["DEFAULT_LOG_FREQ", "ComgraCallback"]


class ComgraCallback(LightningRecording, Callback):
    __doc__ = LightningRecording.__doc__
