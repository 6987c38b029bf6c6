"""The checks of app/flow_edits.py on what the Flow page's browser sends back (issue 28),
on the FlowData of a real recorded chain (tests/app/flow_runs.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from comgra_like.app import flow_edits as fe
from comgra_like.app import flow_figures as ff

from comgra_like.errors import ConfigurationError
from comgra_like.query import open_group

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    from tests.app import flow_runs

    group_dir = flow_runs.record(tmp_path_factory.mktemp("edits"))
    group = open_group(group_dir)
    infos = sorted((f for f in group.read_flows("conv") if f.training_step == 0),
                   key=lambda f: f.position)
    return infos[0].chain_id, [group.read_flow("conv", f.record_id) for f in infos]


def test_edited_values_take_only_the_stored_shape_and_finite_numbers(chain):
    chain_id, flows = chain
    stored = fe.stored_input(chain_id, flows)
    assert stored.shape == (1, 6, 6) and stored.node == "input" and stored.probe_id is None
    state = fe.editor_state(stored, stored.values)
    np.testing.assert_array_equal(fe.edited_values(state, stored), stored.values)
    bad = [({**state, "chain": "other"}, "not of the chain shown"),
           ({**state, "shape": [36]}, r"stored with shape \(1, 6, 6\)"),
           ({**state, "shape": [1, 6, 6.0]}, "stored with shape"),
           ({**state, "shape": "1,6,6"}, "stored with shape"),
           ({**state, "values": state["values"][:-1]}, "holds 35 values"),
           ({**state, "values": {"a": 1}}, "holds dict values"),
           ({**state, "values": [True] * 36}, "must be numbers"),
           ({**state, "values": [float("nan")] * 36}, "finite"),
           ({**state, "values": [1e39] * 36}, "finite float32"),
           (["not", "a", "mapping"], "not of the chain shown")]
    for sent, message in bad:
        with pytest.raises(ConfigurationError, match=message):
            fe.edited_values(sent, stored)


def test_an_input_beyond_the_editors_bound_is_not_offered(chain):
    chain_id, flows = chain
    big = dataclasses.replace(flows[0].info, source_shape=(1, 300, 300))
    with pytest.raises(ConfigurationError, match="at most 65,536"):
        fe.stored_input(chain_id, [dataclasses.replace(flows[0], info=big)] + flows[1:])
    assert fe.stored_input(chain_id, []) is None


def test_clicked_units_z_counts_and_slider_are_bounded(chain):
    chain_id, flows = chain
    nodes = ff.chain_nodes(flows)
    assert fe.checked_unit({"chain": chain_id, "node": "conv1", "unit": 17}, chain_id,
                           nodes) == ("conv1", 17)
    for unit in ({"chain": chain_id, "node": "conv1", "unit": 18},
                 {"chain": chain_id, "node": "conv1", "unit": -1},
                 {"chain": chain_id, "node": "conv1", "unit": "3"},
                 {"chain": chain_id, "node": "nope", "unit": 0},
                 {"chain": "other", "node": "conv1", "unit": 0}, None, [1]):
        assert fe.checked_unit(unit, chain_id, nodes) is None
    assert fe.checked_z(None) == 1.0 and fe.checked_z("2.5") == 2.5
    for z in ("x", float("inf"), 1e39, [1]):
        with pytest.raises(ConfigurationError, match="z must be"):
            fe.checked_z(z)
    assert fe.checked_count(10**9, 1, 1024, 16) == 1024
    assert fe.checked_count(0, 1, 1024, 16) == 1
    assert fe.checked_count("64", 1, 1024, 16) == 16
    assert fe.checked_slider(float("nan"), -4.0, 0.0, -2.0) == -2.0
    assert fe.checked_slider(7, -4.0, 0.0, -2.0) == 0.0
