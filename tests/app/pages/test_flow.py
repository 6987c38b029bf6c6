"""The Flow page (issue 18) through its server callbacks (the Dash endpoint a browser
posts to), on a recorded conv net with stored flows (tests/app/flow_runs.py): the lists
of origins, steps and chains; the Sankey and its summary; a click on a heatmap; the
editor's toggles and paints; Save writing a probe the query API reads back, the page
selecting it and, once its flows are stored, showing them next to the flows before the
edit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from comgra_like.app import create_app, ids
from comgra_like.app.pages import flow as page

from comgra_like.query import open_group

pytest.importorskip("torch")


@pytest.fixture
def group_dir(tmp_path) -> Path:
    from tests.app import flow_runs

    return flow_runs.record(tmp_path)


def selection(trial: str = "conv") -> dict:
    return {"current": {"trial": trial}, "wanted": {"trial": trial}}


class Pages:
    """Posts callback requests to an app's server as the browser does."""

    def __init__(self, app: Any):
        self.app = app
        self.client = app.server.test_client()
        self.client.get("/")  # dash sets up its callback endpoints on the first request

    def call(self, output_key: str, values: dict[tuple[str, str], Any],
             changed: tuple[str, str] | None = None) -> dict:
        spec = self.app.callback_map[output_key]

        def entry(item: dict) -> dict:
            key = (item["id"], item["property"])
            return {**item, "value": values.get(key)}

        outputs = [{"id": o.split(".")[0], "property": o.split(".")[1].split("@")[0]}
                   for o in output_key.strip(".").split("...")]
        body = {"output": output_key, "outputs": outputs if len(outputs) > 1 else outputs[0],
                "inputs": [entry(i) for i in spec["inputs"]],
                "state": [entry(s) for s in spec.get("state", [])],
                "changedPropIds": [f"{changed[0]}.{changed[1]}"] if changed else []}
        response = self.client.post("/_dash-update-component", json=body)
        if response.status_code == 204:
            return {}
        assert response.status_code == 200, response.data[:2000]
        return {(i, p): v for i, props in json.loads(response.data)["response"].items()
                for p, v in props.items()}


def key_of(app: Any, first: str) -> str:
    return next(k for k in app.callback_map
                if k.startswith((f"..{first}", f"{first}@")) or k == first)


def lists(pages: Pages, **values: Any) -> dict:
    state = {(ids.SELECTION, "data"): selection(), (page.ORIGIN, "value"): values.get("origin"),
             (page.STEP, "value"): values.get("step"), (page.CHAIN, "value"): values.get("chain"),
             (page.LISTS_KEY, "data"): values.get("shown")}
    return pages.call(key_of(pages.app, f"{page.ORIGIN}.options"), state,
                      values.get("changed", (ids.SELECTION, "data")))


def sankey(pages: Pages, chain: str, slider: float, before: str | None = None,
           max_units: int = 64) -> dict:
    return pages.call(key_of(pages.app, f"{page.SANKEY}.figure"), {
        (page.CHAIN, "value"): chain, (page.BEFORE_CHAIN, "data"): before,
        (page.THRESHOLD, "value"): slider, (page.MAX_UNITS, "value"): max_units,
        (ids.SELECTION, "data"): selection()}, (page.THRESHOLD, "value"))


def text(children: Any) -> str:
    if isinstance(children, list):
        return "\n".join(text(c) for c in children)
    if isinstance(children, dict):
        return text(children.get("props", {}).get("children"))
    return "" if children is None else str(children)


def test_lists_sankey_and_heatmaps_of_the_recorded_flows(group_dir):
    pages = Pages(create_app(group_dir, prefetch=False))
    shown = lists(pages)
    assert shown[(page.ORIGIN, "value")] == page.RUN
    assert [o["value"] for o in shown[(page.STEP, "options")]] == [0, 1]
    assert shown[(page.STEP, "value")] == 1  # the latest step
    (option,) = shown[(page.CHAIN, "options")]
    assert option["label"] == "input → conv1 → conv2 (sample 0)"
    assert "no edits yet" in shown[(page.HISTORY, "children")]
    at_zero = lists(pages, step=0, changed=(page.STEP, "value"))
    chain = at_zero[(page.CHAIN, "value")]
    assert chain != option["value"]

    many = sankey(pages, chain, -4.0)
    few = sankey(pages, chain, -0.3)
    count = [len(r[(page.SANKEY, "figure")]["data"][0]["link"]["value"]) for r in (many, few)]
    assert count[0] > count[1] > 0
    summary = text(many[(page.SUMMARY, "children")])
    assert "input (1, 6, 6): 36 units in 36 groups" not in summary  # at most 64: each drawn
    assert "input (1, 6, 6): 36 units, each drawn" in summary
    grouped = sankey(pages, chain, -4.0, max_units=4)
    assert "36 units in 4 groups of 1×4×4" in text(grouped[(page.SUMMARY, "children")])
    assert many[(page.BEFORE_BOX, "style")]["display"] == "none"  # no edit: nothing before
    partial = sankey(pages, option["value"], -4.0)
    assert "partial flow, only the rows of 2 units of conv2" in text(
        partial[(page.SUMMARY, "children")])

    heat_key = key_of(pages.app, f"{page.HEATMAPS}.figure")
    maps = pages.call(heat_key, {(page.CHAIN, "value"): chain,
                                 (ids.SELECTION, "data"): selection()}, (page.CHAIN, "value"))
    names = [t["name"] for t in maps[(page.HEATMAPS, "figure")]["data"]]
    assert names == ["input", "conv1", "conv2"]
    unit = pages.call(page.UNIT + ".data", {
        (page.HEATMAPS, "clickData"): {"points": [{"curveNumber": 1, "x": 1, "y": 1}]},
        (page.CHAIN, "value"): chain, (ids.SELECTION, "data"): selection()},
        (page.HEATMAPS, "clickData"))[(page.UNIT, "data")]
    assert unit == {"chain": chain, "node": "conv1", "unit": 4}
    marked = pages.call(heat_key, {(page.CHAIN, "value"): chain, (page.UNIT, "data"): unit,
                                   (ids.SELECTION, "data"): selection()}, (page.UNIT, "data"))
    info = marked[(page.UNIT_INFO, "children")]
    assert info.startswith("conv1 unit 4 exchanges gradient with input: 9 units")
    assert any(t["name"] == "highlight input"
               for t in marked[(page.HEATMAPS, "figure")]["data"])


def test_edit_save_and_the_new_flow_next_to_the_old(group_dir):
    import torch

    from comgra_like.record.flow import FlowChain, write_flows
    from tests.flow.conv_net import build_model, forward

    pages = Pages(create_app(group_dir, prefetch=False))
    first = lists(pages, step=0, changed=(page.STEP, "value"))
    chain, before_save = first[(page.CHAIN, "value")], first[(page.LISTS_KEY, "data")]
    edit_key = key_of(pages.app, f"{page.EDIT}.data")

    def edit(state: Any, click_unit: int | None, mode: str = "toggle", z: float = 3.0,
             changed=(page.EDITOR, "clickData")) -> dict:
        click = None if click_unit is None else {
            "points": [{"curveNumber": 0, "x": click_unit % 6, "y": click_unit // 6}]}
        return pages.call(edit_key, {
            (page.CHAIN, "value"): chain, (page.EDITOR, "clickData"): click,
            (page.EDIT, "data"): state, (page.Z_VALUE, "value"): z, (page.MODE, "value"): mode,
            (page.ORIGIN, "value"): page.RUN, (ids.SELECTION, "data"): selection()},
            changed)[(page.EDIT, "data")]

    state = edit(None, None, changed=(page.CHAIN, "value"))
    original = np.asarray(state["values"], np.float32).reshape(state["shape"])
    assert state["shape"] == [1, 6, 6] and state["chain"] == chain
    state = edit(state, 7)  # a nonzero cell toggled to 0
    state = edit(state, 7)  # and back to z
    state = edit(state, 8)  # off
    state = edit(state, 0, mode="paint", z=-2.0)
    values = np.asarray(state["values"], np.float32).reshape(6, 6)
    assert values[1, 1] == 3.0 and values[1, 2] == 0.0 and values[0, 0] == -2.0
    assert (values != original[0]).sum() == 3

    saved = pages.call(key_of(pages.app, f"{page.SAVED}.data"), {
        (page.SAVE, "n_clicks"): 1, (page.EDIT, "data"): state,
        (page.NOTE, "value"): "three cells", (ids.SELECTION, "data"): selection()},
        (page.SAVE, "n_clicks"))
    probe_id = saved[(page.SAVED, "data")]["probe_id"]
    assert saved[(page.ORIGIN, "value")] == probe_id  # the page shows the new edit
    group = open_group(group_dir)
    (probe,) = group.read_probes("conv")
    assert (probe.probe_id, probe.status, probe.note, probe.training_step) == (
        probe_id, "pending", "three cells", 0)
    np.testing.assert_array_equal(group.read_probe_input("conv", probe_id), values[None, None])

    # a tick's call that left before Save (the recorded run shown) and returns after it
    # follows the new edit: it must not take the page back to the recorded run
    stale = lists(pages, origin=page.RUN, step=0, chain=chain, shown=before_save,
                  changed=(ids.TICK, "n_intervals"))
    assert stale[(page.ORIGIN, "value")] == probe_id
    # the page selects the new edit and says it waits for the serving process
    shown = lists(pages, origin=probe_id, chain=chain, changed=(page.ORIGIN, "value"))
    assert shown[(page.ORIGIN, "value")] == probe_id
    assert shown[(page.CHAIN, "value")] is None
    assert "pending" in shown[(page.HISTORY, "children")]

    # the serving process runs it (here in this process, as probe.serve does)
    model, flow_chain = build_model(), FlowChain()
    loss = forward(model, torch.from_numpy(values[None, None]), flow_chain)
    flow_chain.backward(loss)
    write_flows(flow_chain.flows(0), group_dir, "conv", training_step=0, probe_id=probe_id)
    from comgra_like.format.flows import write_probe_result

    write_probe_result(group_dir, "conv", probe_id, {"probe_id": probe_id, "status": "done",
                                                     "record_ids": [], "seconds": 0.1})
    # the next tick: the new flow is listed, with the chain before the edit beside it
    ticked = lists(pages, origin=probe_id, chain=None, changed=(ids.TICK, "n_intervals"))
    new_chain = ticked[(page.CHAIN, "value")]
    assert new_chain is not None and ticked[(page.BEFORE_CHAIN, "data")] == chain
    assert "edit 1 of 1: done" in ticked[(page.HISTORY, "children")]
    both = sankey(pages, new_chain, -4.0, before=chain)
    assert both[(page.BEFORE_BOX, "style")].get("display") != "none"
    new_links = both[(page.SANKEY, "figure")]["data"][0]["link"]["value"]
    old_links = both[(page.BEFORE, "figure")]["data"][0]["link"]["value"]
    assert new_links != old_links
    # the history steps back to the recorded run
    options = ticked[(page.ORIGIN, "options")]
    back = pages.call(key_of(pages.app, f"{page.ORIGIN}.value"), {
        (page.PREVIOUS, "n_clicks"): 1, (page.ORIGIN, "value"): probe_id,
        (page.ORIGIN, "options"): options}, (page.PREVIOUS, "n_clicks"))
    assert back[(page.ORIGIN, "value")] == page.RUN
    assert pages.call(key_of(pages.app, f"{page.ORIGIN}.value"), {
        (page.FOLLOWING, "n_clicks"): 1, (page.ORIGIN, "value"): page.RUN,
        (page.ORIGIN, "options"): options}, (page.FOLLOWING, "n_clicks"))[
        (page.ORIGIN, "value")] == probe_id


def test_without_flows_the_page_says_how_to_get_them(tiny_group):
    pages = Pages(create_app(tiny_group, prefetch=False))
    shown = pages.call(
        key_of(pages.app, f"{page.ORIGIN}.options"),
        {(ids.SELECTION, "data"): selection("trial_a")}, (ids.SELECTION, "data"))
    assert shown[(page.CHAIN, "value")] is None
    assert "No gradient flows stored for trial_a" in shown[(page.HISTORY, "children")]
