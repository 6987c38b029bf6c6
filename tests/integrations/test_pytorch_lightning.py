"""``pytorch_lightning`` (the package's older name, installed with ``lightning``) has
``Callback`` and ``LightningModule`` classes of its own, distinct from
``lightning.pytorch``'s: ``comgra_like.integrations.pytorch_lightning.ComgraCallback``
is the callback on that base; its Trainer calls a callback's hooks by name, so the
``lightning`` one records a ``pytorch_lightning.Trainer`` run too."""

from __future__ import annotations

import pytest
import pytorch_lightning as PL
import torch

from comgra_like.integrations import lightning, pytorch_lightning
from comgra_like.query import open_group

from .lightning_models import data


class Tiny(PL.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.first = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.first(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def trainer(root, callbacks) -> PL.Trainer:
    return PL.Trainer(accelerator="cpu", devices=1, max_steps=2, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=str(root), logger=PL.loggers.CSVLogger(str(root)),
                      callbacks=callbacks)


@pytest.mark.parametrize("package", [pytorch_lightning, lightning])
def test_a_pytorch_lightning_run_is_recorded(tmp_path, package):
    callback = package.ComgraCallback(log_freq=1)
    assert isinstance(callback, PL.Callback) == (package is pytorch_lightning)
    trainer(tmp_path, [callback]).fit(Tiny(), data(8, 1))
    g = open_group(tmp_path / "lightning_logs" / "version_0" / "comgra")
    stats = g.read_statistics(callback.handle.trial_id)
    assert sorted(stats["training_step"].unique()) == [0, 1]
    assert g.read_config(callback.handle.trial_id) == {"lr": 0.05}
