"""The Modules page's optimizer panel: the pure builder over a real recording's rows
(read through AppData and the query API), and the panel's callback in a served app (the
Dash request a browser sends for a picked module's panel)."""

from __future__ import annotations

import json

import torch
from comgra_like.app import create_app
from comgra_like.app.data import AppData
from comgra_like.app.optimizer_figures import PLOTS, optimizer_figure, optimizer_state
from comgra_like.app.pages.modules.layout import panel, panel_id

import comgra_like

from .loops import batches, model, train


def _recording(tmp_path):
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    handle = comgra_like.watch(net, optimizer=opt, log_freq=1, trial_id="t",
                               standalone_dir=str(tmp_path / "w"), verbose=False)
    train(net, opt, batches(6), accum=2)
    handle.unwatch()
    return handle.group_path


def test_builder_draws_each_parameter_of_the_module(tmp_path):
    data = AppData(_recording(tmp_path))
    frame = optimizer_state(data, "t", "model.0")
    assert set(frame.parameter) == {"model.0.weight", "model.0.bias"}
    figure = optimizer_figure(frame, "model.0")
    names = {t["name"] for t in figure["data"]}
    assert {"weight m", "weight v", "bias m", "weight min", "weight ratio",
            "weight share"} <= names
    ratio = next(t for t in figure["data"] if t["name"] == "weight ratio")
    assert ratio["x"] == [0, 1, 2]  # three optimizer steps, every one recorded
    rows = frame[(frame.parameter == "model.0.weight") & (frame.quantity == "update_ratio")]
    assert ratio["y"] == rows.sort_values("training_step").value.tolist()
    assert len({t["xaxis"] for t in figure["data"]}) == len(PLOTS)
    # a module without optimizer state (and an invocation id of a second call)
    assert optimizer_figure(frame, "model.1#1")["data"] == []
    assert optimizer_state(data, "missing", "model.0").empty


def test_a_trial_without_optimizer_state_reads_empty_and_skips_nothing(tmp_path):
    # watch() without an optimizer: no optimizer rows; the panel's read is an empty
    # frame, not a failure shown as an unreadable file (pandas 3.1 gives no columns
    # for ``str.rpartition`` of no rows)
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    handle = comgra_like.watch(net, log_freq=1, trial_id="t",
                               standalone_dir=str(tmp_path / "w"), verbose=False)
    train(net, opt, batches(2))
    handle.unwatch()
    data = AppData(handle.group_path)
    assert optimizer_state(data, "t", "model.0").empty
    assert data.group.skipped == []
    assert data.status().skipped == ()


def test_panel_shows_the_state_through_its_callback(tmp_path):
    group = _recording(tmp_path)
    assert "'modules-optimizer'" in str(panel("model.2"))
    app = create_app(group, prefetch=False)
    client = app.server.test_client()
    output = json.dumps(panel_id("optimizer", "model.2"), separators=(",", ":"),
                        sort_keys=True)
    key = next(k for k in app.callback_map if '"modules-optimizer"' in k)
    spec = app.callback_map[key]
    body = {
        "output": key,
        "outputs": [{"id": panel_id("optimizer", "model.2"), "property": "figure"},
                    {"id": panel_id("optimizer", "model.2"), "property": "style"}],
        "inputs": [{"id": panel_id("key", "model.2"), "property": "data", "value": ["k"]}],
        "state": [{"id": s["id"], "property": s["property"],
                   "value": {"current": {"trial": "t"}}} for s in spec["state"]],
        "changedPropIds": [json.dumps(panel_id("key", "model.2"), separators=(",", ":"),
                                      sort_keys=True) + ".data"],
    }
    response = client.post("/_dash-update-component", json=body)
    assert response.status_code == 200, response.data[:500]
    answer = response.get_json()["response"]
    shown = answer[output]
    assert shown["style"] == {}
    assert {t["name"] for t in shown["figure"]["data"]} >= {"weight m", "bias ratio"}
