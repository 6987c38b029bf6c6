"""``ComgraCallback`` for ``pytorch_lightning.Trainer`` (the package's older name): the
callback of ``lightning.py`` on ``pytorch_lightning.Callback`` (distinct from
``lightning.pytorch.Callback``), for code that checks the class: the Trainer itself
calls hooks by name and takes either (docs/INTEGRATIONS.md).
"""

from __future__ import annotations

try:
    from pytorch_lightning import Callback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "comgra_like.integrations.pytorch_lightning needs the pytorch_lightning package "
        "(pip install pytorch-lightning); with the lightning package use "
        "comgra_like.integrations.lightning", name="pytorch_lightning") from e

from .lightning_callback import DEFAULT_LOG_FREQ, LightningRecording

__all__ = ["DEFAULT_LOG_FREQ", "ComgraCallback"]


class ComgraCallback(LightningRecording, Callback):
    __doc__ = LightningRecording.__doc__
