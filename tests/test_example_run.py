"""The committed recording in example_runs/tutorial must stay readable, and every page
of the GUI must have something to show on it (docs/EXAMPLES.md).

The tutorial's two trials were written by an earlier version (by the script that
``python -m comgra_like.scripts.make_examples --only tutorial`` replaces);
``trial_watched_classifier`` was added later by
``python -m comgra_like.scripts.make_examples --only watched``. If a change of the
storage format or of the query API makes these tests fail, old recordings on users'
disks would break the same way: keep reading the old format (or migrate it), don't
regenerate the example to make this pass.

No torch needed: this is what a user who only opens recordings has.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from comgra_like.query import open_group

GROUP_DIR = Path(__file__).resolve().parents[1] / "example_runs" / "tutorial"
BUGGED = "trial_bugged_original_version"
FIXED = "trial_no_activation_function_on_output_layer"
TRIALS = [BUGGED, FIXED]
WATCHED = "trial_watched_classifier"  # watch(model, metrics=...) and stored flows
WATCHED_STEPS = list(range(0, 401, 50))
RECORDED = {4: ("05_iterations", 5), 590: ("03_iterations", 3), 592: ("05_iterations", 5)}
SAMPLES = 5
SUBNET_OUT = "root_module.subnet_out__out"
HELPER = "helper_partial_sums"


@pytest.fixture(scope="module")
def group():
    assert GROUP_DIR.is_dir(), (f"{GROUP_DIR} is missing: python -m "
                                "comgra_like.scripts.make_examples")
    g = open_group(GROUP_DIR)
    g.refresh()
    return g


def test_it_stays_small():
    size = sum(p.stat().st_size for p in GROUP_DIR.rglob("*") if p.is_file())
    assert size < 5 * 2**20, f"example_runs/tutorial is {size / 2**20:.1f} MiB"


def test_nothing_is_skipped_and_both_trials_are_finished(group):
    assert group.skipped == []
    trials = group.list_trials()
    assert [t.trial_id for t in trials] == TRIALS + [WATCHED]
    for t in trials:
        assert t.status == "finished"
        assert t.schema_version >= 1
        if t.trial_id == WATCHED:
            continue
        assert t.settings["max_num_batch_size_to_record"] == SAMPLES
        assert t.settings["prefixes_for_grouping_module_parameters_in_nodes"] == [
            "root_module.subnet_pre"
        ]


@pytest.mark.parametrize("trial", TRIALS)
def test_steps(group, trial):
    steps = group.list_steps(trial)
    assert sorted(steps["training_step"].unique()) == sorted(RECORDED)
    for step, (toe, iterations) in RECORDED.items():
        rows = steps[steps["training_step"] == step]
        assert set(rows["type_of_execution"]) == {toe}
        assert sorted(rows["iteration"]) == list(range(iterations))
        assert set(rows["batch_size"]) == {128}
        assert all(list(s) == list(range(SAMPLES)) for s in rows["sample_indices"])
        assert rows["graph_hash"].map(len).min() > 0


@pytest.mark.parametrize("trial", TRIALS)
def test_graph_and_modules(group, trial):
    graph = group.read_graph(trial, 592, 4)
    nodes = {n.name: n for n in graph.nodes}
    for name in ("input", "output", "target", "loss", "loss_per_sample", "memory", HELPER,
                 "root_module.subnet_pre", "root_module.subnet_pre__hidden_state", SUBNET_OUT,
                 "root_module.subnet_mem__out", "root_module.subnet_out.layer_out.weight"):
        assert name in nodes, name
    assert nodes["input"].kind == "input"
    assert nodes["target"].kind == "target"
    assert nodes["loss"].kind == "loss"
    assert nodes["root_module.subnet_pre"].kind == "parameter"
    assert len(nodes["root_module.subnet_pre"].roles) == 4
    assert nodes["root_module.subnet_pre"].iteration == -1
    assert nodes[HELPER].roles == tuple(f"up_to_iteration_{i:02d}" for i in range(5))
    assert nodes[SUBNET_OUT].shapes[SUBNET_OUT][-1] == 5
    edges = {(e.source, e.target) for e in graph.edges}
    assert ("input", HELPER) in edges
    assert ("loss_per_sample", "loss") in edges
    # the recurrent memory of the previous iteration is imported into this one
    assert any(n.is_import and n.iteration == 3 for n in graph.nodes)

    modules = {m.name: m for m in group.read_modules(trial)}
    assert modules["root_module"].num_parameters_total == 142_855
    assert {p.name for p in modules["root_module.subnet_out.layer_out"].parameters} == {
        "weight", "bias"
    }


@pytest.mark.parametrize("trial", TRIALS)
def test_tensor_values_are_consistent(group, trial):
    step, iterations = 592, 5
    last = iterations - 1
    for sample in range(SAMPLES):
        inputs = np.stack([
            group.read_tensor(trial, step, it, "input", "input", "forward", "sample",
                              sample).values
            for it in range(iterations)
        ])
        assert inputs.shape == (iterations, 5)
        assert np.all(np.abs(inputs) <= 1.0)
        partial = np.stack([
            group.read_tensor(trial, step, last, HELPER, f"up_to_iteration_{i:02d}",
                              "forward", "sample", sample).values
            for i in range(iterations)
        ])
        np.testing.assert_allclose(partial, np.cumsum(inputs, axis=0), atol=1e-5)
        target = group.read_tensor(trial, step, last, "target", "target", "forward",
                                   "sample", sample)
        assert target.kind == "target"
        np.testing.assert_array_equal(target.values, (partial[-1] > 0).astype(np.float32))

    loss = group.read_tensor(trial, step, last, "loss", "loss", "forward", "none")
    assert loss.shape == () and loss.kind == "loss"
    per_sample = group.read_tensor(trial, step, last, "loss_per_sample", "loss_per_sample",
                                   "forward", "batch_mean")
    assert math.isclose(loss.stats["mean"], per_sample.stats["mean"], rel_tol=1e-5)
    assert 0.0 < loss.stats["mean"] < 0.3

    weight = group.read_tensor(trial, step, -1, "root_module.subnet_pre",
                               "root_module.subnet_pre.layer_in.weight", "forward", "none")
    assert weight.shape == (200, 55) and weight.stats["numel"] == 200 * 55
    assert weight.stats["svd_top"] > 0
    update = group.read_tensor(trial, step, -1, "root_module.subnet_pre",
                               "root_module.subnet_pre.layer_in.weight", "update", "none")
    assert 0 < update.stats["update_ratio"] < 0.1
    gradient = group.read_tensor(trial, step, last, SUBNET_OUT, SUBNET_OUT,
                                 "gradient:gradients", "batch_mean")
    assert gradient.values.shape == (5,) and np.all(np.isfinite(gradient.values))

    series = group.read_series(trial, "loss", "loss", "forward", "none", "mean")
    assert list(series["training_step"]) == sorted(RECORDED)
    assert math.isclose(float(series["value"].iloc[-1]), loss.stats["mean"], rel_tol=1e-6)


def test_the_bug_is_in_the_data(group):
    def means(trial):
        values = np.concatenate([
            group.read_tensor(trial, step, it, SUBNET_OUT, SUBNET_OUT, "forward", "sample",
                              sample).values
            for step in (590, 592)
            for it in range(RECORDED[step][1])
            for sample in range(SAMPLES)
        ])
        return values[values > 0].mean(), values[values < 0].mean()

    pos, neg = means(BUGGED)  # written: +2.9 / -0.05
    assert abs(neg) < 0.1 * pos
    pos, neg = means(FIXED)  # written: +3.4 / -3.3
    assert abs(neg) > 0.5 * pos


@pytest.mark.parametrize("trial", TRIALS)
def test_kpis_and_notes(group, trial):
    kpis = group.read_kpis(trial)
    assert set(kpis["kpi_group"]) == {"loss", "accuracy"}
    assert len(set(kpis["type_of_execution"])) == 12
    assert kpis["timepoint"].min() == 0 and kpis["timepoint"].max() < 600
    assert kpis["value"].between(0, 1).all()

    notes = [n.text for n in group.read_notes(trial)]
    assert any("Training data: 100,000 sequences" in t for t in notes)
    recorded_notes = [t for t in notes if t.startswith(f"{trial} step")]
    assert len(recorded_notes) == len(RECORDED)
    assert "592" in recorded_notes[-1]


# --- every page has data (through the app's data layer, as the pages read it) ---------


@pytest.fixture(scope="module")
def app_data():
    from comgra_like.app.data import AppData

    return AppData(GROUP_DIR)


def test_the_modules_page_has_a_module_graph_and_histograms(app_data):
    from comgra_like.app import module_data

    assert module_data.module_graph_steps(app_data, WATCHED) == WATCHED_STEPS
    step, graph = module_data.module_graph(app_data, WATCHED)
    assert step == 400 and graph
    names = {m["id"] for m in graph["invocations"]}
    assert {"model.fc1", "model.relu1", "model.fc2", "model.out"} <= names
    histograms = module_data.histograms(app_data, WATCHED, "model.fc1")
    assert not histograms.empty
    assert sorted(set(histograms["training_step"])) == WATCHED_STEPS
    report = module_data.watch_report(app_data, WATCHED)
    assert report and "model.fc1" in str(report)
    # the tutorial's trials were recorded without watch(): the page says so
    assert module_data.module_graph(app_data, BUGGED) == (None, None)


def test_the_metrics_page_has_per_module_metrics(app_data):
    from comgra_like.app import metric_data

    listing = metric_data.listing(app_data, WATCHED)
    metrics = set(zip(listing["module"], listing["metric"]))
    for module in ("model.fc1", "model.fc2", "model.out"):
        assert {(module, "WeightNorm"), (module, "OutputRMS"),
                (module, "InputCovSpectrum")} <= metrics
    assert ("model", "loss") in metrics
    loss = metric_data.rows(app_data, WATCHED, "loss")
    assert len(loss) == 401
    values = loss.sort_values("training_step")["value"].to_numpy()
    assert values[-50:].mean() < 0.5 * values[:50].mean()  # it learnt
    spectrum = metric_data.rows(app_data, WATCHED, "InputCovSpectrum")
    assert sorted(set(spectrum["training_step"])) == WATCHED_STEPS


def test_the_flow_page_has_a_chain_of_flows(group):
    flows = group.read_flows(WATCHED)
    chain = [(f.source, f.target) for f in sorted(flows, key=lambda f: f.position)]
    assert chain == [("input", "model.fc1"), ("model.fc1", "model.relu1"),
                     ("model.relu1", "model.fc2"), ("model.fc2", "model.relu2"),
                     ("model.relu2", "model.out")]
    assert len({f.chain_id for f in flows}) == 1
    first = group.read_flow(WATCHED, next(f for f in flows if f.position == 0).record_id)
    assert first.flow.shape == (64, 30) and np.isfinite(first.flow).all()
    assert np.abs(first.flow).max() > 0


def test_the_findings_page_names_the_tutorial_bug_and_nothing_else(app_data):
    bugged = app_data.findings(BUGGED)
    assert [f["kind"] for f in bugged] == ["output_range"]
    assert bugged[0]["where"]["node"] == SUBNET_OUT
    assert "squashed on the negative side" in bugged[0]["explanation"]
    for trial in (FIXED, WATCHED):
        assert [f for f in app_data.findings(trial) if f["severity"] != "info"] == [], trial
