"""comgra 0.11.5's own example plugin on the Visualization page (issue 14 item 9): data
recorded by comgra's tutorial script with comgra_like, both files from comgra's
released package with their imports changed (tests/app/comgra_release.py)."""

from __future__ import annotations

import pytest
from app.comgra_release import record_tutorial, write_plugin
from comgra_like.app import ids
from selenium.webdriver.common.keys import Keys
from test_gui import click_node, css, header_item, wait_for_header

from comgra_like.query import open_group
from tests.browser.helpers import start_app

pytestmark = pytest.mark.browser

TRIAL = "trial_bugged_original_version"
HELPER = "helper_partial_sums"
ROLES = ["up_to_iteration_00", "up_to_iteration_01", "up_to_iteration_02", "final"]
PLOT = "#custom_visualization .js-plotly-plot"


def test_comgras_example_plugin_renders_the_partial_sums(dash_duo, tmp_path):
    group_path = record_tutorial(tmp_path)
    plugin = write_plugin(tmp_path)
    start_app(dash_duo, group_path, visualization_file=plugin)
    wait_for_header(dash_duo, "trial", TRIAL)

    # step 3 has 4 iterations; the helper node is on the last one
    step_input = dash_duo.find_element(css(ids.step_input()))
    dash_duo.clear_input(step_input)
    step_input.send_keys("3", Keys.ENTER)
    wait_for_header(dash_duo, "step", "3")
    dash_duo.select_dcc_dropdown(css(ids.selector("iteration")), value="3")
    wait_for_header(dash_duo, "iteration", "3")
    click_node(dash_duo, HELPER)
    wait_for_header(dash_duo, "node", HELPER)
    aggregation = header_item(dash_duo, "of")

    dash_duo.find_element("#nav-visualization").click()
    dash_duo.wait_for_element(PLOT, timeout=20)
    figure = dash_duo.driver.execute_script(
        "const gd = document.querySelector(arguments[0]);"
        "return {title: gd.layout.title.text,"
        " traces: gd.data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))};",
        PLOT,
    )
    assert figure["title"] == "helper_partial_sums"
    assert [t["name"] for t in figure["traces"]] == [f"neuron_{i}" for i in range(5)]

    # the curves are the recorded values of the selected aggregation, read independently
    read_as = ("batch_mean", -1) if aggregation == "mean over batch" else None
    assert read_as is not None, f"the page opened on {aggregation!r}, not the batch mean"
    group = open_group(group_path)
    expected = [
        group.read_tensor(TRIAL, 3, 3, HELPER, role, "forward", *read_as).values
        for role in ROLES
    ]
    for neuron, trace in enumerate(figure["traces"]):
        assert trace["x"] == [0, 1, 2, 3]
        assert trace["y"] == pytest.approx([float(v[neuron]) for v in expected], rel=1e-6)
    text = dash_duo.find_element("#custom_visualization").text
    assert "'node_name': 'node__helper_partial_sums'" in text
    assert not dash_duo.find_elements(".plugin-error")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
