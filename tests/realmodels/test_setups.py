"""Training set-ups beyond a plain loop: gradient checkpointing in both modes (GPT-2's
layers under torch.utils.checkpoint), bf16 autocast (BERT) and a validation loop that
runs after every step, recorded or not (ViT). The same checks as the models: training
bitwise the same, every module recorded, no warning."""

from __future__ import annotations

import pytest

from comgra_like.query import open_group

from . import checks, models
from .conftest import STEPS

SETUPS = {
    "checkpointing_non_reentrant": ("gpt2", {"checkpointing": "non_reentrant"}),
    "checkpointing_reentrant": ("gpt2", {"checkpointing": "reentrant"}),
    "bf16_autocast": ("bert", {"autocast": True}),
    "validation_loop": ("vit", {"validate": True}),
}


@pytest.mark.parametrize("setup", list(SETUPS))
def test_training_is_bitwise_the_same(runs, setup):
    name, options = SETUPS[setup]
    checks.same_training(*runs(name, **options))


@pytest.mark.parametrize("setup", list(SETUPS))
def test_every_module_is_recorded(runs, setup):
    name, options = SETUPS[setup]
    watched = runs(name, **options)[1]
    checks.every_module_recorded(models.CASES[name], watched)
    checks.every_parameter_recorded(watched, holders=True)
    checks.histograms_exact(watched)


@pytest.mark.parametrize("setup", list(SETUPS))
def test_no_warning(runs, setup):
    name, options = SETUPS[setup]
    checks.no_warnings(runs(name, **options)[1])


@pytest.mark.xfail(strict=False, reason=(
    "watch's eval_mode='record' records the validation forward after each unrecorded "
    "training step (steps 1, 3, 5, 7 with log_freq=2) instead of after the recorded ones "
    "(0, 2, 4, 6): a defect in record/hooks.py, being fixed there"))
def test_validation_recorded_after_recorded_steps_only(runs):
    # eval_mode="record": the first eval forward after a recorded training step is
    # recorded as validation at that step; the ones after unrecorded steps are not.
    bare, watched = runs("vit", validate=True)
    assert len(bare.validation_losses) == STEPS
    h = open_group(watched.group).read_histograms(watched.trial)
    validation = h[h.type_of_execution == "validation"]
    assert sorted(set(validation.training_step)) == checks.RECORDED
    assert set(validation.what) == {"io", "params"}  # no gradients without backward
