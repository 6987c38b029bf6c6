"""End-to-end tests of the GUI in headless Chromium (dash_duo), on data written by the
real recorder (tests/conftest.py). Few and focused: each test walks one user story."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from comgra_like.app import create_app, ids
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

pytestmark = pytest.mark.browser

GRAPH = f"#{ids.GRAPH_CONTAINER}"
HEADER = f"#{ids.VALUE_HEADER}"
STATS = f"#{ids.STATS_TABLE}"


def css(component_id) -> str:
    return f"[id='{ids.dom_id(component_id)}']"


def text_of(dash_duo, selector: str) -> str:
    """The text of the first element matching ``selector`` ('' if none); immune to re-renders."""
    return dash_duo.driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", selector
    )


def header_item(dash_duo, label: str) -> str:
    return text_of(dash_duo, f"{HEADER} .hdr-item[data-label='{label}'] .hdr-value")


def wait_for_header(dash_duo, label: str, value: str, timeout: float = 10) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if header_item(dash_duo, label) == value:
            return
        time.sleep(0.05)
    raise AssertionError(
        f"header {label!r} is {header_item(dash_duo, label)!r}, expected {value!r}; "
        f"header: {dash_duo.find_element(HEADER).text!r}"
    )


def stats_text(dash_duo) -> str:
    return text_of(dash_duo, STATS)


def wait_for_change(get, old, timeout: float = 10):
    end = time.time() + timeout
    while time.time() < end:
        new = get()
        if new != old:
            return new
        time.sleep(0.05)
    raise AssertionError(f"value did not change from {old!r}")


def click_node(dash_duo, name, graph: str = GRAPH) -> None:
    """Click the marker whose customdata is ``name`` (a graph node, a step of the series)."""
    point = dash_duo.driver.execute_script(
        """
        const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const box = gd.getBoundingClientRect();
        for (const trace of gd.data) {
          const cd = trace.customdata || [];
          if (!trace.mode || !trace.mode.includes('markers')) continue;
          for (let i = 0; i < cd.length; i++) {
            const v = Array.isArray(cd[i]) ? cd[i][0] : cd[i];
            if (v !== arguments[1]) continue;
            const x = box.left + xa._offset + xa.l2p(trace.x[i]);
            const y = box.top + ya._offset + ya.l2p(trace.y[i]);
            let best = null, bestDistance = 1e9;
            for (const p of gd.querySelectorAll('.scatterlayer .points path')) {
              const r = p.getBoundingClientRect();
              const d = Math.hypot(r.left + r.width / 2 - x, r.top + r.height / 2 - y);
              if (d < bestDistance) { best = p; bestDistance = d; }
            }
            return best;
          }
        }
        return null;
        """,
        graph,
        name,
    )
    assert point is not None, f"no point {name!r} in {graph}"
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()


def start(dash_duo, path: Path, **kwargs):
    app = create_app(path, refresh_seconds=kwargs.pop("refresh_seconds", 0.5), **kwargs)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    wait_for_header(dash_duo, "node", "input")
    return app


def test_tensors_page_walks_graph_and_selectors(dash_duo, tiny_group):
    app = start(dash_duo, tiny_group)
    assert header_item(dash_duo, "trial") == "trial_a"
    assert header_item(dash_duo, "step") == "0"

    # a click on a node selects it
    before = stats_text(dash_duo)
    click_node(dash_duo, "memory")
    wait_for_header(dash_duo, "node", "memory")
    before = wait_for_change(lambda: stats_text(dash_duo), before)

    # the step (▶), then the iteration: values follow
    dash_duo.find_element(css(ids.following("training_step"))).click()
    wait_for_header(dash_duo, "step", "1")
    before = wait_for_change(lambda: stats_text(dash_duo), before)
    dash_duo.select_dcc_dropdown(css(ids.selector("iteration")), value="2")
    wait_for_header(dash_duo, "iteration", "2")
    before = wait_for_change(lambda: stats_text(dash_duo), before)

    # samples are listed in natural order and selecting one changes the values
    dash_duo.find_element(css(ids.selector("aggregation"))).click()
    options = [
        o.text for o in dash_duo.find_elements(".dash-dropdown-options .dash-dropdown-option")
    ]
    assert options[:4] == ["mean over batch", "abs max over batch", "std over batch", "Sample 0"]
    assert options.index("Sample 2") < options.index("Sample 10")
    next(
        o for o in dash_duo.find_elements(".dash-dropdown-option") if o.text == "Sample 10"
    ).click()
    wait_for_header(dash_duo, "of", "Sample 10")
    before = wait_for_change(lambda: stats_text(dash_duo), before)

    # recording type: the gradient
    dash_duo.select_dcc_dropdown(css(ids.selector("recording_type")), value="gradient (main_loss)")
    wait_for_header(dash_duo, "recording", "gradient (main_loss)")
    before = wait_for_change(lambda: stats_text(dash_duo), before)

    # a parameter has no batch dimension; coming back restores "Sample 10"
    click_node(dash_duo, "net.cell.weight")
    wait_for_header(dash_duo, "node", "net.cell.weight")
    wait_for_header(dash_duo, "of", "no batch dimension")
    click_node(dash_duo, "memory")
    wait_for_header(dash_duo, "of", "Sample 10")
    wait_for_header(dash_duo, "recording", "gradient (main_loss)")

    # a rank-3 tensor (batch × 2 × 3) is drawn as a heatmap; it has no gradient
    click_node(dash_duo, "outer")
    wait_for_header(dash_duo, "recording", "forward")
    dash_duo.wait_for_element(f"#{ids.NEURONS} .heatmaplayer image", timeout=10)
    click_node(dash_duo, "memory")
    wait_for_header(dash_duo, "recording", "gradient (main_loss)")

    # arrow keys walk the graph (memory -> output to the right), not inside inputs
    dash_duo.find_element("body").send_keys(Keys.ARROW_RIGHT)
    wait_for_change(lambda: header_item(dash_duo, "node"), "memory")
    moved_to = header_item(dash_duo, "node")
    step_input = dash_duo.find_element(css(ids.step_input()))
    step_input.send_keys(Keys.ARROW_LEFT)
    time.sleep(0.5)
    assert header_item(dash_duo, "node") == moved_to

    # a typed step snaps to the nearest recorded one
    dash_duo.clear_input(step_input)
    step_input.send_keys("7", Keys.ENTER)
    wait_for_header(dash_duo, "step", "8")

    # a click on the series moves the step selector there
    click_node(dash_duo, 4, graph=css(ids.series_graph()))
    wait_for_header(dash_duo, "step", "4")

    timings = app.comgra_state.timings.summary()
    assert timings["selection"]["median_ms"] < 500, timings
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def test_pages_render_and_keep_the_selection(dash_duo, tiny_group, tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from dash import html\n"
        "def create_visualization(ctx):\n"
        "    text = f'plugin sees {ctx.trial_id} step {ctx.training_step} node {ctx.node}'\n"
        "    return html.Div(text, id='plugin-out')\n"
    )
    start(dash_duo, tiny_group, visualization_file=plugin)
    dash_duo.select_dcc_dropdown(css(ids.selector("trial")), value="trial_b")
    wait_for_header(dash_duo, "trial", "trial_b")
    click_node(dash_duo, "memory")
    wait_for_header(dash_duo, "node", "memory")

    dash_duo.find_element("#nav-network").click()
    dash_duo.wait_for_contains_text(f"#{ids.NETWORK_TABLE}", "readout", timeout=10)
    assert "32 parameters in total" in dash_duo.find_element(f"#{ids.NETWORK_TABLE}").text
    assert dash_duo.driver.current_url.endswith("/network")

    dash_duo.find_element("#nav-notes").click()
    dash_duo.wait_for_contains_text(f"#{ids.NOTES_LIST}", "trial_b: tiny recurrent test model")
    dash_duo.find_element(f"#{ids.NOTES_SEARCH}").send_keys("no such words")
    dash_duo.wait_for_contains_text(f"#{ids.NOTES_LIST}", "0 of 1 notes")

    dash_duo.find_element("#nav-graphs").click()
    dash_duo.wait_for_element(f"#{ids.KPI_GRAPHS} .js-plotly-plot", timeout=10)
    titles = [t.text for t in dash_duo.find_elements(f"#{ids.KPI_GRAPHS} .gtitle")]
    assert titles == ["accuracy", "loss"]

    dash_duo.find_element("#nav-visualization").click()
    dash_duo.wait_for_text_to_equal("#plugin-out", "plugin sees trial_b step 0 node memory")

    # a plugin that raises shows its traceback; the file is re-imported on change
    plugin.write_text("def create_visualization(ctx):\n    raise ValueError('broken on purpose')\n")
    dash_duo.wait_for_contains_text(
        f"#{ids.VISUALIZATION} .plugin-error", "broken on purpose", timeout=10
    )
    assert "Traceback" in dash_duo.find_element(".plugin-traceback").text

    # back to the tensors: the selection is still there, and the GUI still works
    dash_duo.find_element("#nav-tensors").click()
    wait_for_header(dash_duo, "trial", "trial_b")
    wait_for_header(dash_duo, "node", "memory")
    dash_duo.find_element(css(ids.following("training_step"))).click()
    wait_for_header(dash_duo, "step", "1")

    # a second tab has its own selection and does not change this one
    first_tab = dash_duo.driver.current_window_handle
    dash_duo.driver.switch_to.new_window("tab")
    dash_duo.driver.get(dash_duo.server_url + "/")
    wait_for_header(dash_duo, "trial", "trial_a")
    dash_duo.find_element(css(ids.following("training_step"))).click()
    wait_for_header(dash_duo, "step", "1")
    click_node(dash_duo, "input")
    wait_for_header(dash_duo, "node", "input")
    dash_duo.driver.close()
    dash_duo.driver.switch_to.window(first_tab)
    time.sleep(0.5)
    assert header_item(dash_duo, "trial") == "trial_b"
    assert header_item(dash_duo, "node") == "memory"
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def test_new_data_appears_without_reload(dash_duo, tmp_path, tiny_run_class):
    run = tiny_run_class(tmp_path, "live", "trial_live", record_steps=[0, 1, 2, 3])
    run.run(range(2))
    time.sleep(1.5)  # the shard writer flushes after a second
    start(dash_duo, tmp_path / "live")

    def marks() -> str:
        return text_of(dash_duo, css(ids.step_slider()))

    assert "1" in marks()
    dash_duo.wait_for_text_to_equal(f"#{ids.BADGE}", dash_duo.find_element(f"#{ids.BADGE}").text)
    assert "live" in dash_duo.find_element(f"#{ids.BADGE}").text

    run.run(range(2, 4))  # new steps while the GUI is open
    wait_for_change(marks, marks(), timeout=15)
    dash_duo.find_element(css(ids.following("training_step"))).click()
    dash_duo.find_element(css(ids.following("training_step"))).click()
    dash_duo.find_element(css(ids.following("training_step"))).click()
    wait_for_header(dash_duo, "step", "3")

    run.finalize()
    dash_duo.wait_for_contains_text(f"#{ids.BADGE}", "finished", timeout=10)

    # a truncated shard is reported and skipped; the rest keeps working
    broken = tmp_path / "live" / "trials" / "trial_live" / "tensors" / "part-99999999.parquet"
    broken.write_bytes(b"PAR1 truncated")
    dash_duo.wait_for_contains_text(f"#{ids.BANNER}", "unreadable file", timeout=10)
    dash_duo.find_element(css(ids.previous("training_step"))).click()
    wait_for_header(dash_duo, "step", "2")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
