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
        // _fullData: arrays sent as typed-array specs ({dtype, bdata}) decoded
        for (const trace of gd._fullData) {
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

    timings = app.comgra_parts.timings.summary()
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
    # one click at a time: three at once lost one under load (a click's request carries
    # the selection the page had, and the one before had not answered yet)
    while header_item(dash_duo, "step") != "3":
        shown = header_item(dash_duo, "step")
        assert int(shown) < 3, shown
        dash_duo.find_element(css(ids.following("training_step"))).click()
        wait_for_change(lambda: header_item(dash_duo, "step"), shown)

    run.finalize()
    dash_duo.wait_for_contains_text(f"#{ids.BADGE}", "finished", timeout=10)

    # a truncated shard is reported and skipped; the rest keeps working
    broken = tmp_path / "live" / "trials" / "trial_live" / "tensors" / "part-99999999.parquet"
    broken.write_bytes(b"PAR1 truncated")
    dash_duo.wait_for_contains_text(f"#{ids.BANNER}", "unreadable file", timeout=10)
    dash_duo.find_element(css(ids.previous("training_step"))).click()
    wait_for_header(dash_duo, "step", "2")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


# --- the highlight of a click, drawn in the browser -------------------------------------

RING = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
const ring = (gd._fullData || []).find((t) => t.name === 'selected');
if (!ring || !ring.x || ring.x.length !== 1) return null;
for (const trace of gd.data) {
  const names = trace.customdata || [];
  for (let i = 0; i < names.length; i++) {
    if (trace.x[i] === ring.x[0] && trace.y[i] === ring.y[0]) return names[i];
  }
}
return '?';
"""


def ringed_node(dash_duo):
    """The node the selection ring of the drawn graph sits on (None: no ring)."""
    return dash_duo.driver.execute_script(RING, GRAPH)


def wait_for_ring(dash_duo, name, timeout: float = 10) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if ringed_node(dash_duo) == name:
            return
        time.sleep(0.02)
    raise AssertionError(f"the ring is on {ringed_node(dash_duo)!r}, expected {name!r}")


def test_a_click_is_highlighted_before_the_server_answers(dash_duo, tiny_group, monkeypatch):
    from comgra_like.app import selectors

    slow_clicks = []
    apply_event = selectors.apply_event

    def slow_apply_event(data, selection, event):
        if event and event[0] == "node-click" and slow_clicks:
            time.sleep(slow_clicks[0])
        return apply_event(data, selection, event)

    monkeypatch.setattr(selectors, "apply_event", slow_apply_event)
    app = start(dash_duo, tiny_group)
    timings = app.comgra_parts.timings
    wait_for_ring(dash_duo, "input")
    patches = timings.summary().get("graph_patch", {}).get("count", 0)

    slow_clicks.append(3.0)  # the server takes 3 s to answer a click
    click_node(dash_duo, "memory")
    wait_for_ring(dash_duo, "memory", timeout=2.0)
    assert header_item(dash_duo, "node") == "input"  # the server has not answered yet
    wait_for_header(dash_duo, "node", "memory")
    time.sleep(0.3)
    assert ringed_node(dash_duo) == "memory"
    # the server agreed with what the browser drew: it sent no patch of its own
    assert timings.summary().get("graph_patch", {}).get("count", 0) == patches
    slow_clicks.clear()

    # a node the selection cannot take (nothing recorded for it): the ring goes back to
    # the selected node, also when the same node is clicked again (the selection does
    # not change then)
    data = app.comgra_parts.data
    recorded = data.recorded

    def nothing_for_weight(trial, step, node, role):
        return {} if node.name == "net.cell.weight" else recorded(trial, step, node, role)

    data.recorded = nothing_for_weight
    for _ in range(2):
        click_node(dash_duo, "net.cell.weight")
        time.sleep(1.0)
        selected = header_item(dash_duo, "node")
        assert selected != "net.cell.weight"
        wait_for_ring(dash_duo, selected)

    # keyboard navigation is the server's: its patch moves the ring
    dash_duo.find_element("body").send_keys(Keys.ARROW_RIGHT)
    moved_to = wait_for_change(lambda: header_item(dash_duo, "node"), selected)
    wait_for_ring(dash_duo, moved_to)
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def _role_graph(num_nodes: int):
    """A layered graph of two-role nodes with a back edge (drawn right to left)."""
    from types import SimpleNamespace as NS

    def node(name, kind="calculated", roles=("main", "aux")):
        return NS(name=name, kind=kind, roles=roles, tensor_names={}, shapes={}, iteration=0,
                  is_import=False, module_group=None)

    nodes, edges, previous = [node("in", "input", ("main",))], [], ["in"]
    while len(nodes) < num_nodes - 1:
        layer = []
        for k in range(8):
            name = f"b{len(nodes)}.t{k}"
            nodes.append(node(name))
            for j, source in enumerate((previous[k % len(previous)],
                                        previous[(3 * k + 1) % len(previous)])):
                roles = ("main", "aux")
                edges.append(NS(source=source, target=name,
                                source_role="main" if source == "in" else roles[(k + j) % 2],
                                target_role=roles[(k * j) % 2]))
            layer.append(name)
        previous = layer
    nodes.append(node("loss", "loss", ("main",)))
    edges += [NS(source=n, target="loss", source_role="aux", target_role="main")
              for n in previous]
    edges.append(NS(source="loss", target="b1.t0", source_role="main", target_role="aux"))
    return NS(graph_hash=f"roles-{num_nodes}", nodes=nodes, edges=edges)


def _numbers_as_floats(value):
    """JSON-like ``value`` with every number a float (the browser returns 1.0 as 1)."""
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def test_the_browser_computes_the_highlight_of_the_server(dash_duo, tiny_group):
    """assets/comgra.js's highlightUpdates is a port of graph_figure.highlight_updates:
    the same updates for every node and role (and an unknown node and role)."""
    import json

    from comgra_like.app.graph_figure import (
        MAX_ARROWS,
        build_graph_figure,
        build_graph_model,
        highlight_updates,
    )
    from comgra_like.app.views import graph_model
    from plotly.io.json import to_json_plotly

    app = start(dash_duo, tiny_group)
    data = app.comgra_parts.data
    models = [graph_model(data, "trial_a", 5, iteration) for iteration in (0, 1, 2)]
    models += [build_graph_model(_role_graph(40)), build_graph_model(_role_graph(400))]
    assert len(models[-1].drawn_edges) > MAX_ARROWS and models[-1].layout.reversed_edges
    checked = 0
    for model in models:
        figure = json.loads(to_json_plotly(build_graph_figure(model)))
        queries = [[name, role] for name, node in model.nodes.items()
                   for role in (None, *node.roles, "nonexistent")]
        queries.append(["not a node", "main"])
        expected = [
            json.loads(to_json_plotly([[t, list(p), v] for t, p, v in
                                       highlight_updates(model, name, role)]))
            for name, role in queries
        ]
        got = dash_duo.driver.execute_script(
            "const comgra = window.dash_clientside.comgra;"
            "return arguments[1].map((q) => comgra.highlightUpdates(arguments[0], q[0], q[1]));",
            figure,
            queries,
        )
        for query, mine, theirs in zip(queries, got, expected):
            assert _numbers_as_floats(mine) == _numbers_as_floats(theirs), (model, query)
            checked += 1
    assert checked > 1000


# --- a statistic across steps: the callbacks one choice fires ----------------------------

RECORD_REQUESTS = """
window.__requests = [];
if (!window.__fetchWrapped) {
  window.__fetchWrapped = true;
  const original = window.fetch;
  window.fetch = function (input, init) {
    try { window.__requests.push(JSON.parse(init.body).output); } catch (e) {}
    return original.apply(this, arguments);
  };
}
"""
SERIES_SHOWN = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
if (!gd || !gd._fullLayout || !gd._fullData.length) return null;
const trace = gd._fullData[0];
return {title: gd._fullLayout.yaxis.title.text, typed: ArrayBuffer.isView(trace.y),
        points: trace.y.length, firstStep: trace.x[0]};
"""


def test_a_statistic_chosen_goes_to_the_series_without_other_round_trips(dash_duo, tiny_group):
    from comgra_like.app.figures import STATISTIC_LABELS

    start(dash_duo, tiny_group)
    series = css(ids.series_graph())
    wait_for_change(lambda: (dash_duo.driver.execute_script(SERIES_SHOWN, series) or {})
                    .get("title"), None)
    time.sleep(1)  # the page's own callbacks are done
    dash_duo.driver.execute_script(RECORD_REQUESTS)
    dash_duo.find_element(f"{css(ids.selector('statistic'))}").click()
    option = dash_duo.wait_for_element_by_css_selector(".dash-dropdown-options", timeout=5)
    [choice] = [o for o in option.find_elements("css selector", ".dash-dropdown-option")
                if o.get_attribute("textContent").strip() == "abs_max"]
    choice.click()
    shown = None
    end = time.time() + 10
    while time.time() < end:
        shown = dash_duo.driver.execute_script(SERIES_SHOWN, series)
        if shown and shown["title"] == STATISTIC_LABELS["abs_max"]:
            break
        time.sleep(0.05)
    assert shown and shown["title"] == STATISTIC_LABELS["abs_max"], shown
    # drawn from typed arrays: the steps and values arrived as base64, not as JSON lists
    assert shown["typed"] and shown["points"] > 0 and shown["firstStep"] >= 0
    requests = dash_duo.driver.execute_script("return window.__requests;")
    assert any("series-graph" in r for r in requests), requests
    # the rank and paint-type callbacks (whose outputs are inputs of the value views) did
    # not run: the series waited for their round trip before it was even asked for
    assert not [r for r in requests if "rank-select" in r or "paint-recording-type" in r], \
        requests
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
