"""comgra_like.integrations.lightning.ComgraCallback on real Lightning training (CPU, a
tiny module, a few steps): training is bitwise the same, the trial is in the trainer's
log directory with the hyperparameters as its config, validation (and the sanity check
as step -1) in ``<trial>.validation``."""

from __future__ import annotations

import logging

import pytest
import torch

from comgra_like.errors import ConfigurationError
from comgra_like.integrations.lightning import ComgraCallback
from comgra_like.query import open_group

from .lightning_models import Tiny, data, fit, trainer


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, value in a.items():
        assert torch.equal(value, b[k]), k


def test_training_is_bitwise_the_same_and_the_trial_is_in_the_log_dir(tmp_path):
    plain = params(fit(tmp_path / "plain"))
    callback = ComgraCallback(log_freq=2)
    watched = params(fit(tmp_path / "watched", [callback]))
    assert_same(plain, watched)
    assert not callback.handle.watching  # stopped at the end of fit

    group = tmp_path / "watched" / "lightning_logs" / "version_0" / "comgra"
    assert callback.handle.group_path == group
    g = open_group(group)
    trial = callback.handle.trial_id
    assert {t.trial_id for t in g.list_trials()} == {trial, f"{trial}.validation"}
    config = g.read_config(trial)
    assert config["hidden"] == 8 and config["lr"] == 0.05 and config["name"] == "tiny"
    stats = g.read_statistics(trial)
    assert sorted(stats["training_step"].unique()) == [0, 2, 4]
    assert "model.first" in set(stats["node"])
    hist = g.read_histograms(trial)
    assert len(hist) and "model.first" in set(hist["module"])
    val = g.read_statistics(f"{trial}.validation")
    # the sanity check (-1), then the validations after steps 2 and 5 (val_check_interval=3),
    # numbered with the training step they followed
    assert sorted(val["training_step"].unique()) == [-1, 2, 5]
    assert set(val["type_of_execution"]) == {"validation"}
    assert g.read_config(f"{trial}.validation") == config


def test_path_and_config_arguments(tmp_path):
    callback = ComgraCallback(path=tmp_path / "mine", log_freq=3,
                              config={"note": "given", "nested": {"depth": 2}})
    fit(tmp_path / "run", [callback])
    g = open_group(tmp_path / "mine")
    assert g.read_config(callback.handle.trial_id) == {"note": "given", "nested.depth": 2}


def test_hyperparameters_that_are_not_json_are_stored_as_text(tmp_path):
    callback = ComgraCallback(log_freq=3)
    torch.manual_seed(0)
    model = Tiny()
    model.hparams["shape"] = (2, 3)
    model.hparams["act"] = torch.nn.Tanh()
    trainer(tmp_path, [callback], max_steps=2, num_sanity_val_steps=0,
            limit_val_batches=0).fit(model, data(24, 1))
    config = open_group(callback.handle.group_path).read_config(callback.handle.trial_id)
    assert config["shape"] == "[2, 3]" and config["act"] == "Tanh()"


def test_a_training_step_that_does_not_call_the_module_is_said_once(tmp_path, caplog):
    class Indirect(Tiny):
        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.second(torch.tanh(self.first(x))), y)

    callback = ComgraCallback(log_freq=1)
    with caplog.at_level(logging.WARNING, logger="comgra_like"):
        trainer(tmp_path, [callback], max_steps=3, num_sanity_val_steps=0,
                limit_val_batches=0).fit(Indirect(), data(24, 1))
    said = [r for r in caplog.records if "did not call Indirect" in r.getMessage()]
    assert len(said) == 1


def test_module_names_a_submodule(tmp_path):
    class Wrapped(Tiny):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

    callback = ComgraCallback(log_freq=1, module="net")
    trainer(tmp_path, [callback], max_steps=2, num_sanity_val_steps=0,
            limit_val_batches=0).fit(Wrapped(), data(24, 1))
    stats = open_group(callback.handle.group_path).read_statistics(callback.handle.trial_id)
    assert {"model.0", "model.1"} <= set(stats["node"])
    with pytest.raises(ConfigurationError, match="no submodule 'nope'"):
        c = ComgraCallback(module="nope")
        trainer(tmp_path / "x", [c], max_steps=1).fit(Wrapped(), data(8, 1))


def test_bad_arguments_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="log_freq"):
        ComgraCallback(log_freq=0)
    with pytest.raises(ConfigurationError, match="path= for the group folder"):
        ComgraCallback(standalone_dir="x")
    with pytest.raises(ConfigurationError, match="does not take"):
        ComgraCallback(bogus=1)
