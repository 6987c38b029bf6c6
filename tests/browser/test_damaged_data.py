"""The GUI in headless Chromium with damaged files and hostile names (issue 20, items 9
and 11), on data written by the real recorder."""

from __future__ import annotations

from pathlib import Path

import pytest
from app.damaged_data import corrupt_data_pages, damaged_copy
from comgra_like.app import ids
from test_gui import GRAPH, css, stats_text, text_of, wait_for_change, wait_for_header

from tests.browser.helpers import start_app, wait_until

pytestmark = pytest.mark.browser

LINK = '<a href="https://evil.example/phish">click me</a>'
BOLD_NODE = "<b>bold input</b>"


def banner_items(dash_duo) -> list[str]:
    return dash_duo.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent);",
        f"#{ids.BANNER} .skipped-banner li",
    )


def test_damaged_files_in_the_first_trial_are_named_and_every_other_step_shows(
    dash_duo, tmp_path, tiny_group
):
    damaged = damaged_copy(tiny_group, tmp_path)
    start_app(dash_duo, damaged["group"])
    # step 0's values and iteration 0's graph are damaged: the first readable ones show
    wait_for_header(dash_duo, "trial", "trial_a")
    wait_for_header(dash_duo, "step", "1")
    wait_for_header(dash_duo, "iteration", "1")
    assert stats_text(dash_duo)
    dash_duo.wait_for_contains_text(f"#{ids.BANNER}", "2 unreadable files", timeout=10)
    items = banner_items(dash_duo)
    trial = "trials/trial_a"
    assert any(f"{trial}/tensors/{damaged['shard'].name}" in i and "unreadable shard" in i
               for i in items), items
    assert any(f"{trial}/graphs/{damaged['graph'].name}" in i and "wrong structure" in i
               for i in items), items
    # both trials are listed
    dash_duo.find_element(css(ids.selector("trial"))).click()
    options = dash_duo.find_elements(".dash-dropdown-options .dash-dropdown-option")
    assert [o.text for o in options] == ["trial_a", "trial_b"]
    dash_duo.find_element(css(ids.selector("trial"))).click()  # closed again

    # a copy tool rewrites step 9's shard in place while the GUI runs
    corrupt_data_pages(damaged["shards"][9])
    following = css(ids.following("training_step"))
    before = stats_text(dash_duo)
    for step in ["4", "5", "8", "10"]:  # ▶ walks every step with readable values
        dash_duo.find_element(following).click()
        wait_for_header(dash_duo, "step", step)
        before = wait_for_change(lambda: stats_text(dash_duo), before)
    dash_duo.wait_for_contains_text(f"#{ids.BANNER}", "3 unreadable files", timeout=10)
    assert any(damaged["shards"][9].name in i for i in banner_items(dash_duo))
    previous = css(ids.previous("training_step"))
    dash_duo.find_element(previous).click()
    wait_for_header(dash_duo, "step", "8")
    # the rest of the trial: another node, the series across steps
    dash_duo.select_dcc_dropdown(css(ids.selector("node")), value="memory")
    wait_for_header(dash_duo, "node", "memory")
    # _fullData: the figure may send its steps as a typed array, which only plotly decodes
    series_steps = dash_duo.driver.execute_script(
        "const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return gd._fullData.flatMap(t => Array.from(t.x));",
        css(ids.series_graph()),
    )
    assert sorted(series_steps) == [1, 4, 5, 8, 10]
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def record_hostile_names(root: Path) -> Path:
    """A trial whose module, tensor, KPI group and KPI name and note carry markup."""
    import torch
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    recorder = ComgraRecorder(
        comgra_root_path=root, group="hostile", trial_id="t1",
        decision_maker_for_recordings=DecisionMakerForRecordingsHardcoded([0, 1, 2]),
    )
    model = nn.Linear(3, 2)
    recorder.track_module("<i>net</i>", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    recorder.add_note(f"see {LINK}")
    for step in range(3):
        recorder.start_batch(step, 4)
        recorder.start_iteration()
        x = torch.randn(4, 3)
        recorder.register_tensor(BOLD_NODE, x, is_input=True)
        out = model(x)
        recorder.register_tensor("out", out)
        loss = out.pow(2).mean()
        recorder.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recorder.record_current_gradients("main")
        recorder.record_kpi_in_graph("<b>kpis</b>", LINK, loss.item())
        recorder.record_kpi_in_graph("<b>kpis</b>", "plain", 1.0)  # two lines: a legend
        recorder.finish_iteration()
        recorder.finish_batch()
    recorder.finalize()
    return root / "hostile"


def test_names_with_markup_show_as_text_in_graphs_and_labels(dash_duo, tmp_path):
    pytest.importorskip("torch")
    group = record_hostile_names(tmp_path)
    start_app(dash_duo, group)
    # node labels of the dependency graph: the tags are text, nothing is bold
    labels = wait_until(
        lambda: dash_duo.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0] + ' .textpoint')]"
            ".map(e => e.textContent);", GRAPH),
        what="node labels",
    )
    assert BOLD_NODE in labels, labels
    bold = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' .textpoint tspan')]"
        ".filter(e => (e.getAttribute('style') || '').includes('bold')).length;", GRAPH)
    assert bold == 0

    dash_duo.find_element("#nav-graphs").click()
    legend = wait_until(
        lambda: dash_duo.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0] + ' .legendtext')]"
            ".map(e => e.textContent);", f"#{ids.KPI_GRAPHS}"),
        what="the KPI legend",
    )
    assert legend == [f"{LINK} (main_execution_type)", "plain (main_execution_type)"]
    assert text_of(dash_duo, f"#{ids.KPI_GRAPHS} .gtitle") == "<b>kpis</b>"
    links = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('a')].filter(a => "
        "(a.getAttribute('href') || a.getAttribute('xlink:href') || '').includes('evil')"
        " || a.textContent.includes('click me')).length;"
    )
    assert links == 0
    dash_duo.find_element("#nav-notes").click()
    dash_duo.wait_for_contains_text(f"#{ids.NOTES_LIST}", f"see {LINK}", timeout=10)
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
