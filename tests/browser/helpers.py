"""What the browser tests share: starting the GUI on a group in dash_duo's browser, and
waiting for a condition that the page reaches after a callback or a refresh."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from comgra_like.app import create_app, ids

T = TypeVar("T")

#: The dependency graph's points: the Tensors page (the start page) has drawn its data.
GRAPH_POINTS = f"#{ids.GRAPH_CONTAINER} .scatterlayer .point"


def start_app(dash_duo, path: Path, timeout: float = 20, **options: Any):
    """Serve ``create_app(path, ...)`` to dash_duo's browser and wait until the start page
    has drawn the dependency graph; returns the app. The GUI refreshes every 0.5 s unless
    ``refresh_seconds`` says otherwise, so that data written during a test shows soon."""
    options.setdefault("refresh_seconds", 0.5)
    app = create_app(path, **options)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(GRAPH_POINTS, timeout=timeout)
    return app


def wait_until(condition: Callable[[], T], timeout: float = 20, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something true and return that; the page
    changes after callbacks and refreshes, whose timing the test does not control."""
    end = time.time() + timeout
    while time.time() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
