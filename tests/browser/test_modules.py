"""The Modules page in the browser (issue 15): on a recording made with
``comgra_like.watch`` (a small conv net with a residual block and a nested Sequential,
tests/app/watched_runs.py) the module graph renders, a click on a module opens it and
shows its histograms over time, the breadcrumb goes back up, and a panel's "Tensors
page" link opens the module's output node there."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app import create_app
from comgra_like.app.pages import modules

from tests.browser.helpers import wait_until
from tests.browser.test_gui import GRAPH, click_node, text_of, wait_for_header

pytestmark = pytest.mark.browser

MODULE_GRAPH = f"#{modules.GRAPH}"


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.app import watched_runs

    root = tmp_path_factory.mktemp("modules_browser")
    return watched_runs.record(root, trial="trial_a", steps=10, seed=0)


def shown_keys(dash_duo) -> list[str]:
    """The keys of the module graph's nodes as drawn."""
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
        if (!gd || !gd.data) return [];
        const t = gd.data.find((d) => d.name === 'modules');
        return t ? t.customdata.map((c) => c[0]) : [];
        """,
        MODULE_GRAPH,
    )


def test_modules_page_drills_down_and_shows_histograms(dash_duo, watched):
    app = create_app(watched, refresh_seconds=0.5)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-modules").click()
    top = wait_until(lambda: [k for k in shown_keys(dash_duo) if k.endswith("block")],
                     what="the top level with the block")
    block = top[0]
    assert any(k.endswith("stem") for k in shown_keys(dash_duo))

    # a click on the block opens it: its convolutions, the breadcrumb, a histogram panel
    click_node(dash_duo, block, graph=MODULE_GRAPH)
    inside = wait_until(lambda: [k for k in shown_keys(dash_duo) if k.endswith("block.conv1")],
                        what="the block's modules")
    assert not any(k.endswith("stem") for k in shown_keys(dash_duo))
    wait_until(lambda: text_of(dash_duo, f"#{modules.CRUMBS}").endswith("block"),
               what="the breadcrumb to name the block")
    dash_duo.wait_for_element(".modules-panel .heatmaplayer image, .modules-panel .hm image",
                              timeout=15)
    assert "block" in text_of(dash_duo, ".modules-panel strong")

    # a leaf inside: its panel replaces the block's (down into a container, the
    # container's panel closes); a second leaf adds a panel in front
    click_node(dash_duo, inside[0], graph=MODULE_GRAPH)
    wait_until(lambda: text_of(dash_duo, ".modules-panel strong").endswith("block.conv1"),
               what="the leaf's panel")
    assert len(dash_duo.find_elements(".modules-panel")) == 1
    second = next(k for k in shown_keys(dash_duo) if k.endswith("block.conv2"))
    click_node(dash_duo, second, graph=MODULE_GRAPH)
    wait_until(lambda: len(dash_duo.find_elements(".modules-panel")) == 2, what="two panels")
    assert text_of(dash_duo, ".modules-panel strong").endswith("block.conv2")

    # the breadcrumb goes back up
    dash_duo.find_element(f"#{modules.CRUMBS} .modules-crumb").click()
    wait_until(lambda: any(k.endswith("stem") for k in shown_keys(dash_duo)),
               what="the top level again")

    # the panel's way to the Tensors page: the module's output node is selected there
    dash_duo.find_element(".modules-panel .btn-link").click()
    wait_for_header(dash_duo, "node", second)
    wait_for_header(dash_duo, "role", "output 0")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


@pytest.fixture(scope="module")
def two_trials(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.app import watched_runs

    root = tmp_path_factory.mktemp("modules_overlay")
    watched_runs.record(root, trial="trial_a", steps=6, seed=0)
    return watched_runs.record(root, trial="trial_b", steps=6, seed=1)


def panel_traces(dash_duo) -> list[list[str]]:
    """``[type, name]`` of the first histogram panel's traces as drawn."""
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('.modules-panel .js-plotly-plot');
        return gd && gd.data ? gd.data.map((t) => [t.type, t.name || '']) : [];
        """
    )


def test_the_same_module_of_two_trials_overlaid_in_one_panel(dash_duo, two_trials):
    app = create_app(two_trials, refresh_seconds=0.5)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-modules").click()
    stem = wait_until(lambda: [k for k in shown_keys(dash_duo) if k.endswith("stem")],
                      what="the top level")[0]
    click_node(dash_duo, stem, graph=MODULE_GRAPH)
    dash_duo.wait_for_element(".modules-panel .heatmaplayer image, .modules-panel .hm image",
                              timeout=15)
    shown = wait_until(lambda: [t[1] for t in panel_traces(dash_duo) if t[0] == "heatmap"],
                       what="the shown trial's heatmap")
    other = "trial_b" if shown == ["trial_a"] else "trial_a"
    dash_duo.select_dcc_dropdown(f"#{modules.COMPARE}", value=other)
    # side by side first: two heatmaps, no contour
    wait_until(lambda: [t for t in panel_traces(dash_duo) if t[0] == "heatmap"][1:],
               what="two heatmaps side by side")
    assert not [t for t in panel_traces(dash_duo) if t[0] == "contour"]

    dash_duo.find_element(f"#{modules.MODE} input[value='{modules.OVERLAID}']").click()
    wait_until(lambda: [t for t in panel_traces(dash_duo) if t[0] == "contour"],
               what="the second trial as contour lines")
    traces = panel_traces(dash_duo)
    assert [t for t in traces if t[0] == "heatmap"] == [["heatmap", f"{traces[0][1]}"]]
    assert ["contour", f"{other} (lines)"] in traces
    # drawn: the contour lines are in the page, the legend names both trials
    dash_duo.wait_for_element(".modules-panel .contourlayer path", timeout=10)
    legend = text_of(dash_duo, ".modules-panel .legend")
    assert f"{other} (lines)" in legend and "(colours)" in legend
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
