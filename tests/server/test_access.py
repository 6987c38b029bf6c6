"""Sharing the GUI (docs/SERVING.md): a real `comgra` process per test, requests to
127.0.0.1 only. The token, read-only, the Host check, the body limit, --debug."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import requests
from comgra_like.app import ids
from comgra_like.app.pages import flow, modules

from .conftest import post_callback

pytestmark = pytest.mark.slow

SELECTION = {"current": {"trial": "conv"}}  # the trial of tests/app/flow_runs.py


def shown_chain(running, session) -> str:
    """The chain the Flow page shows first (the lists callback)."""
    lists = post_callback(running, session, f"{flow.CHAIN}.options", {
        f"{ids.SELECTION}.data": SELECTION, f"{ids.TICK}.n_intervals": 1})
    return lists[flow.CHAIN]["value"]


def save(running, session) -> str:
    """The Flow page's Save click on the chain's input with one value changed; the text
    the page shows under the button."""
    chain = shown_chain(running, session)
    edit = post_callback(running, session, f"{flow.EDIT}.data", {
        f"{flow.CHAIN}.value": chain, f"{ids.SELECTION}.data": SELECTION})[flow.EDIT]["data"]
    edit["values"][0] += 1.0
    response = post_callback(running, session, f"{flow.SAVE_STATUS}.children", {
        f"{flow.SAVE}.n_clicks": 1, f"{flow.EDIT}.data": edit, f"{flow.NOTE}.value": "",
        f"{ids.SELECTION}.data": SELECTION})
    return response[flow.SAVE_STATUS]["children"]


def wrong_token(token: str) -> str:
    """``token`` with its last character changed. (It was always made to end in "x": a
    generated token that ends in "x", one in 64, then was sent as the "wrong" one and
    rightly answered 200.)"""
    return token[:-1] + ("y" if token.endswith("x") else "x")


def files_in(group) -> list:
    return sorted(group.rglob("*"))


@pytest.fixture(scope="module")
def recorded_flows(tmp_path_factory):
    """A group with gradient flows (tests/app/flow_runs.py): a complete chain at step 0, a
    chain at step 1 that lacks the rows of conv2 but units 0 and 5."""
    pytest.importorskip("torch")
    from tests.app import flow_runs

    return flow_runs.record(tmp_path_factory.mktemp("flows"))


@pytest.fixture
def flow_group(recorded_flows, tmp_path):
    return Path(shutil.copytree(recorded_flows, tmp_path / "flows"))


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
        wrong = running.request("GET", path, params={"token": wrong_token(running.token)})
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
    assert first.headers["Referrer-Policy"] == "same-origin"  # the URL holds the token
    assert asked.headers["X-Content-Type-Options"] == "nosniff"
    # scripts can send it in a header
    header = {"Authorization": f"token {running.token}"}
    assert running.request("GET", "/_dash-layout", headers=header).status_code == 200
    bearer = {"Authorization": f"Bearer {running.token}"}
    assert running.request("GET", "/_dash-dependencies", headers=bearer).status_code == 200
    # with the cookie, callbacks answer
    assert shown_chain(running, session) is None  # the example has no flows


def test_a_token_given_by_the_user_is_required(start_server, monkeypatch):
    """--token (or $COMGRA_TOKEN) is the token, on loopback too (where none is needed
    otherwise) and beyond it (instead of a generated one): without it nothing is served,
    with it pages and callbacks work."""
    token = "the-users-own-token-42"
    servers = [start_server("--token", token), start_server("--host", "0.0.0.0", "--token", token)]
    monkeypatch.setenv("COMGRA_TOKEN", token)
    servers.append(start_server())
    for running in servers:
        assert running.token == token, running.lines  # the URL printed holds it
        for path in ("/", "/modules", "/_dash-layout", "/_dash-dependencies",
                     "/assets/comgra.js"):
            refused = running.request("GET", path)
            assert refused.status_code == 401 and "access token" in refused.text, path
            wrong = running.request("GET", path, params={"token": wrong_token(token)})
            assert wrong.status_code == 401, path
            header = {"Authorization": f"token {token}"}
            assert running.request("GET", path, headers=header).status_code == 200, path
        callback = running.request("POST", "/_dash-update-component", json={})
        assert callback.status_code == 401
        # the browser's way: the URL with the token sets the cookie; pages and callbacks
        session = running.session()
        for path in ("/", "/modules", "/_dash-layout"):
            assert session.get(running.base + path, timeout=60).status_code == 200, path
        info = post_callback(running, session, f"{modules.INFO}.children", {
            f"{ids.SELECTION}.data": {"current": {"trial": "trial_watched_classifier"}},
            f"{ids.DATA_STATUS}.data": None})[modules.INFO]["children"]
        assert info.startswith("structure of step"), info


def test_read_only_refuses_writes_with_a_message_and_allow_writes_writes(
        start_server, flow_group):
    before = files_in(flow_group)
    shared = start_server("--host", "0.0.0.0", path=flow_group)
    local = start_server("--read-only", path=flow_group)
    writing = start_server("--host", "0.0.0.0", "--allow-writes", "--token", "a-long-token",
                           path=flow_group)
    for running in (shared, local):
        session = running.session() if running.token else requests.Session()
        shown = save(running, session)
        assert shown.startswith("Not saved: this GUI is read-only"), shown
        assert "--allow-writes" in shown
        assert files_in(flow_group) == before
    shown = save(writing, writing.session())
    assert shown.startswith("Saved as p"), shown
    probes = flow_group / "trials" / "conv" / "probes"
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


def ask_row(running, session, unit: int) -> str:
    """Click "compute this row" for a unit of conv2 whose row is not stored; the text
    the page shows under the button."""
    chain = shown_chain(running, session)
    asked = post_callback(running, session, f"{flow.ROW_ASKED}.data", {
        f"{flow.ROW_BUTTON}.n_clicks": 1, f"{flow.CHAIN}.value": chain,
        f"{flow.UNIT}.data": {"chain": chain, "node": "conv2", "unit": unit},
        f"{ids.SELECTION}.data": SELECTION})[flow.ROW_ASKED]["data"]
    status = post_callback(running, session, f"{flow.ROW_STATUS}.children", {
        f"{flow.ROW_ASKED}.data": asked, f"{ids.TICK}.n_intervals": 1})
    return status[flow.ROW_STATUS]["children"]


def test_read_only_refuses_row_requests(start_server, flow_group):
    before = files_in(flow_group)
    shown = ask_row(start_server("--read-only", path=flow_group), requests.Session(), 1)
    assert shown.startswith("Not asked for the row of conv2 unit 1: this GUI is read-only")
    assert files_in(flow_group) == before  # nothing written
    writing = start_server(path=flow_group)  # loopback: writes allowed
    shown = ask_row(writing, requests.Session(), 1)
    assert shown.startswith("Asked for the row of conv2 unit 1"), shown
    assert files_in(flow_group) != before
