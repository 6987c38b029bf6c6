"""A colleague's browser on a shared GUI (Chromium, a real `comgra` on 0.0.0.0, pages
opened at 127.0.0.1): without the token nothing shows; the token URL sets the cookie
that every later page, bundle and callback carries; the Flow page says it is read-only."""

from __future__ import annotations

import time

import pytest
from comgra_like.app.pages import flow
from selenium.webdriver.common.action_chains import ActionChains

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def flow_group(tmp_path):
    pytest.importorskip("torch")
    from tests.app import flow_runs

    return flow_runs.record(tmp_path / "recorded")


def click(driver, element) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    ActionChains(driver).move_to_element(element).pause(0.1).click().perform()


def test_the_token_url_opens_every_page_and_saving_is_refused_on_it(
        dash_br, start_server, flow_group):
    running = start_server("--host", "0.0.0.0", path=flow_group)
    driver = dash_br.driver
    driver.get(f"{running.base}/flow")
    assert "needs its access token" in driver.find_element("tag name", "body").text
    driver.get_log("browser")  # that 401 is expected: read past it
    driver.get(f"{running.base}/?token={running.token}")
    dash_br.wait_for_element("#nav-flow", timeout=30)
    driver.get(f"{running.base}/flow")  # no token in the URL: the cookie is enough
    save = dash_br.wait_for_element(f"#{flow.SAVE}", timeout=30)
    status = dash_br.find_element(f"#{flow.SAVE_STATUS}")
    end = time.monotonic() + 60
    while "read-only" not in status.text and time.monotonic() < end:
        click(driver, save)  # "Nothing to save" until the chain's input is loaded
        time.sleep(1)
    assert status.text.startswith("Not saved: this GUI is read-only"), status.text
    assert not (flow_group / "trials" / "conv" / "probes").exists()
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not [e for e in errors if "401" in e.get("message", "")], errors
