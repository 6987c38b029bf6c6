"""Training set-ups beyond a plain loop: gradient checkpointing in both modes (GPT-2's
layers under torch.utils.checkpoint), bf16 autocast (BERT) and a validation loop that
runs after every step, recorded or not (ViT). The same checks as the models: training
bitwise the same, every module recorded, metrics on their schedule, no warning."""

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
def test_metrics_on_schedule(runs, setup):
    name, options = SETUPS[setup]
    checks.metrics_on_schedule(runs(name, **options)[1])


@pytest.mark.parametrize("setup", list(SETUPS))
def test_no_warning(runs, setup):
    name, options = SETUPS[setup]
    checks.no_warnings(runs(name, **options)[1])


def test_validation_recorded_after_recorded_steps_only(runs):
    # eval_mode="record": the first eval forward after a recorded training step is
    # recorded as validation, numbered with that step, in the trial "<trial>.validation";
    # the ones after unrecorded steps are not.
    bare, watched = runs("vit", validate=True)
    assert len(bare.validation_losses) == STEPS
    group = open_group(watched.group)
    assert {t.trial_id for t in group.list_trials()} == {watched.trial,
                                                         f"{watched.trial}.validation"}
    training = group.read_histograms(watched.trial)
    assert set(training.type_of_execution) == {"training"}
    validation = group.read_histograms(f"{watched.trial}.validation")
    assert set(validation.type_of_execution) == {"validation"}
    assert sorted(set(validation.training_step)) == checks.RECORDED
    assert set(validation.what) == {"io", "params"}  # no gradients without backward
    # each recorded validation forward is whole: every module the forward calls
    called = models.called_modules(models.CASES["vit"])
    for step in checks.RECORDED:
        io = validation[(validation.training_step == step) & (validation.what == "io")]
        assert called <= {n.split("#")[0] for n in io.module}, step
