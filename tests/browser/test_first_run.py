"""A new user's first run (issue 26): ``bash scripts/dev.sh gui`` opens the committed
example group on a tutorial trial, which has no watch() data. The Modules, Metrics and
Flow pages say so and offer the trial that has it as a button; one click selects it
and the page shows its data."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app.pages import flow, metrics, modules

from tests.browser.helpers import start_app, wait_until
from tests.browser.test_gui import text_of
from tests.browser.test_modules import shown_keys

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
WATCHED = "trial_watched_classifier"
BUTTON = f".other-trials .other-trial[data-trial='{WATCHED}']"


def shown(dash_duo, selector: str, what: str) -> None:
    """Wait for ``selector``; on a timeout, say what the page shows instead."""
    try:
        wait_until(lambda: dash_duo.find_elements(selector), what=what)
    except AssertionError:
        page = dash_duo.driver.execute_script("return document.body.innerText")
        raise AssertionError(f"timed out waiting for {what}; the page shows:\n{page}"
                             ) from None


def test_one_click_in_the_empty_state_opens_the_watched_trial(dash_duo):
    start_app(dash_duo, EXAMPLE, prefetch=False)
    start = wait_until(lambda: text_of(dash_duo, ".trial-dropdown"), what="the trial")
    assert WATCHED not in start, start  # the GUI opens on a tutorial trial

    # Metrics and Flow offer the watched trial as well
    dash_duo.find_element("#nav-metrics").click()
    shown(dash_duo, f"#{metrics.CARDS} .metrics-empty {BUTTON}", "the Metrics page's offer")
    dash_duo.find_element("#nav-flow").click()
    shown(dash_duo, f"#{flow.HISTORY} {BUTTON}", "the Flow page's offer")

    dash_duo.find_element("#nav-modules").click()
    shown(dash_duo, f"#{modules.INFO} {BUTTON}", "the Modules page's offer")
    assert shown_keys(dash_duo) == []  # no module graph, the empty message
    dash_duo.find_element(f"#{modules.INFO} {BUTTON}").click()

    # the selection moved: the trial selector names it, the module graph appears
    wait_until(lambda: WATCHED in text_of(dash_duo, ".trial-dropdown"),
               what="the trial selector to show the watched trial")
    keys = wait_until(lambda: shown_keys(dash_duo), what="the module graph")
    assert len(keys) >= 2, keys
    assert "structure of step" in text_of(dash_duo, f"#{modules.INFO}")
    assert not dash_duo.find_elements(BUTTON)
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
