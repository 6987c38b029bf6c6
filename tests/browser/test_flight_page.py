"""The Flight page in the browser (issue 30), on a real triggered group
(tests/app/test_flight_data.py: the FlightRecorder on the tests' MLP, a loss spike at
step 30 and a NaN at step 55, recorded 1 step in 10): a trigger is picked, the window
chart shows its 16 dense steps beside the sparse recorded ones, the player moves and
the painted graph's colours change, and the Findings page's link opens the page at the
trigger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from comgra_like.app import flight_data as fd
from comgra_like.app import flight_figures as ff
from comgra_like.app import ids
from comgra_like.app.graph_figure import NON_FINITE_COLOR, node_style
from comgra_like.app.pages import flight
from selenium.common.exceptions import StaleElementReferenceException

from tests.app.test_flight_data import NAN, SPIKE, TRIAL, WINDOW, make_triggered_group
from tests.browser.helpers import start_app, wait_until
from tests.browser.test_gui import click_node, css, wait_for_header

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def triggered(tmp_path_factory) -> Path:
    return make_triggered_group(tmp_path_factory.mktemp("flight_browser"))


CHART_TRACES = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data) return null;
return JSON.stringify(gd.data.map((t) => ({name: t.name, x: Array.from(t.x || [])})));
"""
COLOURS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data) return null;
const out = {};
for (const trace of gd.data) {
  const names = trace.customdata || [];
  if (!trace.marker || !Array.isArray(trace.marker.color)) continue;
  names.forEach((n, i) => { out[n] = [trace.marker.color[i], trace.marker.line.color[i]]; });
}
return Object.keys(out).length ? JSON.stringify(out) : null;
"""


def chart(dash_duo) -> dict | None:
    found = dash_duo.driver.execute_script(CHART_TRACES, flight.CHART)
    return {t["name"]: t["x"] for t in json.loads(found)} if found else None


def painted(dash_duo) -> dict | None:
    found = dash_duo.driver.execute_script(COLOURS, flight.GRAPH)
    return json.loads(found) if found else None


def expected_colours(app, name: str, step: int, statistic: str = "norm",
                     role: str = "value") -> dict:
    """What the server's builders paint every node of the window's graph at ``step``."""
    data = app.comgra_parts.data
    trigger = fd.pick_trigger(fd.triggers(data, TRIAL), name)
    rows = fd.window_rows(data, TRIAL, name)
    paint = ff.window_paint(rows, step, statistic, role, ff.window_scale(rows, statistic, role))
    _, model = fd.window_graph(data, TRIAL, trigger)
    return {n: list(node_style(paint, n, node.is_import)[:2]) for n, node in model.nodes.items()}


def step_text(dash_duo) -> str:
    return dash_duo.find_element(f"#{flight.STEP_TEXT}").text


def click(dash_duo, selector: str) -> None:
    def attempt():
        try:
            dash_duo.find_element(selector).click()
            return True
        except StaleElementReferenceException:
            return False

    wait_until(attempt, what=f"a click on {selector}")


def test_flight_page_plays_the_window_and_findings_link_there(dash_duo, triggered):
    app = start_app(dash_duo, triggered)
    # a link to the trial opens the latest trigger: the NaN's window
    dash_duo.driver.get(dash_duo.server_url + flight.link(TRIAL))
    dash_duo.wait_for_element(f"#{flight.TRIGGERS} .flight-trigger-row", timeout=20)
    rows = dash_duo.find_elements(".flight-trigger-row")
    assert [r.get_attribute("data-name") for r in rows] == [SPIKE, NAN]
    cells = [c.text for c in rows[1].find_elements("css selector", "td")]
    assert cells[:5] == ["NaN / Inf", "55", "layer1", "1", "40–55"] and "UTC" in cells[5]

    # pick the spike: its window chart shows 16 dense steps and the recorded ones apart
    click(dash_duo, f".flight-trigger-row[data-name='{SPIKE}']")
    traces = wait_until(
        lambda: (c := chart(dash_duo)) and c.get(ff.FLIGHT_TRACE_NAME) == list(range(15, 31))
        and c, what="the spike's window in the chart")
    recorded = next(x for n, x in traces.items() if n.startswith(ff.RECORDED_TRACE_NAME))
    assert recorded == [0, 10, 20, 30, 31, 32, 42, 52, 56, 57, 67]  # the loss, 1 in 10
    assert len(traces[ff.FLIGHT_TRACE_NAME]) == WINDOW
    assert "16 steps in the flight window" in dash_duo.find_element(
        f"#{flight.CHART} .gtitle").text
    assert "Moved first" in dash_duo.find_element(f"#{flight.MOVERS}").text

    # back to the NaN: the player starts at the first non-finite step, layer1 outlined red
    click(dash_duo, f".flight-trigger-row[data-name='{NAN}']")
    wait_until(lambda: step_text(dash_duo).startswith("step 55"), what="the NaN's step")
    at_55 = wait_until(lambda: (p := painted(dash_duo)) == expected_colours(app, NAN, 55) and p,
                       what="the graph painted at step 55")
    assert at_55["layer1"][1] == NON_FINITE_COLOR
    summary = dash_duo.find_element(f"#{flight.STEP_SUMMARY}").text
    assert summary.startswith("NaN/Inf in 6: layer1") and summary.endswith("samples 880–895")
    assert "First non-finite" in dash_duo.find_element(f"#{flight.MOVERS}").text

    # ▶ play from the window's start: the step moves and the colours change with it
    dash_duo.driver.execute_script(
        "document.querySelector(arguments[0]).scrollIntoView()", f"#{flight.PLAY}")
    click(dash_duo, f"#{flight.PLAY}")
    wait_until(lambda: step_text(dash_duo).startswith("step 40"), what="played from 40")
    wait_until(lambda: step_text(dash_duo).startswith("step 42"), timeout=10,
               what="the player moving")
    seen = wait_until(lambda: (p := painted(dash_duo)) and p != at_55 and p,
                      what="new colours")
    assert seen["layer1"][1] != NON_FINITE_COLOR
    wait_until(lambda: step_text(dash_duo).startswith("step 55"), timeout=20,
               what="played to the end")
    dash_duo.wait_for_text_to_equal(f"#{flight.PLAY}", flight.PLAY_LABEL, timeout=5)
    assert wait_until(lambda: painted(dash_duo) == at_55, what="the end painted")

    # the Findings page: the flight finding's row opens this page at its trigger
    dash_duo.find_element("#nav-findings").click()
    dash_duo.wait_for_element(".finding-row[data-kind='flight_loss_spike']", timeout=30)

    def href() -> str | None:
        # the list is drawn again when the scan of the trial completes: read it afresh
        try:
            return dash_duo.find_element(".finding-row[data-kind='flight_loss_spike'] "
                                         ".finding-flight-link").get_attribute("href")
        except StaleElementReferenceException:
            return None

    assert wait_until(href, what="the finding's link").endswith(flight.link(TRIAL, SPIKE))
    click(dash_duo, ".finding-row[data-kind='flight_loss_spike']")
    wait_until(lambda: dash_duo.driver.current_url.endswith(flight.link(TRIAL, SPIKE)),
               what="the Flight page's URL")
    wait_until(lambda: (c := chart(dash_duo)) and c.get(ff.FLIGHT_TRACE_NAME) == list(
        range(15, 31)), what="the spike's window opened from the finding")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


SERIES_TRACES = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
if (!gd || !gd._fullData) return null;
return JSON.stringify(gd._fullData.map((t) => ({name: t.name, x: Array.from(t.x || [])})));
"""


def test_tensors_page_across_steps_chart_shows_the_windows(dash_duo, triggered):
    start_app(dash_duo, triggered)
    click_node(dash_duo, "layer1")
    wait_for_header(dash_duo, "node", "layer1")

    def traces():
        found = dash_duo.driver.execute_script(SERIES_TRACES, css(ids.series_graph()))
        return {t["name"]: t["x"] for t in json.loads(found)} if found else {}

    shown = wait_until(lambda: (t := traces()) and any(
        n.startswith(ff.FLIGHT_TRACE_NAME) for n in t) and t, what="the flight window trace")
    dense = next(x for n, x in shown.items() if n.startswith(ff.FLIGHT_TRACE_NAME))
    assert [s for s in dense if s is not None] == list(range(15, 31)) + list(range(40, 56))
    recorded = next(x for n, x in shown.items() if not n.startswith(ff.FLIGHT_TRACE_NAME))
    assert recorded == [0, 10, 20, 30, 31, 32, 42, 52, 56, 57, 67]
    # the windows shaded as drawn
    bands = dash_duo.driver.execute_script(
        "const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');"
        "return (gd.layout.shapes || []).filter((s) => s.type === 'rect')"
        ".map((s) => [s.x0, s.x1]);", css(ids.series_graph()))
    assert bands == [[14.5, 30.5], [39.5, 55.5]]
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
