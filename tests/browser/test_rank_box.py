"""A recording of one process shows no "Ranks" selector (tests/app/test_rank_box.py has
the layout side): the boxes are in the page and stay hidden after the pages' callbacks
have run, on the committed example run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.browser.helpers import start_app

pytestmark = pytest.mark.browser

EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"


@pytest.mark.parametrize("path, box", [("/", "rank-box"), ("/modules", "modules-rank-box"),
                                       ("/metrics", "metrics-rank-box"),
                                       ("/notes", "notes-rank-box")])
def test_no_ranks_selector_on_a_recording_of_one_process(dash_duo, path, box):
    start_app(dash_duo, EXAMPLE_RUN)
    if path != "/":
        dash_duo.driver.get(dash_duo.server_url + path)
    element = dash_duo.wait_for_element(f"#{box}", timeout=20)
    time.sleep(2)  # the page's callbacks (selection, refreshes) have set the box's style
    assert not element.is_displayed()
    assert dash_duo.driver.execute_script(
        "return getComputedStyle(arguments[0]).display", element) == "none"
