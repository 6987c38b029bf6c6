"""A tiny LightningModule and the Trainer settings the Lightning tests share (CPU, a
few steps, no progress bar, checkpoints or model summary)."""

from __future__ import annotations

import lightning.pytorch as L
import torch
from torch.utils.data import DataLoader, TensorDataset

BATCH = 4


class Tiny(L.LightningModule):
    def __init__(self, hidden: int = 8, lr: float = 0.05, name: str = "tiny",
                 loss: torch.nn.Module | None = None):
        super().__init__()
        self.save_hyperparameters(ignore=["loss"])
        self.first = torch.nn.Linear(5, hidden)
        self.second = torch.nn.Linear(hidden, 3)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def data(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)


def trainer(root, callbacks=(), **kwargs) -> L.Trainer:
    settings = {"accelerator": "cpu", "devices": 1, "max_steps": 6, "max_epochs": 1,
                "limit_val_batches": 2, "num_sanity_val_steps": 1, "val_check_interval": 3,
                "enable_progress_bar": False, "enable_model_summary": False,
                "enable_checkpointing": False, "default_root_dir": str(root),
                "logger": L.loggers.CSVLogger(str(root)), "log_every_n_steps": 1}
    settings.update(kwargs)
    return L.Trainer(callbacks=list(callbacks), **settings)


def fit(root, callbacks=(), seed: int = 0, module_kwargs=None, **kwargs) -> Tiny:
    torch.manual_seed(seed)
    model = Tiny(**(module_kwargs or {}))
    t = trainer(root, callbacks, **kwargs)
    t.fit(model, data(48, 1), data(16, 2))
    return model
