"""The Compare page in Chromium (issue 31): the trials table with config columns and its
filter, ticked trials drawn as one line each and smoothed, grouped by lr as one mean and
band per group, the first divergence of two trials, the graph painted by their
difference at another step and statistic, a link that opens the Tensors page at the
named tensor, and a link that opens the Modules page with the second trial beside the
first.

Data: four tiny loops recorded with the real recorder and ``config=`` (two lr values
and two seeds, tests/app/test_compare_data.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from comgra_like.app import ids
from comgra_like.app.pages import compare, modules
from selenium.webdriver.common.keys import Keys

from tests.browser.helpers import start_app, wait_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.app.test_compare_data import TRIALS, train

    root = tmp_path_factory.mktemp("compare_browser")
    for name, lr, seed, recorded in TRIALS:
        train(root, name, lr, seed, recorded)
    return root / "g"


def traces(dash_duo) -> list[str]:
    return dash_duo.driver.execute_script(
        f"const g = document.querySelector('#{compare.OVERLAY} .js-plotly-plot');"
        "return g && g.data ? g.data.map((t) => t.name) : [];")


def tick(dash_duo, trial: str) -> None:
    """Tick a trial's box in the table (its row holds the trial id)."""
    def attempt() -> bool:
        return dash_duo.driver.execute_script(
            f"for (const r of document.querySelectorAll('#{compare.TABLE} tr')) {{"
            "  const cell = r.querySelector('td[data-dash-column=\"trial_id\"]');"
            "  if (cell && cell.textContent.trim() === arguments[0]) {"
            "    r.querySelector('input[type=checkbox]').click(); return true; } }"
            "return false;", trial)

    wait_until(attempt, what=f"the row of {trial}")


def choose(dash_duo, selector: str, text: str) -> None:
    """Pick the option ``text`` of a dropdown (clicked in the menu, however long it is)."""
    dash_duo.find_element(selector).click()

    def option():
        return next((o for o in dash_duo.find_elements(".dash-dropdown-option")
                     if o.text == text), None)

    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'nearest'});"
                                   "arguments[0].click();",
                                   wait_until(option, what=f"the option {text}"))


def title_with(dash_duo, text: str) -> str | None:
    """The painted graph's title when it holds ``text``."""
    title = dash_duo.find_element(f"#{compare.DIFF_TITLE}").text
    return title if text in title else None


def node_colours(dash_duo) -> list:
    """The fill colours of the painted graph's node markers, trace by trace."""
    return dash_duo.driver.execute_script(
        f"const g = document.querySelector('#{compare.DIFF_GRAPH} .js-plotly-plot');"
        "return g && g.data ? g.data.filter((t) => t.marker && Array.isArray(t.marker.color))"
        ".map((t) => t.marker.color) : [];")


def first_ys(dash_duo) -> list:
    return dash_duo.driver.execute_script(
        f"const g = document.querySelector('#{compare.OVERLAY} .js-plotly-plot');"
        "const t = g && g._fullData && g._fullData[0];"  # y decoded (plotly's bdata)
        "return t && t.y ? Array.from(t.y) : [];")


def visible_trials(dash_duo) -> list[str]:
    return [c.text for c in dash_duo.find_elements(
        f"#{compare.TABLE} td[data-dash-column=trial_id]")]


def selection(dash_duo) -> dict:
    raw = dash_duo.driver.execute_script(
        f"return window.sessionStorage.getItem('{ids.SELECTION}');")
    return json.loads(raw) if raw else {}


def test_compare_page_table_overlay_divergence_and_links(dash_duo, sweep):
    start_app(dash_duo, sweep)
    dash_duo.find_element("#nav-compare").click()
    dash_duo.wait_for_text_to_equal(f"#{compare.SUMMARY}",
                                    "4 trials · tick trials to compare them", timeout=20)
    headers = [h.text for h in dash_duo.find_elements(f"#{compare.TABLE} th")]
    assert any("cfg optim.lr" in h for h in headers)
    assert any("cfg seed" in h for h in headers)
    # no plot before there is something to draw (plotly is not needed to show the table)
    assert not dash_duo.find_elements(f"#{compare.OVERLAY}")
    assert dash_duo.find_element(f"#{compare.OVERLAY_BOX}").text == compare.TICK_TRIALS

    # the table's own filter: a column's cell under its header
    lr_filter = dash_duo.find_element(
        f"#{compare.TABLE} th.dash-filter[data-dash-column='config.optim.lr'] input")
    lr_filter.send_keys("0.05", Keys.ENTER)
    wait_until(lambda: sorted(visible_trials(dash_duo)) == ["lr0.05-s0", "lr0.05-s1"],
               what="the trials of lr 0.05")
    tick(dash_duo, "lr0.05-s0")
    lr_filter.send_keys(Keys.BACKSPACE * 4, Keys.ENTER)
    wait_until(lambda: len(visible_trials(dash_duo)) == 4, what="every trial again")
    tick(dash_duo, "lr0.2-s0")
    wait_until(lambda: traces(dash_duo) == ["lr0.05-s0", "lr0.2-s0"],
               what="one line per ticked trial")
    # smoothing: the slider moves by its step per key; the first point stays (bias
    # corrected), the next ones move
    raw = wait_until(lambda: first_ys(dash_duo), what="the first line's points")
    dash_duo.find_element(f"#{compare.SMOOTHING} [role=slider]").send_keys(
        *[Keys.ARROW_RIGHT] * 5)
    smoothed = wait_until(lambda: first_ys(dash_duo) not in ([], raw) and first_ys(dash_duo),
                          what="the smoothed line")
    assert smoothed[0] == raw[0] and smoothed[1:] != raw[1:]
    text = wait_until(lambda: dash_duo.find_element(f"#{compare.DIVERGENCE}").text
                      if "first differ" in dash_duo.find_element(f"#{compare.DIVERGENCE}").text
                      else None, timeout=30, what="the first divergence")
    assert "lr0.05-s0" in text and "first differ at step 0" in text
    # the graph painted by the difference: at first at the divergence (step 0, updates)
    caption = wait_until(lambda: title_with(dash_duo, "graph at step 0"),
                         what="the graph painted by the difference")
    assert "· update between" in caption and "nodes differ" in caption
    before = wait_until(lambda: node_colours(dash_duo), what="painted nodes")
    dash_duo.driver.execute_script(  # marks the plot: made anew, it would lose the mark
        f"document.querySelector('#{compare.DIFF_GRAPH} .js-plotly-plot').dataset.mark = '1';")
    # another statistic and the forward values: step 0's are equal (the lr acts later)
    choose(dash_duo, f"#{compare.DIFF_STATISTIC}", "max |x|")
    wait_until(lambda: title_with(dash_duo, "max |x| · update"), what="max |x| painted")
    choose(dash_duo, f"#{compare.DIFF_TYPE}", "forward")
    equal = wait_until(lambda: title_with(dash_duo, "the two trials are equal here"),
                       what="equal forward values at step 0")
    assert "max |x| · forward" in equal
    zero = wait_until(lambda: node_colours(dash_duo) != before and node_colours(dash_duo),
                      what="the colours of no difference")
    # another step: two updates of another lr later the forward values differ
    choose(dash_duo, f"#{compare.DIFF_STEP}", "4")
    later = wait_until(lambda: title_with(dash_duo, "graph at step 4"), what="step 4 painted")
    assert "max |x| · forward" in later and "nodes differ" in later
    wait_until(lambda: node_colours(dash_duo) not in (zero, []), what="step 4's colours")
    # the same plot, repainted (its zoom stays)
    assert dash_duo.driver.execute_script(
        f"return document.querySelector('#{compare.DIFF_GRAPH} .js-plotly-plot').dataset.mark")

    # grouped by lr: a mean and a band per group
    tick(dash_duo, "lr0.05-s1")
    tick(dash_duo, "lr0.2-s1")
    wait_until(lambda: len(traces(dash_duo)) == 4, what="four lines")
    dash_duo.select_dcc_dropdown(f"#{compare.GROUP_BY}", value="optim.lr")
    wait_until(lambda: traces(dash_duo) == ["optim.lr=0.05 (2) band", "optim.lr=0.05 (2)",
                                            "optim.lr=0.2 (2) band", "optim.lr=0.2 (2)"],
               what="two groups with bands")

    # the divergence opens the Tensors page at the named tensor of the first trial
    dash_duo.find_element(f"#{compare.OPEN_A}").click()
    wait_until(lambda: dash_duo.driver.current_url.rstrip("/").endswith(
        dash_duo.server_url.rstrip("/")), what="the Tensors page")
    current = wait_until(lambda: selection(dash_duo).get("current"), what="a selection")
    assert current["trial"] == "lr0.05-s0"
    assert current["training_step"] == 0 and current["recording_type"] == "update"

    # the Modules page with the second trial beside the first
    dash_duo.find_element("#nav-compare").click()
    button = dash_duo.wait_for_element(f"#{compare.OPEN_MODULES}:not([disabled])", timeout=20)
    button.click()
    wait_until(lambda: "/modules?compare=lr0.2-s0" in dash_duo.driver.current_url,
               what="the Modules page's URL")
    dash_duo.wait_for_contains_text(f"#{modules.COMPARE}", "lr0.2-s0", timeout=20)
    assert selection(dash_duo)["current"]["trial"] == "lr0.05-s0"

    # a trial recorded while the page is open joins the table at a refresh
    dash_duo.find_element("#nav-compare").click()
    dash_duo.wait_for_text_to_equal(f"#{compare.SUMMARY}",
                                    "4 trials · tick trials to compare them", timeout=20)
    from tests.app.test_compare_data import train

    train(sweep.parent, "lr0.1-late", 0.1, 2, range(0, 8, 4))
    dash_duo.wait_for_text_to_equal(f"#{compare.SUMMARY}",
                                    "5 trials · tick trials to compare them", timeout=30)
    assert not [entry for entry in dash_duo.get_logs() or [] if entry["level"] == "SEVERE"]
