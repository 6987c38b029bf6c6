"""The settings of ``watch()``'s driver (``record/hooks.py``) and the names its parts share:
the two types of execution of a watched step and the ``log=`` options."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

TRAINING, VALIDATION = "training", "validation"
LOG_OPTIONS = ("io", "io_grad", "params", "params_grad")


@dataclasses.dataclass
class Settings:
    log: tuple[str, ...]
    log_freq: int
    ignore_io_grad_classes: tuple[type, ...]
    time_name: str
    time_fn: Callable[[torch.nn.Module, int], Any]
    delay_log_multi_backward: bool
    eval_mode: str  # record | skip
    structure_only: bool  # backend 'none'
    histogram: dict  # bins, sample_n, reject_outlier_proportion, seed
    verbose: bool
    # watch(optimizer=): each backward's gradients as a loss group of their own as well
    micro_batch_gradients: bool = True

