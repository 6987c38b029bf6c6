"""Seven real architectures, trained a few steps from their initialisation with and
without watch(): training bitwise the same, every module and parameter recorded,
histograms exact, metrics on schedule, no finding of warning severity."""

from __future__ import annotations

import pytest

from . import checks, models

CASES = list(models.CASES)
TIED = ["gpt2", "t5", "whisper"]  # LM heads tied to the token embedding (T5: shared)


@pytest.mark.parametrize("name", CASES)
def test_training_is_bitwise_the_same(runs, name):
    checks.same_training(*runs(name))


@pytest.mark.parametrize("name", CASES)
def test_every_module_is_recorded(runs, name):
    checks.every_module_recorded(models.CASES[name], runs(name)[1])
    checks.every_parameter_recorded(runs(name)[1], holders=False)


@pytest.mark.parametrize("name", TIED)
def test_tied_parameters_under_every_holder(runs, name):
    model = runs(name)[1].model
    holders = models.parameter_holders(model)
    assert len(holders) > len(list(model.named_parameters())), "the model ties no weights"
    checks.every_parameter_recorded(runs(name)[1], holders=True)


@pytest.mark.parametrize("name", CASES)
def test_histograms_count_every_value(runs, name):
    checks.histograms_exact(runs(name)[1])


@pytest.mark.parametrize("name", CASES)
def test_metrics_on_their_schedule(runs, name):
    checks.metrics_on_schedule(runs(name)[1])


@pytest.mark.parametrize("name", CASES)
def test_no_warning_on_a_healthy_model(runs, name):
    checks.no_warnings(runs(name)[1])
