"""The neighbour prefetch (comgra_like.app.prefetch): reads in the background, never beside
a running callback, on data written by the real recorder."""

from __future__ import annotations

import time

from comgra_like.app import create_app
from comgra_like.app.data import AppData
from comgra_like.app.prefetch import NeighbourPrefetch


def _indexed_steps(data: AppData, trial: str) -> set[int]:
    return {step for step in data.steps(trial) if data.is_indexed(trial, step)}


def _wait_for(condition, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_prefetch_waits_until_the_callbacks_are_done(tiny_group):
    data = AppData(tiny_group)
    prefetch = NeighbourPrefetch(data, quiet_seconds=0.2)
    steps = list(data.steps("trial_a"))  # [0, 1, 4, 5, 8, 9, 10]
    prefetch.callback_started()  # the views of step 4 are being computed
    prefetch.neighbours_of("trial_a", 4, steps)
    time.sleep(0.3)
    assert _indexed_steps(data, "trial_a") == set()  # nothing read beside the callback
    prefetch.callback_finished()
    started = time.monotonic()
    assert _wait_for(lambda: _indexed_steps(data, "trial_a") == {1, 5})
    assert time.monotonic() - started >= 0.15  # and only after a quiet moment


def test_a_newer_prefetch_replaces_an_older_one(tiny_group):
    data = AppData(tiny_group)
    prefetch = NeighbourPrefetch(data, quiet_seconds=0.2)
    steps = list(data.steps("trial_a"))
    prefetch.callback_started()
    prefetch.neighbours_of("trial_a", 1, steps)  # a step the user went past
    prefetch.neighbours_of("trial_a", 9, steps)
    prefetch.callback_finished()
    assert _wait_for(lambda: _indexed_steps(data, "trial_a") >= {8, 10})
    time.sleep(0.3)
    assert _indexed_steps(data, "trial_a") == {8, 10}
    # without any callback running (no app around it) it starts after the delay
    prefetch.neighbours_of("trial_a", 0, steps)
    assert _wait_for(lambda: 1 in _indexed_steps(data, "trial_a"))


def test_the_app_tells_its_prefetch_when_callbacks_run(tiny_group):
    app = create_app(tiny_group)
    prefetch = app.comgra_parts.prefetch
    client = app.server.test_client()
    assert client.get("/").status_code == 200  # not a callback
    assert prefetch.last_callback_end == 0.0
    before = time.monotonic()
    client.post("/_dash-update-component", json={})  # a (malformed) callback request
    assert prefetch.last_callback_end >= before and prefetch.callbacks_running == 0


def test_prefetch_can_be_turned_off(tiny_group):
    app = create_app(tiny_group, prefetch=False)
    assert app.comgra_parts.prefetch is None
