"""Sharing the GUI (docs/SERVING.md): a real `comgra` process per test, requests to
127.0.0.1 only. The token, read-only, the Host check, the body limit, --debug."""

from __future__ import annotations

import re

import pytest

from .conftest import TUTORIAL, callback_body

pytestmark = pytest.mark.slow

TRIAL = "trial_bugged_original_version"
SAVE_STATUS = "flow-save-status.children"


def save_values(trial: str = TRIAL) -> dict:
    """The Flow page's Save click with an edited input of two values."""
    edit = {"chain": "c", "origin": "run", "node": "input", "sample": 0, "step": 0,
            "shape": [2], "values": [1.0, 2.0], "original": [1.0, 0.0]}
    return {"flow-save.n_clicks": 1, "flow-edit.data": edit, "flow-note.value": "",
            "selection.data": {"current": {"trial": trial}}}


def save(running, session) -> str:
    """Post the Save callback; the text the page shows under the button."""
    dependencies = session.get(running.base + "/_dash-dependencies", timeout=60).json()
    values = save_values()
    body = callback_body(dependencies, SAVE_STATUS, values)
    for item in body["state"]:  # the ids as the app names them
        if item["property"] == "data" and "selection" in item["id"]:
            item["value"] = values["selection.data"]
        if item["id"].endswith("edit") and item["property"] == "data":
            item["value"] = values["flow-edit.data"]
    answer = session.post(running.base + "/_dash-update-component", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["response"]["flow-save-status"]["children"]


def test_without_the_token_nothing_is_served(start_server):
    running = start_server("--host", "0.0.0.0")
    assert running.token and len(running.token) >= 32
    assert any("(read-only)" in line for line in running.lines)
    session = running.session()
    page = session.get(running.base + "/", timeout=60)
    bundle = re.search(r'src="(/_dash-component-suites/[^"]+)"', page.text).group(1)
    paths = ["/", "/flow", "/_dash-layout", "/_dash-dependencies", "/assets/comgra.js",
             bundle, "/_favicon.ico"]
    for path in paths:
        assert session.get(running.base + path, timeout=60).status_code == 200, path
        refused = running.request("GET", path)
        assert refused.status_code == 401, path
        assert "access token" in refused.text
        wrong = running.request("GET", path, params={"token": running.token[:-1] + "x"})
        assert wrong.status_code == 401, path
    assert running.request("POST", "/_dash-update-component", json={}).status_code == 401
    # a browser asking for the page gets a page that says what to do
    asked = running.request("GET", "/", headers={"Accept": "text/html"})
    assert asked.status_code == 401 and "<h3>" in asked.text and "?token=" in asked.text
    # the token in the query sets a cookie only the browser's requests carry
    first = running.request("GET", "/", params={"token": running.token})
    cookie = first.headers["Set-Cookie"]
    assert f"comgra-token-{running.port}={running.token}" in cookie
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    # scripts can send it in a header
    header = {"Authorization": f"token {running.token}"}
    assert running.request("GET", "/_dash-layout", headers=header).status_code == 200
    bearer = {"Authorization": f"Bearer {running.token}"}
    assert running.request("GET", "/_dash-dependencies", headers=bearer).status_code == 200
    # with the cookie, callbacks answer (read-only: the Save callback says why it refuses)
    assert "read-only" in save(running, session)


def test_read_only_refuses_writes_with_a_message_and_allow_writes_writes(
        start_server, tutorial_copy):
    probes = tutorial_copy / "trials" / TRIAL / "probes"
    shared = start_server("--host", "0.0.0.0", path=tutorial_copy)
    local = start_server("--read-only", path=tutorial_copy)
    writing = start_server("--host", "0.0.0.0", "--allow-writes", "--token", "a-long-token",
                           path=tutorial_copy)
    for running in (shared, local):
        session = running.session() if running.token else __import__("requests").Session()
        shown = save(running, session)
        assert shown.startswith("Not saved: this GUI is read-only"), shown
        assert "--allow-writes" in shown
        assert not probes.exists()
    shown = save(writing, writing.session())
    assert shown.startswith("Saved as p"), shown
    assert len([p for p in probes.iterdir() if not p.name.startswith(".")]) == 1


def test_the_host_header_must_be_a_name_of_this_server(start_server):
    running = start_server()  # loopback, no token
    for host in ("127.0.0.1", "localhost", "LOCALHOST."):
        answer = running.request("GET", "/_dash-layout",
                                 headers={"Host": f"{host}:{running.port}"})
        assert answer.status_code == 200, host
    for path in ("/", "/_dash-layout", "/assets/comgra.js"):  # a rebound name
        answer = running.request("GET", path, headers={"Host": f"evil.example:{running.port}"})
        assert answer.status_code == 403 and "--allow-host evil.example" in answer.text
    answer = running.request("POST", "/_dash-update-component", json={},
                             headers={"Host": "10.0.0.7"})
    assert answer.status_code == 403  # an address is not a loopback one
    # a page elsewhere cannot post to it, even by the right name
    answer = running.request("POST", "/_dash-update-component", json={},
                             headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403 and "evil.example" in answer.text
    allowed = start_server("--allow-host", "comgra.example")
    answer = allowed.request("GET", "/", headers={"Host": f"comgra.example:{allowed.port}"})
    assert answer.status_code == 200
    shared = start_server("--host", "0.0.0.0")
    answer = shared.request("GET", "/", params={"token": shared.token},
                            headers={"Host": f"10.0.0.7:{shared.port}"})
    assert answer.status_code == 200  # an address of this machine, as a colleague types it
    answer = shared.request("GET", "/", params={"token": shared.token},
                            headers={"Host": "evil.example"})
    assert answer.status_code == 403


def test_request_bodies_are_limited(start_server):
    running = start_server("--max-request-mb", "1")
    big = b"{" + b" " * (2**20) + b"}"
    answer = running.request("POST", "/_dash-update-component", data=big,
                             headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "1,048,576" in answer.text

    def chunks():  # no Content-Length: the server counts
        for _ in range(3):
            yield b" " * 2**19

    answer = running.request("POST", "/_dash-update-component", data=chunks(),
                             headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert running.request("GET", "/_dash-layout").status_code == 200
    assert running.request("GET", "/").headers["Server"] == "waitress"


def test_debug_serves_no_werkzeug_console(start_server):
    running = start_server("--debug")
    page = running.request("GET", "/")
    assert page.status_code == 200 and "Werkzeug" in page.headers["Server"]
    console = running.request("GET", "/console")  # Dash's router answers every path
    assert "Werkzeug Debugger" not in console.text and "EVALEX" not in console.text
    assert "_dash-config" in console.text  # the GUI's own page
    resource = running.request("GET", "/", params={"__debugger__": "yes", "cmd": "resource",
                                                   "f": "debugger.js"})
    assert "openShell" not in resource.text and "CONSOLE_MODE" not in resource.text
    # the access rules hold in debug too
    answer = running.request("GET", "/", headers={"Host": "evil.example"})
    assert answer.status_code == 403
