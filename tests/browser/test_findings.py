"""Findings in the browser (issue 17): the Findings page lists faults injected into real
training loops and a click lands on the right selection of the Tensors page; the painted
dependency graph changes colour when the step slider moves, and ▶ play walks the steps.

Data: tests/analysis/loops.py, recorded once per module with the real recorder: ``log``
of a value that reaches 0 at step 7 (node ``z_log_positive``) and a ReLU layer whose
first 16 units die at step 6 (node ``relu_out``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from comgra_like.app import ids, views
from comgra_like.app.graph_figure import NON_FINITE_COLOR, node_style
from comgra_like.app.pages import findings, tensors
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.action_chains import ActionChains

from tests.browser.helpers import start_app, wait_until
from tests.browser.test_gui import GRAPH, css, header_item, text_of, wait_for_header

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.analysis import loops

    root = tmp_path_factory.mktemp("findings_browser")
    loops.log_of_zero(root, group="faulty")
    return loops.dying_relu(root, group="faulty")


def click_row(dash_duo, selector: str) -> None:
    """Click a findings row; the list is drawn again at every refresh (0.5 s here), so an
    element found just before can be replaced before the click reaches it: find it again."""

    def attempt():
        try:
            dash_duo.find_element(selector).click()
            return True
        except StaleElementReferenceException:
            return False

    wait_until(attempt, what=f"a click on {selector}")


def row_cells(dash_duo, kind: str) -> list[str]:
    return dash_duo.driver.execute_script(
        "const r = document.querySelector(`.finding-row[data-kind='${arguments[0]}']`);"
        "return r ? Array.from(r.children).map((c) => c.textContent) : null;",
        kind,
    )


def test_findings_page_lists_the_faults_and_a_click_opens_the_place(dash_duo, faulty):
    start_app(dash_duo, faulty)
    dash_duo.find_element("#nav-findings").click()
    dash_duo.wait_for_element(".finding-row[data-kind='first_non_finite']", timeout=30)
    nan = row_cells(dash_duo, "first_non_finite")
    assert nan[:5] == ["error", "first non finite", "log_of_zero", "7", "z_log_positive · forward"]
    assert "step 7" in nan[5]
    dead = row_cells(dash_duo, "dead_units")
    assert dead[0] == "warning" and dead[2] == "dying_relu" and dead[4].startswith("relu_out")

    # filters: without warnings the dead units are not listed, the NaN still is
    warning_box = next(
        box for box in dash_duo.find_elements(f"#{findings.SEVERITY_FILTER} input")
        if box.get_attribute("value") == "warning"
    )
    warning_box.click()
    wait_until(lambda: row_cells(dash_duo, "dead_units") is None, what="dead units filtered")
    assert row_cells(dash_duo, "first_non_finite") is not None
    warning_box.click()
    wait_until(lambda: row_cells(dash_duo, "dead_units"), what="dead units listed again")

    # a click opens the Tensors page at the finding's place
    click_row(dash_duo, ".finding-row[data-kind='first_non_finite']")
    try:
        dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    except TimeoutException as exc:
        # seen once in ~25 runs under load: say where the click landed (page, text, console)
        # so that the next failure tells a lost click from a graph that was never drawn
        body = dash_duo.driver.execute_script("return document.body.innerText")[:2000]
        raise AssertionError(f"no graph after the click: at {dash_duo.driver.current_url}, "
                             f"console {dash_duo.get_logs()}, page:\n{body}") from exc
    wait_for_header(dash_duo, "trial", "log_of_zero")
    wait_for_header(dash_duo, "step", "7")
    wait_for_header(dash_duo, "node", "z_log_positive")
    assert header_item(dash_duo, "role") == "z_log_positive"
    assert header_item(dash_duo, "recording") == "forward"
    assert header_item(dash_duo, "of") == "abs max over batch"
    assert dash_duo.driver.current_url.rstrip("/") == dash_duo.server_url.rstrip("/")
    stats = wait_until(lambda: text_of(dash_duo, f"#{ids.STATS_TABLE} [data-statistic='inf_count']"),
                       what="the statistics")
    assert stats.endswith("1")  # the Inf the finding names
    assert "inf_count" in text_of(dash_duo, ".series-card .view-title")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def test_findings_page_follows_new_data(dash_duo, tmp_path):
    pytest.importorskip("torch")
    from tests.analysis import loops

    loops.dying_relu(tmp_path, group="live", kill_at=None)  # a healthy trial
    start_app(dash_duo, tmp_path / "live")
    dash_duo.find_element("#nav-findings").click()
    dash_duo.wait_for_contains_text(f"#{findings.SUMMARY}", "in 1 trial", timeout=30)
    assert row_cells(dash_duo, "first_non_finite") is None
    loops.log_of_zero(tmp_path, group="live")  # a trial with a NaN arrives; no reload
    dash_duo.wait_for_element(".finding-row[data-kind='first_non_finite']", timeout=30)
    assert row_cells(dash_duo, "first_non_finite")[2:4] == ["log_of_zero", "7"]
    dash_duo.wait_for_contains_text(f"#{findings.SUMMARY}", "in 2 trials", timeout=10)
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


COLOURS = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data) return null;
const out = {};
for (const trace of gd.data) {
  const names = trace.customdata || [];
  if (!trace.marker || !Array.isArray(trace.marker.color)) continue;
  names.forEach((n, i) => { out[n] = [trace.marker.color[i], trace.marker.line.color[i]]; });
}
return Object.keys(out).length ? JSON.stringify(out) : null;
"""


def painted(dash_duo) -> dict | None:
    found = dash_duo.driver.execute_script(COLOURS, GRAPH)
    return json.loads(found) if found else None


def expected_colours(app, step: int, statistic: str = "abs_max") -> dict:
    """The colours the server's builders give every node at ``step`` (fill, outline)."""
    data = app.comgra_parts.data
    current = {"trial": "log_of_zero", "training_step": step, "iteration": 0,
               "aggregation": "batch_mean"}
    paint = tensors.build_paint(data, current, statistic, "forward")
    model = views.graph_model(data, "log_of_zero", step, 0)
    return {name: list(node_style(paint, name, node.is_import)[:2])
            for name, node in model.nodes.items()}


def move_slider_to(dash_duo, index: int, last: int) -> None:
    """Click the step slider's track where step ``index`` (of 0..``last``) is."""
    root = dash_duo.find_element(f"{css(ids.step_slider())} .dash-slider-root")
    width = root.size["width"]
    x = 8 + (width - 16) * index / last  # the thumb is inset by half its width
    ActionChains(dash_duo.driver).move_to_element(root).move_by_offset(
        round(x - width / 2), 0).click().perform()


def test_painted_graph_changes_colour_when_the_step_changes(dash_duo, faulty):
    app = start_app(dash_duo, faulty)
    dash_duo.select_dcc_dropdown(css(ids.selector("trial")), value="log_of_zero")
    wait_for_header(dash_duo, "trial", "log_of_zero")
    wait_for_header(dash_duo, "step", "0")
    assert painted(dash_duo) is None  # painting is off by default
    dash_duo.select_dcc_dropdown(f"#{tensors.PAINT_STATISTIC}", value="max |x|")
    at_0 = wait_until(lambda: painted(dash_duo), what="a painted graph")
    assert at_0 == expected_colours(app, 0)
    assert "max |x|" in dash_duo.find_element(f"{GRAPH} .colorbar").text

    move_slider_to(dash_duo, 7, 11)
    wait_for_header(dash_duo, "step", "7")
    at_7 = wait_until(lambda: (c := painted(dash_duo)) != at_0 and c, what="new colours")
    assert at_7 == expected_colours(app, 7)
    red = {name for name, (_, line) in at_7.items() if line == NON_FINITE_COLOR}
    assert red == {"z_log_positive", "loss"}  # log(0) = -inf there, and the loss after it

    # ▶ play walks on to the last recorded step and stops there
    dash_duo.find_element(f"#{tensors.PLAY}").click()
    wait_for_header(dash_duo, "step", "8", timeout=5)
    wait_for_header(dash_duo, "step", "11", timeout=15)
    dash_duo.wait_for_text_to_equal(f"#{tensors.PLAY}", tensors.PLAY_LABEL, timeout=5)
    wait_until(lambda: painted(dash_duo) == expected_colours(app, 11), what="step 11 painted")
    time.sleep(1.5)  # stopped: two more intervals change nothing
    assert header_item(dash_duo, "step") == "11"
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
