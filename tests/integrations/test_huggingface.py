"""comgra_like.integrations.huggingface.ComgraCallback on real Trainer training (a tiny
BERT from a configuration, CPU, a few steps): training is bitwise the same, the trial is
in ``<output_dir>/comgra`` with the TrainingArguments as its config, the evaluations
during training in ``<trial>.validation``."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from comgra_like.errors import ConfigurationError
from comgra_like.integrations.huggingface import ComgraCallback
from comgra_like.query import open_group

from .hf_models import train


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_training_is_bitwise_the_same_and_the_trial_holds_the_arguments(tmp_path):
    plain, _ = train(tmp_path / "plain")
    callback = ComgraCallback(log_freq=2)
    watched, _ = train(tmp_path / "watched", [callback])
    a, b = params(plain), params(watched)
    assert a.keys() == b.keys()
    for k, value in a.items():
        assert torch.equal(value, b[k]), k
    assert not callback.handle.watching

    assert callback.handle.group_path == tmp_path / "watched" / "comgra"
    g = open_group(callback.handle.group_path)
    trial = callback.handle.trial_id
    assert {t.trial_id for t in g.list_trials()} == {trial, f"{trial}.validation"}
    config = g.read_config(trial)
    assert config["learning_rate"] == 1e-3 and config["max_steps"] == 4
    assert config["eval_strategy"] == "steps" and config["output_dir"] == str(
        tmp_path / "watched")
    stats = g.read_statistics(trial)
    assert len(stats) and "model.bert.encoder.layer.0" in set(stats["node"])
    assert not g.read_histograms(trial).empty
    val = g.read_statistics(f"{trial}.validation")
    assert set(val["type_of_execution"]) == {"validation"}
    assert len(val["training_step"].unique()) == 2  # eval_steps=2 of max_steps=4


def test_bad_arguments_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="log_freq"):
        ComgraCallback(log_freq=-1)
    with pytest.raises(ConfigurationError, match="sets recorder"):
        ComgraCallback(recorder=object())


def test_a_failure_inside_watch_is_logged_and_training_goes_on(tmp_path, caplog):
    class Broken(torch.nn.Linear):
        def named_modules(self, *args, **kwargs):
            raise RuntimeError("boom")

    args = types.SimpleNamespace(output_dir=str(tmp_path), to_dict=lambda: {"seed": 0})
    callback = ComgraCallback(log_freq=1)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        callback.on_train_begin(args, None, None, model=Broken(2, 2), optimizer=None)
        callback.on_train_end(args, None, None)
    assert callback.handle is None
    assert any("watching Broken failed, training goes on" in r.getMessage()
               and "RuntimeError: boom" in r.getMessage() for r in caplog.records)
