"""The metrics config (Taiyi's format) resolved on real models, and its errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from comgra_like.errors import ConfigurationError
from comgra_like.metrics.schedule import Schedule, parse_schedule
from comgra_like.metrics.user import UserMetric
from comgra_like.record.metric_config import resolve_config


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        x = self.act(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc2(self.act(self.fc1(x)))


class OutputAbsMean(UserMetric):
    name = "OutputAbsMean"
    needs = ("output",)

    def compute(self, data):
        return float(data["output"].abs().mean())


def _pairs(specs):
    return sorted((s.module_name, s.metric, str(s.schedule)) for s in specs)


def test_taiyi_config_by_name_class_name_and_class():
    config = {"fc1": ["InputSndNorm"], "Conv2d": [["WeightNorm", "linear(5, 0)"]],
              nn.BatchNorm2d: [["MeanTID", "linear(5,0)"], "InputSndNorm"],
              "fc2": [OutputAbsMean, ["WeightNorm"]], "": [["OutputNorm", "linear(3, 1)"]]}
    specs = resolve_config(Net(), config, "net")
    assert _pairs(specs) == [
        ("net", "OutputNorm", "linear(3, 1)"),
        ("net.bn", "InputSndNorm", "linear(1, 0)"),
        ("net.bn", "MeanTID", "linear(5, 0)"),
        ("net.conv", "WeightNorm", "linear(5, 0)"),
        ("net.fc1", "InputSndNorm", "linear(1, 0)"),
        ("net.fc2", "OutputAbsMean", "linear(1, 0)"),
        ("net.fc2", "WeightNorm", "linear(1, 0)"),
    ]
    user = next(s for s in specs if s.metric == "OutputAbsMean")
    assert user.user_class is OutputAbsMean and user.quantity is None
    assert user.needs == frozenset({"output"})
    # a class key matches subclasses too (isinstance, as Taiyi)
    assert {s.module_name for s in resolve_config(Net(), {nn.Module: ["InputMean"]})} == {
        "model", "model.conv", "model.bn", "model.act", "model.fc1", "model.fc2"}


def test_schedules():
    assert parse_schedule("linear(5, 0)") == Schedule(5, 0)
    assert parse_schedule(" linear( 3 ,2 ) ") == Schedule(3, 2)
    assert parse_schedule("linear(4)") == Schedule(4, 0)
    s = Schedule(5, 2)
    assert [k for k in range(20) if s.due(k)] == [2, 7, 12, 17]
    for bad in ("linear(0, 0)", "linear(2, -1)", "every(5)", "linear(a, 1)", "5"):
        with pytest.raises(ConfigurationError, match=r"accepted form is 'linear\(k, o\)'"):
            parse_schedule(bad)
    with pytest.raises(ConfigurationError, match=r"'WeightNorm' of key 'fc1'.*linear\(k, o\)"):
        resolve_config(Net(), {"fc1": [["WeightNorm", "linear(5; 0)"]]})


def test_unknown_quantity_lists_the_known_ones():
    with pytest.raises(ConfigurationError) as e:
        resolve_config(Net(), {"fc1": ["WeightNrom"]})
    text = str(e.value)
    assert "key 'fc1'" in text and "'WeightNrom'" in text
    assert "WeightNorm" in text and "InputCovMaxEig" in text and "MeanTID" in text


def test_key_matching_nothing_lists_modules_and_classes():
    with pytest.raises(ConfigurationError) as e:
        resolve_config(Net(), {"fc3": ["WeightNorm"]})
    text = str(e.value)
    assert "'fc3' matches no module" in text
    assert "'fc1'" in text and "'conv'" in text and "Linear" in text and "BatchNorm2d" in text
    with pytest.raises(ConfigurationError, match="LSTM matches no module"):
        resolve_config(Net(), {nn.LSTM: ["InputMean"]})
    with pytest.raises(ConfigurationError, match="key must be a module name"):
        resolve_config(Net(), {3: ["InputMean"]})


def test_quantity_that_cannot_apply():
    with pytest.raises(ConfigurationError,
                       match=r"MeanTID cannot be computed on module 'fc1' \(Linear\).*BatchNorm2d"):
        resolve_config(Net(), {"fc1": ["MeanTID"]})
    with pytest.raises(ConfigurationError, match="WeightNorm needs the module's weight.*'act'"):
        resolve_config(Net(), {"act": ["WeightNorm"]})


def test_bad_entries_and_user_metrics():
    with pytest.raises(ConfigurationError, match="must be a dict"):
        resolve_config(Net(), [("fc1", "WeightNorm")])
    with pytest.raises(ConfigurationError, match="bad metric entry"):
        resolve_config(Net(), {"fc1": [["WeightNorm", "linear(1, 0)", "x"]]})

    class NoName:
        needs = ("output",)

        def compute(self, data):
            return 0.0

    class BadNeed(UserMetric):
        name = "BadNeed"
        needs = ("activations",)

    class Clash(UserMetric):
        name = "WeightNorm"
        needs = ("weight",)

    with pytest.raises(ConfigurationError, match="needs a class attribute name"):
        resolve_config(Net(), {"fc1": [NoName]})
    with pytest.raises(ConfigurationError, match=r"\['activations'\].*may need input, output"):
        resolve_config(Net(), {"fc1": [BadNeed]})
    with pytest.raises(ConfigurationError, match="name of a built-in metric"):
        resolve_config(Net(), {"fc1": [Clash]})
    with pytest.raises(ConfigurationError, match="configured twice"):
        resolve_config(Net(), {"fc1": [["WeightNorm", "linear(2, 0)"]],
                               "Linear": [["WeightNorm", "linear(3, 0)"]]})
    # the same schedule twice (a name key and a class key) is one metric
    assert len(resolve_config(Net(), {"fc1": ["WeightNorm"], "Linear": ["WeightNorm"]})) == 2


def test_a_config_key_resolves_inside_sequentials():
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
    specs = resolve_config(model, {"1.1": ["WeightNorm"], "0": ["WeightGradNorm"]})
    assert _pairs(specs) == [("model.0", "WeightGradNorm", "linear(1, 0)"),
                             ("model.1.1", "WeightNorm", "linear(1, 0)")]
    assert torch.is_tensor(specs[0].module.weight)
