"""Headless Chromium on a GUI served in this process, for the screenshot scripts
(screenshot_pages.py, screenshot_metrics.py, screenshot_modules.py, screenshot_flow.py)
and benchmark_flow_gui.py's browser timings.

The scripts run as files (``python benchmarks/screenshot_x.py``), so they import this
module by its plain name from their own folder. Chromium is /usr/bin/chromium unless
``DASH_TEST_CHROMEPATH`` names another binary (as for the browser tests).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve the Dash ``app`` on a free local port while the block runs; yields its base
    URL. The socket listens before the block starts, so the first request is answered."""
    from werkzeug.serving import make_server

    port = free_port()
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()


def start_chromium(width: int, height: int) -> Any:
    """A headless Chromium whose page (not window) is ``width`` x ``height``, keeping the
    browser's SEVERE console messages for :func:`console_errors`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = os.environ.get("DASH_TEST_CHROMEPATH", "/usr/bin/chromium")
    for arg in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    driver = webdriver.Chrome(options=options)
    driver.set_window_size(width, height)
    # the window size includes no browser chrome in headless mode; make the viewport exact
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(width + (width - inner[0]), height + (height - inner[1]))
    return driver


@contextmanager
def chromium(width: int, height: int) -> Iterator[Any]:
    """:func:`start_chromium` for the block; the browser quits after it, also on errors."""
    driver = start_chromium(width, height)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_css(driver: Any, css: str, timeout: float = 20) -> None:
    """Wait until an element matching ``css`` exists."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def settle(driver: Any, timeout: float = 10) -> None:
    """Wait until Dash marks no component as loading, then a little for plotly to draw."""
    end = time.time() + timeout
    while time.time() < end:
        busy = driver.execute_script(
            "return document.querySelectorAll('[data-dash-is-loading=\"true\"]').length"
        )
        if not busy:
            break
        time.sleep(0.1)
    time.sleep(0.8)


def park_pointer(driver: Any) -> None:
    """Move the pointer onto the top bar's brand, so that no hover label covers a shot."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(driver.find_element("css selector", ".brand")).perform()


def save_screenshot(driver: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(out))
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


def console_errors(driver: Any) -> list[dict]:
    """The page's SEVERE console messages since the last call (the log is drained)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def report_errors(errors: list[dict]) -> int:
    """Print the console errors; the script's exit status (1 when there were any)."""
    for error in errors:
        print("console error:", error.get("message"), file=sys.stderr)
    return 1 if errors else 0


def print_server_timings(app: Any, prefix: str) -> None:
    """The server time of the app's callbacks whose names start with ``prefix``."""
    for name, row in app.comgra_parts.timings.summary().items():
        if name.startswith(prefix):
            print(f"{name}: {row['count']} calls, median {row['median_ms']:.0f} ms, "
                  f"max {row['max_ms']:.0f} ms (server)")


@contextmanager
def group_to_show(path: Path | None, keep: Path | None, prefix: str,
                  record: Callable[[Path], Path], what: str) -> Iterator[Path]:
    """``path`` when given; else the group ``record(root)`` writes (``what`` says what, for
    the message) into ``keep`` (kept) or a temporary folder (removed after the block)."""
    if path is not None:
        yield path
        return
    with ExitStack() as stack:
        root = keep if keep is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        started = time.perf_counter()
        group = record(root)
        print(f"recorded {what} in {time.perf_counter() - started:.1f} s: {group}")
        yield group
