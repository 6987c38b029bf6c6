"""Visualization files written for comgra 0.11.5 (issue 14 item 9): comgra's own example
plugin on data recorded by comgra's own tutorial script, both from comgra's released
wheel with their imports changed, and comgra's database view checked value by value
against the query API."""

from __future__ import annotations

import numpy as np
import pytest
from comgra_like.app import comgra_plugins as cp
from comgra_like.app.data import AppData
from comgra_like.app.pages.visualization import context_for
from comgra_like.app.plugin import VisualizationPlugin, check_plugin_file
from dash import dcc

from comgra_like.errors import ConfigurationError
from comgra_like.query import open_group

from .comgra_release import record_tutorial, write_plugin

TRIAL = "trial_bugged_original_version"
STEP = 3  # the tutorial's fourth step: 4 iterations
LAST = 3
HELPER = "helper_partial_sums"
HELPER_ROLES = ["up_to_iteration_00", "up_to_iteration_01", "up_to_iteration_02", "final"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("comgra_tutorial")
    group_path = record_tutorial(root)
    return group_path, write_plugin(root)


@pytest.fixture(scope="module")
def group(recorded):
    return open_group(recorded[0])


@pytest.fixture(scope="module")
def db(group):
    return cp.PseudoDb(group, TRIAL, STEP)


def _render(recorded, **current):
    group_path, plugin_file = recorded
    data = AppData(group_path)
    selection = {"trial": TRIAL, "training_step": STEP, "iteration": LAST,
                 "recording_type": "forward"} | current
    plugin = VisualizationPlugin(plugin_file)
    return plugin, plugin.render(context_for(data, selection))


def _graphs(component):
    found = []

    def walk(item):
        if isinstance(item, dcc.Graph):
            found.append(item)
        children = getattr(item, "children", None)
        for child in children if isinstance(children, (list, tuple)) else [children]:
            if child is not None and not isinstance(child, str):
                walk(child)

    walk(component)
    return found


def _text(component) -> str:
    return str(component.to_plotly_json())


@pytest.mark.parametrize("aggregation, read_as", [
    ("batch_mean", ("batch_mean", -1)),
    ("sample:2", ("sample", 2)),
])
def test_comgras_example_plugin_draws_the_partial_sums(recorded, group, aggregation, read_as):
    plugin, out = _render(recorded, node=HELPER, role="final", aggregation=aggregation)
    assert plugin.style == cp.COMGRA
    assert "plugin-error" not in _text(out), _text(out)
    graphs = _graphs(out)
    assert len(graphs) == 1
    traces = graphs[0].figure["data"]
    assert [t["name"] for t in traces] == [f"neuron_{i}" for i in range(5)]
    # each curve: one point per iteration, the value of that role read independently
    expected = np.array([
        group.read_tensor(TRIAL, STEP, LAST, HELPER, role, "forward", *read_as).values
        for role in HELPER_ROLES
    ])
    for neuron, trace in enumerate(traces):
        assert list(trace["x"]) == [0, 1, 2, 3]
        np.testing.assert_allclose(trace["y"], expected[:, neuron], rtol=1e-6)
    # the plugin's listing of the selection names comgra's selection values
    text = _text(out)
    batch_value = "batch_mean" if read_as[0] == "batch_mean" else "Sample 2"
    assert f"'batch_aggregation': '{batch_value}'" in text
    assert "'node_name': 'node__helper_partial_sums'" in text
    assert "number of matches: 9" in text  # 4 statistics + 5 neurons


def test_comgras_example_plugin_on_another_node_explains_itself(recorded):
    _, out = _render(recorded, node="output", role="output", aggregation="batch_std")
    text = _text(out)
    assert "Select the node helper_partial_sums" in text and not _graphs(out)
    assert "'node_name': 'node__output'" in text and "number of matches: 9" in text


def test_signature_decides_the_form(tmp_path):
    native = tmp_path / "native.py"
    native.write_text("def create_visualization(ctx):\n    return 'ok'\n")
    comgra_style = tmp_path / "comgra_style.py"
    comgra_style.write_text(
        f"def create_visualization({', '.join(cp.COMGRA_PARAMETERS)}):\n    return 'ok'\n"
    )
    other = tmp_path / "other.py"
    other.write_text("def create_visualization(a, b):\n    return 'ok'\n")
    for path, style in ((native, cp.NATIVE), (comgra_style, cp.COMGRA)):
        plugin = VisualizationPlugin(path)
        assert plugin.load()[1] is None and plugin.style == style
    problem = check_plugin_file(other)
    assert "create_visualization(a, b)" in problem and "tsc, ngs, db" in problem
    assert "create_visualization(ctx)" in problem


def _values(matches):
    return {key[7:]: value for key, value in matches}


def test_get_matches_returns_the_recorded_values(group, db):
    base = {"training_step": STEP, "record_type": "data", "iteration": 1}
    # a calculated tensor of one sample: statistics and every neuron
    read = group.read_tensor(TRIAL, STEP, 1, "root_module.subnet_out__out",
                             "root_module.subnet_out__out", "forward", "sample", 4)
    found = _values(db.get_matches(base | {
        "node_name": "node__root_module.subnet_out__out",
        "role_within_node": "root_module.subnet_out__out",
        "type_of_tensor_recording": "forward", "batch_aggregation": "Sample 4",
    })[0])
    for item in cp.STAT_ITEMS:
        assert found[(item, None)] == pytest.approx(read.stats[item], rel=1e-6)
    for i, value in enumerate(read.values):
        assert found[("neuron", str(i))] == pytest.approx(float(value), rel=1e-6)
    assert len(found) == 4 + read.values.size

    # gradients under the loss group's own name (the output has one on the last iteration)
    read = group.read_tensor(TRIAL, STEP, LAST, "output", "output", "gradient:gradients",
                             "batch_abs_max")
    found = _values(db.get_matches(base | {"iteration": LAST} | {
        "node_name": "node__output", "role_within_node": "output",
        "type_of_tensor_recording": "gradients", "batch_aggregation": "batch_abs_max",
        "item": "neuron",
    })[0])
    np.testing.assert_allclose([found[("neuron", str(i))] for i in range(5)], read.values,
                               rtol=1e-6)

    # a parameter (stored once, iteration -1) is found in each iteration as comgra's *old
    read = group.read_tensor(TRIAL, STEP, -1, "root_module.subnet_out.fnn1.weight",
                             "root_module.subnet_out.fnn1.weight", "forward", "none")
    found = _values(db.get_matches(base | {
        "node_name": "node__root_module.subnet_out.fnn1.weight*old",
        "role_within_node": "root_module.subnet_out.fnn1.weight",
        "type_of_tensor_recording": "forward", "batch_aggregation": "has_no_batch_dimension",
    })[0])
    assert set(found) == {(item, None) for item in (*cp.STAT_ITEMS, "svd")}
    assert found[("svd", None)] == pytest.approx(read.stats["svd_top"], rel=1e-6)
    assert found[("abs_max", None)] == pytest.approx(read.stats["abs_max"], rel=1e-6)

    # the loss: one single_value
    read = group.read_tensor(TRIAL, STEP, LAST, "loss", "loss", "forward", "none")
    matches, _ = db.get_matches({"node_name": "node__loss", "type_of_tensor_recording": "forward"})
    assert [(k[2], k[7], k[8]) for k, _ in matches] == [
        ("has_no_batch_dimension", "single_value", None)
    ]
    assert matches[0][1] == pytest.approx(float(read.values.reshape(-1)[0]), rel=1e-6)


def test_get_matches_follows_imports_and_second_names(group, db):
    # memory_out of iteration 0, shown in iteration 1, has comgra's name (after its last
    # registration, as node 'memory'), and comgra_like's (after its first)
    previous = group.read_tensor(TRIAL, STEP, 0, "root_module.subnet_mem__out",
                                 "root_module.subnet_mem__out", "forward", "batch_mean")
    for node_name, role in (
        ("node__memory*old", "memory_out__from_iteration_0"),
        ("node__root_module.subnet_mem__out*old", "root_module.subnet_mem__out__from_iteration_0"),
    ):
        found = _values(db.get_matches({
            "iteration": 1, "node_name": node_name, "role_within_node": role,
            "type_of_tensor_recording": "forward", "batch_aggregation": "batch_mean",
            "record_type": "data", "item": "neuron",
        })[0])
        np.testing.assert_allclose([found[("neuron", str(i))] for i in range(50)],
                                   previous.values, rtol=1e-6)
    # the initial memory (iteration -1) in iteration 0
    initial = group.read_tensor(TRIAL, STEP, -1, "memory", "initial_memory", "forward",
                                "batch_std")
    found = _values(db.get_matches({
        "iteration": 0, "node_name": "node__memory*old",
        "role_within_node": "initial_memory__from_initialization",
        "batch_aggregation": "batch_std", "type_of_tensor_recording": "forward",
        "item": "mean",
    })[0])
    assert found == {("mean", None): pytest.approx(initial.stats["mean"], abs=1e-9)}
    # the tensor registered a second time as node 'memory': the same values
    same = group.read_tensor(TRIAL, STEP, 2, "root_module.subnet_mem__out",
                             "root_module.subnet_mem__out", "forward", "sample", 0)
    found = _values(db.get_matches({
        "iteration": 2, "node_name": "node__memory", "role_within_node": "memory_out",
        "batch_aggregation": "Sample 0", "type_of_tensor_recording": "forward",
        "record_type": "data", "item": "abs_mean",
    })[0])
    assert found[("abs_mean", None)] == pytest.approx(same.stats["abs_mean"], rel=1e-6)


def test_meta_information_and_possible_values(group, db):
    meta = {
        key[7]: value for key, value in db.get_matches({
            "iteration": 0, "node_name": "node__input", "role_within_node": "input",
            "record_type": "meta_information",
        })[0]
    }
    assert meta == {"tensor_shape": [128, 5], "index_of_batch_dimension": 0}
    meta = {
        key[7]: value for key, value in db.get_matches({
            "iteration": 2, "node_name": "node__root_module.subnet_pre*old",
            "role_within_node": "root_module.subnet_pre.fnn1.weight",
            "record_type": "meta_information",
        })[0]
    }
    assert meta == {"tensor_shape": [200, 55], "index_of_batch_dimension": None}

    # possible values: each attribute's alternatives with all other filters kept
    matches, possible = db.get_matches({
        "training_step": STEP, "type_of_tensor_recording": "forward",
        "batch_aggregation": "Sample 1", "iteration": LAST,
        "node_name": "node__helper_partial_sums", "role_within_node": "final",
        "record_type": "data",
    })
    listing = group.list_tensors(TRIAL, STEP)
    helper = listing[(listing["node"] == HELPER) & (listing["recording_type"] == "forward")]
    assert possible["role_within_node"] == set(helper["role"])
    assert possible["batch_aggregation"] == {"batch_mean", "batch_abs_max", "batch_std"} | {
        f"Sample {i}" for i in helper["sample_index"] if i >= 0
    }
    assert possible["iteration"] == {LAST} and possible["training_step"] == {STEP}
    assert possible["item"] == {"mean", "abs_mean", "std", "abs_max", "neuron"}
    assert possible["metadata"] == {None, "0", "1", "2", "3", "4"}
    assert len(matches) == 9
    # iteration -1 is never a key (comgra hides it too); unknown keys are refused
    assert db.get_matches({"iteration": -1})[0] == []
    with pytest.raises(ConfigurationError, match="unknown filter key.*'node'"):
        db.get_matches({"node": "input"})


def test_training_step_configuration_and_node_graph(group, recorded):
    steps = group.list_steps(TRIAL)
    steps = steps[steps["training_step"] == STEP].sort_values("iteration")
    selection = cp.Selection(TRIAL, STEP, 1, "root_module.subnet_mem__out@0",
                             "root_module.subnet_mem__out", "gradient:gradients", "sample", 3)
    (recordings, type_of_execution, tsc, ngs, db, step, recording_type, aggregation,
     iteration, node_name, role) = cp.comgra_arguments(group, selection)
    assert recordings.recordings is db and type_of_execution == "04_iterations" == tsc.type_of_execution
    assert [g.hash_of_node_graph_structure for g in tsc.graph_configuration_per_iteration] == list(
        steps["graph_hash"]
    )
    assert (step, recording_type, aggregation, iteration) == (STEP, "gradients", "Sample 3", 1)
    assert (node_name, role) == ("node__memory*old", "memory_out__from_iteration_0")  # comgra's
    graph = group.read_graph(TRIAL, STEP, 1)
    assert ngs.node_graph_hash == graph.graph_hash
    assert set(ngs.name_to_node) == {db.naming.node_name(n, 1) for n in graph.nodes}
    assert {"node__input", "node__memory", "node__memory*old",
            "node__root_module.subnet_pre*old"} <= set(ngs.name_to_node)
    assert ngs.name_to_node["node__input"].type_of_tensor == "input"
    assert sorted(name for column in ngs.dag_format for name in column) == sorted(ngs.name_to_node)
    references = tsc.graph_configuration_per_iteration[LAST].tensor_graph_structure
    helper_roles = {r.role_within_node for r in references.tensor_references
                    if r.node_name == "node__helper_partial_sums"}
    assert helper_roles == set(HELPER_ROLES)
    assert "root_module" in tsc.modules_and_parameters
    assert "subnet_pre" in tsc.modules_and_parameters["root_module"].submodules


def test_sample_names_with_categories_follow_comgra():
    assert cp.comgra_batch_aggregation("sample", 3) == "Sample 3"
    assert cp.comgra_batch_aggregation("sample", 3, {3: "hard"}, 128) == "Sample 003 | hard"
    assert cp.comgra_batch_aggregation("none") == "has_no_batch_dimension"
    assert cp.comgra_recording_type("gradient:main") == "main"
    assert cp.comgra_recording_type("forward") == "forward"
