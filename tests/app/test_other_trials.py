"""A page with nothing to show for the selected trial names the trials that have it: on
the committed example the tutorial's trials have no watch() data, the watched trial has
module graphs, metrics and flows. The Modules, Metrics and Flow pages show each such trial
as a button (other_trials.offer) whose click sets the trial selector (one callback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly
import pytest
from comgra_like.app import create_app, ids, other_trials
from comgra_like.app.data import AppData
from comgra_like.app.pages import flow, metrics, modules
from dash import no_update

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
WATCHED = "trial_watched_classifier"
BUGGED = "trial_bugged_original_version"
TRIAL_SELECTOR = json.dumps(ids.selector("trial"), sort_keys=True, separators=(",", ":"))


def test_the_example_names_its_watched_trial_for_modules_metrics_and_flow():
    data = AppData(EXAMPLE)
    data.refresh(force=True)
    assert other_trials.with_module_graphs(data) == [WATCHED]
    assert other_trials.with_metrics(data) == [WATCHED]
    assert other_trials.with_flows(data) == [WATCHED]
    offer = as_json(other_trials.offer(other_trials.with_flows(data), BUGGED, "flows"))
    assert button_trials(offer) == [WATCHED]
    # The trial that has them needs no offer; nor does a group where no trial has them.
    assert other_trials.offer([WATCHED], WATCHED, "flows") is None
    assert other_trials.offer([], BUGGED, "flows") is None


def test_at_most_five_trials_are_named():
    names = [f"t{i}" for i in range(8)]
    assert other_trials.others_of(names, "t0") == ["t1", "t2", "t3", "t4", "t5"]
    offer = as_json(other_trials.offer(names, "t0", "metrics"))
    assert button_trials(offer) == ["t1", "t2", "t3", "t4", "t5"]
    assert " …" in offer["props"]["children"]


def test_the_offer_is_a_button_per_other_trial():
    offer = other_trials.offer(["a", BUGGED, WATCHED], BUGGED, "flows")
    assert offer.className == "other-trials"
    assert offer.children[0] == "Trials with flows:"
    buttons = offer.children[1:3]
    assert [b.id for b in buttons] == [other_trials.button_id("a"),
                                       other_trials.button_id(WATCHED)]
    assert [b.children for b in buttons] == ["a", WATCHED]
    assert all(b.n_clicks == 0 and "other-trial" in b.className for b in buttons)


def test_only_a_real_click_on_a_trial_of_the_group_opens_it():
    known = [BUGGED, WATCHED]
    click = [{"prop_id": "x.n_clicks", "value": 1}]
    assert other_trials.clicked_trial(other_trials.button_id(WATCHED), click, known) == WATCHED
    # buttons that appear fire with n_clicks 0
    appeared = [{"prop_id": "x.n_clicks", "value": 0}]
    assert other_trials.clicked_trial(other_trials.button_id(WATCHED), appeared,
                                      known) is no_update
    assert other_trials.clicked_trial(other_trials.button_id("gone"), click,
                                      known) is no_update
    assert other_trials.clicked_trial("modules-graph", click, known) is no_update
    assert other_trials.clicked_trial(None, click, known) is no_update


# --- through the app's server, as the browser calls it ---------------------------------


def as_json(component: Any) -> Any:
    """A component as the server sends it."""
    return json.loads(json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder))


def button_trials(tree: Any) -> list[str]:
    """The trials of the offer's buttons in a component tree (as JSON), in order."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            props = node.get("props", {})
            key = props.get("id")
            if isinstance(key, dict) and key.get("type") == other_trials.BUTTON_TYPE:
                found.append(key["trial"])
            walk(props.get("children"))

    walk(tree)
    return found


@pytest.fixture(scope="module")
def server():
    app = create_app(EXAMPLE, prefetch=False)
    client = app.server.test_client()
    client.get("/")  # dash sets up its callback endpoints on the first request
    return app, client


def post(server: Any, output_key: str, values: dict, changed: list[str],
         inputs: list | None = None) -> dict:
    """The answer of one callback ({"id.property": value}; {}: nothing updated)."""
    app, client = server
    spec = app.callback_map[output_key]

    def entry(item: dict) -> dict:
        return {**item, "value": values.get((item["id"], item["property"]))}

    parts = output_key.strip(".").split("...")
    outputs = [dict(zip(("id", "property"), p.split("@")[0].rsplit(".", 1))) for p in parts]
    for o in outputs:
        if o["id"].startswith("{"):
            o["id"] = json.loads(o["id"])
    body = {"output": output_key, "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": inputs if inputs is not None else [entry(i) for i in spec["inputs"]],
            "state": [entry(s) for s in spec.get("state", [])],
            "changedPropIds": changed}
    answer = client.post("/_dash-update-component", json=body)
    if answer.status_code == 204:
        return {}
    assert answer.status_code == 200, answer.data[:2000]
    return {f"{i}.{p}": v for i, props in json.loads(answer.data)["response"].items()
            for p, v in props.items()}


def key_of(app: Any, first: str) -> str:
    return next(k for k in app.callback_map if k.startswith((f"..{first}", f"{first}@")))


def selection(trial: str) -> dict:
    return {"current": {"trial": trial}, "wanted": {"trial": trial}}


def test_one_callback_sets_the_trial_selector_for_every_page(server):
    app, _ = server
    keys = [k for k, spec in app.callback_map.items()
            if any(other_trials.BUTTON_TYPE in i["id"] for i in spec["inputs"])]
    # three pages show the buttons; one callback, whose output is the trial selector
    assert len(keys) == 1 and keys[0].startswith(f"{TRIAL_SELECTOR}.value@"), keys

    def click(trial: str, n_clicks: int) -> dict:
        button = other_trials.button_id(trial)
        inputs = [[{"id": button, "property": "n_clicks", "value": n_clicks}]]
        changed = [json.dumps(button, sort_keys=True, separators=(",", ":")) + ".n_clicks"]
        return post(server, keys[0], {}, changed, inputs=inputs)

    assert click(WATCHED, 1) == {f"{TRIAL_SELECTOR}.value": WATCHED}
    assert click(WATCHED, 0) == {}  # a button that appeared
    assert click("no_such_trial", 1) == {}


def test_the_empty_modules_metrics_and_flow_pages_offer_the_watched_trial(server):
    app, _ = server
    chosen = {(ids.SELECTION, "data"): selection(BUGGED)}
    changed = [f"{ids.SELECTION}.data"]
    shown = post(server, key_of(app, f"{modules.GRAPH}.figure"), chosen, changed)
    assert button_trials(shown[f"{modules.INFO}.children"]) == [WATCHED]
    message = shown[f"{modules.GRAPH}.figure"]["layout"]["annotations"][0]["text"]
    assert "No module graph in this trial" in message

    shown = post(server, key_of(app, f"{metrics.OVERLAY}.options"), chosen, changed)
    cards = shown[f"{metrics.CARDS}.children"]
    assert button_trials(cards) == [WATCHED]
    assert "metrics-empty" in cards[0]["props"]["className"]

    shown = post(server, key_of(app, f"{flow.ORIGIN}.options"), chosen, changed)
    history = shown[f"{flow.HISTORY}.children"]
    assert history[0].startswith(f"No gradient flows stored for {BUGGED}")
    assert button_trials(history) == [WATCHED]

    # the watched trial itself shows its data, no offer
    chosen = {(ids.SELECTION, "data"): selection(WATCHED)}
    shown = post(server, key_of(app, f"{modules.GRAPH}.figure"), chosen, changed)
    assert button_trials(shown[f"{modules.INFO}.children"]) == []
    assert "structure of step" in shown[f"{modules.INFO}.children"]
    shown = post(server, key_of(app, f"{flow.ORIGIN}.options"), chosen, changed)
    assert button_trials(shown[f"{flow.HISTORY}.children"]) == []
