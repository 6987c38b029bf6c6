"""A trial's config round-trip and the trials table, on trials recorded by real loops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from comgra_like.analysis import count_findings
from comgra_like.errors import ConfigurationError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"


def train(root: Path, trial: str, lr: float, steps: int = 6, every: int = 2,
          config: dict | None = None) -> list[float]:
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    rec = ComgraRecorder(root, "g", trial,
                         DecisionMakerForRecordingsHardcoded(range(0, steps, every)),
                         max_num_batch_size_to_record=0,
                         calculate_svd_and_other_expensive_operations_of_parameters=False,
                         config=config)
    rec.track_module("net", net)
    losses = []
    for step in range(steps):
        x = torch.randn(8, 4)
        rec.start_batch(step, 8)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        out = net(x)
        rec.register_tensor("out", out)
        loss = out.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        rec.record_kpi_in_graph("loss", "", loss)
        rec.record_kpi_in_graph("train", "lr", lr)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        rec.finish_batch()
        losses.append(float(loss.detach()))
    rec.finalize()
    return losses


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    losses = {}
    for i, lr in enumerate((0.01, 0.1, 0.3)):
        losses[f"lr{i}"] = train(root, f"lr{i}", lr, config={
            "optim": {"lr": lr, "name": "sgd", "betas": (0.9, 0.99)},
            "seed": np.int64(0), "model": {"width": 4, "bias": True}})
    train(root, "no_config", 0.05, steps=3, every=1)
    return root / "g", losses


def test_the_config_reads_back_flattened_with_dots(sweep):
    group, _ = sweep
    g = open_group(group)
    assert g.read_config("lr1") == {"model.bias": True, "model.width": 4,
                                    "optim.betas": [0.9, 0.99], "optim.lr": 0.1,
                                    "optim.name": "sgd", "seed": 0}
    assert g.read_config("no_config") == {}
    stored = json.loads((group / "trials" / "lr1" / "trial.json").read_text())
    assert stored["config"]["optim.lr"] == 0.1


def test_groups_recorded_before_configs_read_with_an_empty_config(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "tutorial")
    g = open_group(tmp_path / "tutorial")
    for info in g.list_trials():
        assert g.read_config(info.trial_id) == {}
    table = g.read_trials()
    assert not any(c.startswith("config.") for c in table.columns)
    assert list(table["trial_id"]) == [t.trial_id for t in g.list_trials()]


def test_the_trials_table_has_a_row_per_trial_with_config_kpis_and_findings(sweep):
    group, losses = sweep
    g = open_group(group)
    table = g.read_trials(findings=count_findings(g)).set_index("trial_id")
    assert list(table.index) == ["lr0", "lr1", "lr2", "no_config"]
    assert list(table["status"].unique()) == ["finished"]
    assert table.loc["lr1", "steps_recorded"] == 3
    assert (table.loc["lr1", "first_step"], table.loc["lr1", "last_step"]) == (0, 4)
    assert table.loc["no_config", "steps_recorded"] == 3
    assert table.loc["lr2", "config.optim.lr"] == 0.3
    assert table.loc["lr2", "config.model.width"] == 4
    assert table.loc["no_config", "config.optim.lr"] is None or np.isnan(
        table.loc["no_config", "config.optim.lr"])
    assert table.loc["lr0", "ranks"] == 1
    # The last value of each KPI: the loss of the last recorded step (step 4; comgra's
    # record_kpi_in_graph keeps KPIs of recorded steps), the learning rate as logged.
    assert table.loc["lr1", "kpi.loss"] == pytest.approx(losses["lr1"][4], rel=1e-6)
    assert table.loc["lr2", "kpi.train.lr"] == pytest.approx(0.3)
    for severity in ("error", "warning", "info"):
        assert table[f"findings.{severity}"].dtype.kind == "i"


def test_a_config_that_cannot_be_stored_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigurationError, match=r"config\['optim.fn'\] is a function"):
        ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                       config={"optim": {"fn": lambda: 0}})
    with pytest.raises(ConfigurationError, match="must be a dict"):
        ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                       config=[("lr", 0.1)])
    assert not (tmp_path / "g").exists()


def test_watch_stores_the_config_in_its_trial_and_its_validation_trial(tmp_path):
    from comgra_like import watch
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with watch(net, log_freq=2, standalone_dir=tmp_path / "w", trial_id="run",
               config={"optim": {"lr": 0.1}, "layers": 2}, verbose=False) as handle:
        for step in range(4):
            loss = net(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 1:
                net.eval()
                with torch.no_grad():
                    net(torch.randn(8, 4))
                net.train()
    g = open_group(tmp_path / "w")
    assert g.read_config("run") == {"layers": 2, "optim.lr": 0.1}
    assert g.read_config(handle.validation_trial_id) == {"layers": 2, "optim.lr": 0.1}
    with pytest.raises(ConfigurationError, match="is a set"):
        watch(net, standalone_dir=tmp_path / "w2", config={"x": {1, 2}})
    assert not (tmp_path / "w2").exists()


def test_whole_group_sql_has_the_config_as_a_table(sweep):
    from comgra_like.query import sql
    group, _ = sweep
    frame = sql(group, "SELECT trial_id, number FROM config WHERE key = 'optim.lr' "
                       "ORDER BY trial_id")
    assert list(frame["trial_id"]) == ["lr0", "lr1", "lr2"]
    assert list(frame["number"]) == [0.01, 0.1, 0.3]
    joined = sql(group, "SELECT t.trial_id, c.value FROM trials t JOIN config c USING "
                        "(trial_id) WHERE c.key = 'optim.name'")
    assert set(joined["value"]) == {'"sgd"'}
    configs = sql(group, "SELECT trial_id, config FROM trials ORDER BY trial_id")
    assert json.loads(configs["config"].iloc[3]) == {}
