"""comgra's README minimal example, with only the imports changed, read back via the query API."""

import numpy as np
import torch
from torch import nn, optim

import comgra_like as comgra
from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder


class SimpleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer0 = nn.Linear(5, 5)
        self.layer1 = nn.Linear(5, 5)

    def forward(self, x):
        x = self.layer0(x)
        return self.layer1(x)


def run_minimal_example(root):
    torch.manual_seed(0)
    comgra.my_recorder = ComgraRecorder(
        comgra_root_path=str(root),
        group="name_of_experiment_group",
        trial_id="example_trial",
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(
            min_training_steps_difference=10),
    )
    comgra.my_recorder.add_note("This is an optional log message that will show up in the 'Notes' tab.")
    model = SimpleModel()
    criterion = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    comgra.my_recorder.track_module("main_model", model)
    inputs = torch.randn(100, 5)
    targets = 2 * inputs + torch.randn(100, 5) * 0.1
    last = {}
    for epoch in range(100):
        comgra.my_recorder.start_batch(epoch, inputs.shape[0])
        comgra.my_recorder.start_iteration()
        comgra.my_recorder.register_tensor("inputs", inputs, is_input=True)
        outputs = model(inputs)
        comgra.my_recorder.register_tensor("outputs", outputs)
        comgra.my_recorder.register_tensor("targets", targets, is_target=True)
        loss = criterion(outputs, targets)
        comgra.my_recorder.register_tensor("loss", loss, is_loss=True)
        comgra.my_recorder.record_kpi_in_graph("loss", "", loss)
        optimizer.zero_grad()
        loss.backward()
        if epoch == 90:
            last["outputs"] = outputs.detach().clone()
            last["outputs_grad"] = outputs.grad.detach().clone()
            last["loss"] = loss.item()
            last["w_before"] = model.layer0.weight.detach().clone()
        optimizer.step()
        if epoch == 90:
            last["w_after"] = model.layer0.weight.detach().clone()
        comgra.my_recorder.record_current_gradients("gradients")
        comgra.my_recorder.finish_iteration()
        comgra.my_recorder.finish_batch()
    comgra.my_recorder.finalize()
    return root / "name_of_experiment_group", last


def test_minimal_example_round_trip(tmp_path):
    group_dir, last = run_minimal_example(tmp_path)
    g = open_group(group_dir)
    [trial] = g.list_trials()
    assert trial.trial_id == "example_trial" and trial.status == "finished"

    steps = g.list_steps("example_trial")
    assert steps["training_step"].tolist() == list(range(0, 100, 10))
    assert set(steps["iteration"]) == {0}
    assert (steps["batch_size"] == 100).all()

    graph = g.read_graph("example_trial", 90, 0)
    kinds = {n.name: n.kind for n in graph.nodes}
    assert kinds["inputs"] == "input" and kinds["targets"] == "target"
    assert kinds["loss"] == "loss" and kinds["outputs"] == "calculated"
    params = {f"main_model.layer{i}.{p}" for i in (0, 1) for p in ("weight", "bias")}
    assert {n for n, k in kinds.items() if k == "parameter"} == params
    edges = {(e.source, e.target) for e in graph.edges}
    assert edges == {("inputs", "outputs"), ("outputs", "loss"), ("targets", "loss")} | {
        (p, "outputs") for p in params}

    # Values: every sample of the batch is recorded (max_num_batch_size_to_record=None).
    rec = g.read_tensor("example_trial", 90, 0, "outputs", "outputs", "forward", "sample", 7)
    np.testing.assert_allclose(rec.values, last["outputs"][7].numpy(), rtol=1e-6)
    mean = g.read_tensor("example_trial", 90, 0, "outputs", "outputs", "forward", "batch_mean")
    np.testing.assert_allclose(mean.values, last["outputs"].mean(0).numpy(), rtol=1e-5, atol=1e-7)
    grad = g.read_tensor("example_trial", 90, 0, "outputs", "outputs", "gradient:gradients",
                         "sample", 7)
    np.testing.assert_allclose(grad.values, last["outputs_grad"][7].numpy(), rtol=1e-6)
    loss = g.read_tensor("example_trial", 90, 0, "loss", "loss", "forward", "none")
    assert loss.values.shape == () or loss.values.size == 1
    assert abs(loss.stats["mean"] - last["loss"]) < 1e-6

    # Parameters: value before the update, and the update the optimizer made.
    w = g.read_tensor("example_trial", 90, -1, "main_model.layer0.weight",
                      "main_model.layer0.weight", "forward", "none")
    assert w.values is None  # parameters: statistics only, as in comgra
    assert abs(w.stats["mean"] - last["w_before"].mean().item()) < 1e-6
    top = torch.linalg.svdvals(last["w_before"])[0].item()
    assert abs(w.stats["svd_top"] - top) < 1e-3 * top
    upd = g.read_tensor("example_trial", 90, -1, "main_model.layer0.weight",
                        "main_model.layer0.weight", "update", "none")
    delta = last["w_after"] - last["w_before"]
    assert abs(upd.stats["abs_max"] - delta.abs().max().item()) < 1e-7
    ratio = delta.norm().item() / last["w_before"].norm().item()
    assert abs(upd.stats["update_ratio"] - ratio) / ratio < 1e-4

    series = g.read_series("example_trial", "outputs", "outputs", "forward", "batch_mean", "mean")
    assert series["training_step"].tolist() == list(range(0, 100, 10))

    kpis = g.read_kpis("example_trial")
    assert set(kpis["kpi_group"]) == {"loss"}
    assert kpis["timepoint"].tolist() == list(range(0, 100, 10))
    assert g.read_notes("example_trial")[0].text.startswith("This is an optional")
    modules = {m.name: m for m in g.read_modules("example_trial")}
    assert modules["main_model"].num_parameters_total == 60


def test_public_names_importable_from_package():
    assert comgra.ComgraRecorder is ComgraRecorder
    from comgra_like import DecisionMakerForRecordingsHardcoded  # noqa: F401
