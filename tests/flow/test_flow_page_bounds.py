"""The Flow page's write paths against crafted requests (issue 28, items 1 and 2).

A real GUI process (``comgra --path GROUP --port N`` on 127.0.0.1) gets the POSTs to
``/_dash-update-component`` a browser sends, built from the app's own callback map, with
the editor's state (a ``dcc.Store`` kept by the browser) replaced by what an attacker
would send. Before: a click with a claimed shape of 40 million units made the server
allocate 8 bytes per unit (``map_layout``) before looking at the values, and Save wrote
an input of any shape into the trial. Now both are answered with an error on the page;
the server's peak memory (VmHWM) does not jump and the trial's ``probes`` folder does
not grow.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from comgra_like.app import create_app, ids
from comgra_like.app.pages import flow as page

from comgra_like.errors import ConfigurationError, StorageError
from comgra_like.format import flows as store
from comgra_like.query import open_group

pytest.importorskip("torch")

TRIAL = "conv"
#: A claimed shape of this many units: 320 MB of int64 before the fix.
HUGE = 40_000_000
#: The most the server's peak may grow while answering a crafted request.
ALLOWED_GROWTH_KB = 40 * 1024


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory) -> Path:
    from tests.app import flow_runs

    return flow_runs.record(tmp_path_factory.mktemp("bounds"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gui(group_dir: Path, log: Path):
    """``comgra --path group_dir`` as its own process on a free loopback port (its
    output in ``log``)."""
    port = free_port()
    comgra = Path(sys.executable).with_name("comgra")
    out = log.open("w")
    proc = subprocess.Popen([str(comgra), "--path", str(group_dir), "--port", str(port)],
                            stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    raise AssertionError(f"the GUI did not start: {log.read_text()}")
                time.sleep(0.2)
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


class Browser:
    """Posts callback requests as Dash's renderer does: the output key, the inputs and
    states of the callback (from the app's own callback map) with their values."""

    def __init__(self, port: int, spec_app: Any):
        self.url = f"http://127.0.0.1:{port}/_dash-update-component"
        self.app = spec_app

    def call(self, first_output: str, values: dict[tuple[str, str], Any],
             changed: tuple[str, str]) -> tuple[int, dict]:
        key = next(k for k in self.app.callback_map
                   if k.startswith((f"..{first_output}", f"{first_output}@"))
                   or k == first_output)
        spec = self.app.callback_map[key]

        def entry(item: dict) -> dict:
            return {**item, "value": values.get((item["id"], item["property"]))}

        outputs = [{"id": o.split(".")[0], "property": o.split(".")[1].split("@")[0]}
                   for o in key.strip(".").split("...")]
        body = json.dumps({"output": key, "outputs": outputs if len(outputs) > 1 else outputs[0],
                           "inputs": [entry(i) for i in spec["inputs"]],
                           "state": [entry(s) for s in spec.get("state", [])],
                           "changedPropIds": [f"{changed[0]}.{changed[1]}"]}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        if status != 200:
            return status, {}
        return status, {(i, p): v for i, props in json.loads(data)["response"].items()
                        for p, v in props.items()}


def peak_kb(pid: int) -> int:
    """The process's peak resident memory (VmHWM) in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def selection() -> dict:
    return {"current": {"trial": TRIAL}, "wanted": {"trial": TRIAL}}


def first_chain(browser: Browser) -> str:
    status, shown = browser.call(f"{page.ORIGIN}.options", {
        (ids.SELECTION, "data"): selection(), (page.STEP, "value"): 0},
        (page.STEP, "value"))
    assert status == 200
    return shown[(page.CHAIN, "value")]


def click(browser: Browser, chain: str, state: Any, unit: int = 7) -> tuple[int, dict]:
    return browser.call(f"{page.EDIT}.data", {
        (page.CHAIN, "value"): chain, (page.EDIT, "data"): state,
        (page.EDITOR, "clickData"): {"points": [{"curveNumber": 0, "x": unit % 6,
                                                 "y": unit // 6}]},
        (page.Z_VALUE, "value"): 3.0, (page.MODE, "value"): "toggle",
        (ids.SELECTION, "data"): selection()}, (page.EDITOR, "clickData"))


def save(browser: Browser, state: Any, note: Any = "") -> tuple[int, dict]:
    return browser.call(f"{page.SAVED}.data", {
        (page.SAVE, "n_clicks"): 1, (page.EDIT, "data"): state, (page.NOTE, "value"): note,
        (ids.SELECTION, "data"): selection()}, (page.SAVE, "n_clicks"))


def probes_bytes(group_dir: Path) -> int:
    folder = group_dir / "trials" / TRIAL / "probes"
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@pytest.fixture(scope="module")
def served(group_dir):
    with gui(group_dir, group_dir.parent / "gui.log") as (proc, port):
        browser = Browser(port, create_app(group_dir, prefetch=False))
        chain = first_chain(browser)
        status, shown = click(browser, chain, None)  # the editor opens: the real state
        assert status == 200
        yield proc, browser, chain, shown[(page.EDIT, "data")]


def test_a_click_with_a_huge_claimed_shape_is_refused_without_allocating(served):
    proc, browser, chain, state = served
    assert state["shape"] == [1, 6, 6]
    status, shown = click(browser, chain, state)  # a real click: warms the path up
    assert status == 200 and shown[(page.EDIT, "data")]["values"] != state["values"]
    before = peak_kb(proc.pid)
    crafted = {**state, "shape": [HUGE], "values": [0.0]}
    status, shown = click(browser, chain, crafted)
    grown = peak_kb(proc.pid) - before
    assert status == 200
    assert "Edit refused" in shown[(page.EDIT_STATUS, "children")]
    assert "(1, 6, 6)" in shown[(page.EDIT_STATUS, "children")]
    assert grown < ALLOWED_GROWTH_KB, f"the server's peak grew by {grown} kB"
    # the same for a shape that matches but values that do not
    status, shown = click(browser, chain, {**state, "values": [0.0] * 35})
    assert "holds 35 values" in shown[(page.EDIT_STATUS, "children")]
    status, shown = click(browser, chain, {**state, "values": ["x"] * 36})
    assert "must be numbers" in shown[(page.EDIT_STATUS, "children")]
    # and the server still answers the real state
    status, shown = click(browser, chain, state)
    assert status == 200 and shown[(page.EDIT_STATUS, "children")] == ""


def test_save_refuses_an_input_unlike_the_chains_and_writes_nothing(served, group_dir):
    proc, browser, _chain, state = served
    before_bytes, before_peak = probes_bytes(group_dir), peak_kb(proc.pid)
    side = 600  # 360,000 values: 1.4 MB written per Save before the fix
    crafted = {**state, "shape": [side, side], "values": [0.0] * (side * side)}
    for _ in range(3):
        status, shown = save(browser, crafted)
        assert status == 200
        message = shown[(page.SAVE_STATUS, "children")]
        assert message.startswith("Not saved:") and "(1, 6, 6)" in message, message
    assert probes_bytes(group_dir) == before_bytes
    grown = peak_kb(proc.pid) - before_peak
    assert grown < ALLOWED_GROWTH_KB, f"the server's peak grew by {grown} kB"
    # a note beyond the bound is refused too
    status, shown = save(browser, state, note="n" * (store.MAX_NOTE_CHARS + 1))
    assert "at most 1000 characters" in shown[(page.SAVE_STATUS, "children")]
    assert probes_bytes(group_dir) == before_bytes
    # the real edit is saved: a batch of the chain's input, float32
    status, shown = save(browser, state, note="ok")
    probe_id = shown[(page.SAVED, "data")]["probe_id"]
    (probe,) = [p for p in open_group(group_dir).read_probes(TRIAL) if p.probe_id == probe_id]
    assert probe.shape == (1, 1, 6, 6) and probe.dtype == "float32"


def test_submit_input_checks_the_chains_input_and_the_trials_bounds(group_dir, tmp_path):
    group = open_group(group_dir)
    first = next(f for f in group.read_flows(TRIAL) if f.source == "input")
    good = np.zeros((1, 1, 6, 6), np.float32)
    with pytest.raises(ConfigurationError, match=r"shape \(batch, 1, 6, 6\)"):
        store.submit_input(group_dir, TRIAL, np.zeros((1, 6, 6), np.float32),
                           like=first.record_id)
    with pytest.raises(ConfigurationError, match="recorded as float32"):
        store.submit_input(group_dir, TRIAL, good.astype(np.float64), like=first.record_id)
    with pytest.raises(ConfigurationError, match="sample 1 is not in the edited batch"):
        store.submit_input(group_dir, TRIAL, good, sample=1, like=first.record_id)
    with pytest.raises(ConfigurationError, match="at most 4096"):
        store.submit_input(group_dir, TRIAL, good, rows={"conv2": list(range(5000))})
    # the bytes bound: saved inputs (as their request.json says) plus this one
    probes = group_dir / "trials" / TRIAL / "probes"
    big = probes / "p0000000000001-00000000"
    big.mkdir(parents=True)
    (big / store.REQUEST_JSON).write_text(json.dumps(
        {"shape": [store.MAX_PROBE_BYTES_PER_TRIAL // 4], "dtype": "float32"}))
    try:
        with pytest.raises(StorageError, match=r"bound of 256 MiB per trial"):
            store.submit_input(group_dir, TRIAL, good, like=first.record_id)
    finally:
        (big / store.REQUEST_JSON).unlink()
        big.rmdir()
    # the count bound: a trial of its own, filled up to it
    from tests.flow.helpers import record_trial

    other = record_trial(tmp_path, "g", "t", steps=1)
    for _ in range(store.MAX_PROBES_PER_TRIAL):
        (other / "trials" / "t" / "probes" / store.new_id("p")).mkdir(parents=True)
    with pytest.raises(StorageError, match="holds 500 saved inputs"):
        store.submit_input(other, "t", np.zeros(3, np.float32))
    assert os.listdir(other / "trials" / "t" / "probes").__len__() == 500


def test_row_requests_are_bounded_per_request_and_per_trial(group_dir):
    from comgra_like.format import flow_requests as fr

    group = open_group(group_dir)
    partial = next(f for f in group.read_flows(TRIAL) if f.status == "partial")
    units = [u for u in range(18) if u not in partial.rows]
    with pytest.raises(ConfigurationError, match="at most 1024 units per request"):
        fr.request_rows(group_dir, TRIAL, partial.record_id, range(fr.MAX_UNITS_PER_REQUEST + 1))
    folder = fr.requests_dir(group_dir, TRIAL)
    asked = [fr.request_rows(group_dir, TRIAL, partial.record_id, [units[k % len(units)]])
             for k in range(fr.MAX_PENDING_REQUESTS)]
    with pytest.raises(StorageError, match="64 row requests waiting for the serving process"):
        fr.request_rows(group_dir, TRIAL, partial.record_id, [units[0]])
    assert len(fr.pending_requests(group_dir, TRIAL)) == fr.MAX_PENDING_REQUESTS
    # one answered: room for one more
    fr.write_request_result(group_dir, TRIAL, asked[0], {"status": "failed", "error": "x"})
    fr.request_rows(group_dir, TRIAL, partial.record_id, [units[0]])
    for name in os.listdir(folder):
        if name.startswith("q"):
            (folder / name).unlink()
