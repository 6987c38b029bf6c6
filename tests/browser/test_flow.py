"""The Flow page in the browser (issue 18): the Sankey and the gradient heatmaps render,
the threshold slider changes the number of links, a click on a unit outlines the units
it exchanges gradient with; and the probe loop end to end: a real child process records
a conv net and serves probes (tests/flow/probe_child.py), the browser edits cells of the
input and saves, and the new flow appears beside the one before the edit, no reload."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from comgra_like.app.pages import flow as page
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from comgra_like.query import open_group
from tests.browser.helpers import start_app, wait_until

pytestmark = pytest.mark.browser

CHILD = Path(__file__).parents[1] / "flow" / "probe_child.py"


def links(dash_duo, graph: str = page.SANKEY) -> int | None:
    """The number of links the Sankey draws (None before it is drawn)."""
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        if (!gd || !gd.data || !gd.data.length || !gd.data[0].link) return null;
        return gd.data[0].link.value.length;
        """, graph)


def link_values(dash_duo, graph: str) -> list:
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        return Array.from(gd._fullData[0].link.value);
        """, graph)


def trace_names(dash_duo, graph: str) -> list[str]:
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        return gd && gd.data ? gd.data.map((t) => t.name || '') : [];
        """, graph)


def editor_values(dash_duo) -> list | None:
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('#flow-editor .js-plotly-plot');
        if (!gd || !gd._fullData || !gd._fullData.length) return null;
        return Array.from(gd._fullData[0].z).map((r) => Array.from(r));
        """)


def click_cell(dash_duo, graph: str, curve: int, unit: int) -> None:
    """A real mouse click on the heatmap cell of trace ``curve`` showing ``unit``."""
    # The page grows when the Sankey before an edit appears: bring the heatmap into view
    # first, or the pointer cannot reach the cell.
    dash_duo.driver.execute_script(
        "document.querySelector('#' + arguments[0] + ' .js-plotly-plot')"
        ".scrollIntoView({block: 'center'});", graph)
    where = dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
        const t = gd._fullData[arguments[1]];
        let row = -1, col = -1;
        Array.from(t.customdata).forEach((r, i) => Array.from(r).forEach((v, j) => {
          if (Number(v) === arguments[2]) { row = i; col = j; } }));
        if (row < 0) return null;
        const name = (a) => (a === 'x' || a === 'y' || !a) ? '' : a.slice(1);
        const xa = gd._fullLayout['xaxis' + name(t.xaxis)];
        const ya = gd._fullLayout['yaxis' + name(t.yaxis)];
        const box = gd.getBoundingClientRect();
        const x = box.left + xa._offset + xa.l2p(col);
        const y = box.top + ya._offset + ya.l2p(row);
        const subplot = 'x' + name(t.xaxis) + 'y' + name(t.yaxis);
        const drag = gd.querySelector('.nsewdrag[data-subplot="' + subplot + '"]')
          || gd.querySelector('.nsewdrag');
        const r = drag.getBoundingClientRect();
        return [drag, x - (r.left + r.width / 2), y - (r.top + r.height / 2)];
        """, graph, curve, unit)
    assert where is not None, f"no cell of unit {unit} in {graph}"
    element, dx, dy = where
    chain = ActionChains(dash_duo.driver).move_to_element(element)
    chain.move_by_offset(round(dx) - 1, round(dy)).pause(0.1)
    chain.move_by_offset(1, 0).pause(0.3).click().perform()


def drawn_in_summary(dash_duo) -> int:
    """The links the summary says are drawn, summed over the pairs of the chain."""
    text = dash_duo.find_element(f"#{page.SUMMARY}").text
    return sum(int(m) for m in re.findall(r"(\d+) drawn", text))


def move_threshold(dash_duo, fraction: float) -> None:
    """Click the threshold slider's track at ``fraction`` of its length (0: lowest)."""
    root = dash_duo.find_element(f"#{page.THRESHOLD} .dash-slider-root")
    width = root.size["width"]
    x = 8 + (width - 16) * fraction  # the thumb is inset by half its width
    ActionChains(dash_duo.driver).move_to_element(root).move_by_offset(
        round(x - width / 2), 0).click().perform()


def click_button(dash_duo, component_id: str) -> None:
    """Scroll the button to the middle (the top bar covers the top of the page), click."""
    button = dash_duo.find_element(f"#{component_id}")
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    ActionChains(dash_duo.driver).move_to_element(button).pause(0.1).click().perform()


def open_flow_page(dash_duo, group_dir: Path):
    app = start_app(dash_duo, group_dir, timeout=30)
    dash_duo.find_element("#nav-flow").click()
    wait_until(lambda: links(dash_duo), 30, "the Sankey's links")
    return app


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.app import flow_runs

    return flow_runs.record(tmp_path_factory.mktemp("flow_browser"))


def test_sankey_heatmaps_threshold_and_highlight(dash_duo, recorded):
    open_flow_page(dash_duo, recorded)
    assert "partial flow" in dash_duo.find_element(f"#{page.SUMMARY}").text  # step 1
    # the complete chain of step 0
    dash_duo.select_dcc_dropdown(f"#{page.STEP}", "0")
    wait_until(lambda: "partial" not in dash_duo.find_element(f"#{page.SUMMARY}").text,
               what="the chain of step 0")
    dash_duo.wait_for_element(f"#{page.HEATMAPS} .hm image, #{page.HEATMAPS} .heatmaplayer image",
                              timeout=15)
    assert trace_names(dash_duo, page.HEATMAPS)[:3] == ["input", "conv1", "conv2"]
    summary = dash_duo.find_element(f"#{page.SUMMARY}").text
    assert "36 units in 9 groups of 1×2×2" in summary and "threshold |F| ≥" in summary
    before = links(dash_duo)

    # the slider to its end: only the largest link stays
    move_threshold(dash_duo, 1.0)  # near the largest link: few links stay
    high = wait_until(lambda: (n := links(dash_duo)) and n < before and n,
                      what="fewer links at a high threshold")
    assert drawn_in_summary(dash_duo) == high
    move_threshold(dash_duo, 0.0)
    wait_until(lambda: (links(dash_duo) or 0) > high, what="more links at a low threshold")
    assert drawn_in_summary(dash_duo) == links(dash_duo)

    # more units per node: each drawn
    dash_duo.select_dcc_dropdown(f"#{page.MAX_UNITS}", "64")
    dash_duo.wait_for_contains_text(f"#{page.SUMMARY}", "input (1, 6, 6): 36 units, each drawn",
                                    timeout=10)

    # a click on conv1's centre unit outlines the 3x3 patch of the input it reaches
    click_cell(dash_duo, page.HEATMAPS, 1, 4)
    dash_duo.wait_for_contains_text(f"#{page.UNIT_INFO}",
                                    "conv1 unit 4 exchanges gradient with input: 9 units",
                                    timeout=10)
    assert "highlight input" in trace_names(dash_duo, page.HEATMAPS)


def test_probe_loop_end_to_end(dash_duo, tmp_path):
    pytest.importorskip("torch")
    group_dir = tmp_path / "g"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), "g", "served", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (group_dir / "trials" / "served" / "trial.json").exists()
                   and open_group(group_dir).read_flows("served"), 120, "the base flows")
        open_flow_page(dash_duo, group_dir)
        dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "no edits yet", timeout=10)
        wait_until(lambda: editor_values(dash_duo), what="the editable input")
        original = np.asarray(editor_values(dash_duo), dtype=np.float32)
        base_links = links(dash_duo)

        # unit 0 is 2 sin(0) = 0: toggles to z; unit 7 is not: toggles to 0
        z = dash_duo.find_element(f"#{page.Z_VALUE}")
        z.clear()
        z.send_keys("5", Keys.TAB)
        click_cell(dash_duo, page.EDITOR, 0, 0)
        dash_duo.wait_for_contains_text(f"#{page.EDITOR}", "1 cell edited", timeout=10)
        click_cell(dash_duo, page.EDITOR, 0, 7)
        dash_duo.wait_for_contains_text(f"#{page.EDITOR}", "2 cells edited", timeout=10)
        edited = original.copy()
        edited[0, 0], edited[1, 1] = 5.0, 0.0
        np.testing.assert_array_equal(np.asarray(editor_values(dash_duo), np.float32), edited)

        dash_duo.find_element(f"#{page.SAVE}").click()
        dash_duo.wait_for_contains_text(f"#{page.SAVE_STATUS}", "Saved as", timeout=10)
        # the served flows appear without a reload, beside the flows before the edit
        dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "edit 1 of 1: done", timeout=60)
        wait_until(lambda: links(dash_duo, page.BEFORE), what="the Sankey before the edit")
        # the same threshold on both sides: the edit changed the flows
        assert link_values(dash_duo, page.BEFORE) != link_values(dash_duo, page.SANKEY)
        assert base_links and "before this edit" in dash_duo.find_element(
            f"#{page.BEFORE} .gtitle").text
        (probe,) = open_group(group_dir).read_probes("served")
        np.testing.assert_array_equal(
            open_group(group_dir).read_probe_input("served", probe.probe_id)[0, 0], edited)
        # the editor now starts from the edited input
        wait_until(lambda: np.array_equal(np.asarray(editor_values(dash_duo), np.float32),
                                          edited), what="the editor on the edit")

        # a second edit, then back through the history
        click_cell(dash_duo, page.EDITOR, 0, 35)
        dash_duo.find_element(f"#{page.SAVE}").click()
        dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "edit 2 of 2: done", timeout=60)
        click_button(dash_duo, page.PREVIOUS)
        dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "edit 1 of 2: done", timeout=10)
        click_button(dash_duo, page.PREVIOUS)
        dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "recorded run · 2 edits",
                                        timeout=10)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
