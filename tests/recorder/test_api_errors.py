"""Misuse of the API raises a ComgraError subclass that names the problem."""

import pytest
import torch

from comgra_like.errors import (
    CallOrderError,
    ComgraError,
    ConfigurationError,
    GraphError,
    RecordingDecisionError,
    RegistrationError,
    TrainingStepError,
)
from comgra_like.objects import (
    DecisionMakerForRecordingsFrequencyPerType,
    DecisionMakerForRecordingsHardcoded,
)
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder


@pytest.fixture
def rec(tmp_path):
    r = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded(range(100)))
    r.track_module("m", torch.nn.Linear(3, 2))
    return r


def test_all_errors_are_comgra_errors():
    for cls in (CallOrderError, ConfigurationError, GraphError, RecordingDecisionError,
                RegistrationError, TrainingStepError):
        assert issubclass(cls, ComgraError)


def test_bad_constructor_arguments(tmp_path):
    with pytest.raises(ConfigurationError, match="trial_id"):
        ComgraRecorder(tmp_path, "g", "bad/id", DecisionMakerForRecordingsHardcoded([0]))
    with pytest.raises(ConfigurationError, match="decision maker"):
        ComgraRecorder(tmp_path, "g", "t", decision_maker_for_recordings=10)
    with pytest.raises(ConfigurationError, match="max_num_batch_size_to_record"):
        ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                       max_num_batch_size_to_record=-1)


def test_call_order(rec):
    with pytest.raises(CallOrderError, match="start_batch"):
        rec.register_tensor("x", torch.zeros(2, 3))
    rec.start_batch(0, 2)
    with pytest.raises(CallOrderError, match="start_iteration"):
        rec.register_tensor("x", torch.zeros(2, 3))
    with pytest.raises(CallOrderError, match="before finish_batch"):
        rec.start_batch(1, 2)
    rec.start_iteration()
    with pytest.raises(CallOrderError, match="finish_iteration"):
        rec.finish_batch()
    rec.finish_iteration()
    rec.finish_batch()
    with pytest.raises(TrainingStepError, match="strictly increase: got 0 after 0"):
        rec.start_batch(0, 2)


def test_registration_errors(rec):
    rec.start_batch(0, 2)
    rec.start_iteration()
    with pytest.raises(RegistrationError, match="batch size of 2"):
        rec.register_tensor("wrong_batch", torch.zeros(3, 3))
    with pytest.raises(RegistrationError, match="must be a scalar"):
        rec.register_tensor("loss", torch.zeros(2, 1), is_loss=True)
    with pytest.raises(RegistrationError, match="int64.*float"):
        rec.register_tensor("ints", torch.zeros(2, 3, dtype=torch.long))
    rec.register_tensor("x", torch.zeros(2, 3))
    with pytest.raises(RegistrationError, match="registered already"):
        rec.register_tensor("x", torch.ones(2, 3))
    with pytest.raises(RegistrationError, match="role"):
        rec.register_tensor("y", torch.ones(2, 3), node_name="x", role_within_node="x")
    with pytest.raises(RegistrationError, match="no tensor named .nope. is registered"):
        rec.add_tensor_connection("nope", torch.ones(2, 3))


def test_unregistered_leaf_is_named(rec):
    rec.start_batch(0, 2)
    rec.start_iteration()
    hidden_weight = torch.randn(3, 3, requires_grad=True)
    x = torch.zeros(2, 3)
    rec.register_tensor("x", x)
    y = x @ hidden_weight
    rec.register_tensor("y", y)
    with pytest.raises(GraphError, match=r"shape \(3, 3\).*not registered"):
        rec.finish_iteration()


def test_cycle_from_manual_connections(rec):
    rec.start_batch(0, 2)
    rec.start_iteration()
    a = torch.zeros(2, 3)
    rec.register_tensor("a", a)
    b = a * 2
    rec.register_tensor("b", b)
    rec.add_tensor_connection("b", "a")
    with pytest.raises(GraphError, match="cycle"):
        rec.finish_iteration()


def test_gradients_before_dynamic_decision(rec):
    rec.start_batch(0, 2, type_of_execution=None)
    rec.start_iteration()
    with pytest.raises(RecordingDecisionError, match="decide_recording_of_batch"):
        rec.record_current_gradients("g")


def test_missing_dynamic_decision(rec):
    rec.start_batch(0, 2, type_of_execution=None)
    rec.start_iteration()
    rec.finish_iteration()
    with pytest.raises(RecordingDecisionError, match="never called"):
        rec.finish_batch()


def test_inactive_recorder_is_a_no_op(tmp_path):
    r = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                       comgra_is_active=False)
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    r.track_module("m", net)
    assert r.get_name_of_module(net[0]) == "m.0"  # names work even when inactive
    r.start_batch(0, 2)
    r.start_iteration()
    r.register_tensor("x", torch.zeros(2, 2))
    r.record_current_gradients("g")
    r.finish_iteration()
    r.finish_batch()
    r.finalize()
    assert not (tmp_path / "g").exists()
    assert not r.recording_is_active()


def test_not_recorded_steps_do_not_touch_tensors(tmp_path):
    r = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([5]))
    r.track_module("m", torch.nn.Linear(2, 2))
    r.start_batch(0, 2)
    r.start_iteration()
    x = torch.zeros(2, 2)
    r.register_tensor("x", x)
    assert not x.requires_grad
    r.finish_iteration()
    r.finish_batch()
    r.finalize()


def test_decision_makers():
    d = DecisionMakerForRecordingsFrequencyPerType(10, exponential_backoff_factor=2.0)
    recorded = []
    for step in range(100):
        if d.is_record_on_this_step(step, "a"):
            d.mark_recorded(step, "a")
            recorded.append(step)
    assert recorded == [0, 10, 30, 70]
    assert d.is_record_on_this_step(3, "never_seen")
    with pytest.raises(ConfigurationError):
        DecisionMakerForRecordingsFrequencyPerType(0)


def test_dynamic_recording_picks_samples_round_robin(tmp_path):
    net = torch.nn.Linear(2, 1)
    r = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1),
                       max_num_batch_size_to_record=4)
    r.track_module("net", net)
    for step, decision in enumerate(["kept", None]):
        r.start_batch(step, 8, type_of_execution=None)
        r.start_iteration()
        x = torch.randn(8, 2)
        r.register_tensor("x", x, is_input=True)
        out = net(x)
        r.register_tensor("out", out)
        loss = out.mean()
        r.register_tensor("loss", loss, is_loss=True)
        r.record_kpi_in_graph("loss", "", loss)
        loss.backward()
        r.decide_recording_of_batch(decision, ["a", "a", "a", "a", "a", "b", "c", "c"])
        if decision:
            r.record_current_gradients("g")
        r.finish_iteration()
        r.finish_batch()
    r.finalize()
    g = open_group(tmp_path / "g")
    steps = g.list_steps("t")
    assert steps["training_step"].tolist() == [0]
    assert steps["type_of_execution"].tolist() == ["kept"]
    assert list(steps["sample_indices"][0]) == [0, 1, 5, 6]
    assert list(steps["sample_categories"][0]) == ["a", "a", "b", "c"]
    assert g.read_kpis("t")["type_of_execution"].tolist() == ["kept"]
