#!/usr/bin/env python
"""Benchmark of the GUI on a large synthetic group, side by side in one run.

Usage::

    python benchmarks/benchmark_gui.py                      # 2 trials x 2,000 steps (built once)
    python benchmarks/benchmark_gui.py --steps 200          # quick run on a smaller group
    python benchmarks/benchmark_gui.py --group DIR          # an existing group folder
    python benchmarks/benchmark_gui.py --sections 2,3 --profile

Run it from the repository root with the package installed (``pip install -e .``); it
imports ``comgra_like`` and, from this folder, ``make_synthetic_group``.

The synthetic groups are built with ``benchmarks/make_synthetic_group.py`` (the real
recorder) and cached under ``--cache-dir`` (default ``$XDG_CACHE_HOME/comgra_like/
benchmark_gui``, i.e. ``~/.cache/...``): the first run takes a few minutes, reruns reuse
them. Every server is the real app (``create_app``) in a subprocess (this file with
``--serve``) on 127.0.0.1 and a free port, so its memory can be read from /proc. The
browser is Debian's headless Chromium driven by Selenium (the options of
tests/conftest.py); times in the browser are measured *in the page* (``performance.now()``
from the user's input event to the first animation frame that shows the result), so
Selenium's own latency is not part of them.

Sections (``--sections``, default all):

1. first render: page load (fresh session) until the dependency graph, the statistics
   and the values figure are drawn; median of ``--loads`` loads (the first is cold).
2. selector change, server side: the browser's own ``/_dash-update-component`` payloads
   (captured on page load) are replayed with a new step / node / iteration: the selection
   callback, then the callbacks it triggers in parallel, as the browser does. ~50 changes.
3. a large step (many iterations) not viewed before: server side (replayed payloads) and
   in the browser (typing the step into the step field, until every view is updated).
4. click-to-highlight on a 500-node graph (a second synthetic group, ``--click-nodes``):
   a real mouse click on a node (zoomed in first when the nodes are too dense to click)
   from the button's release until the selection ring sits on the node in the drawn
   figure; median of ``--clicks`` clicks.
5. refresh after 50 new steps of a running trial: the recorder writes the trial with
   ``flush_seconds=0`` and a flush per step (so every step is its own shards) into a
   staging folder; the files of 50 steps are then moved into the watched group at once
   (next to symlinks to the big trials). Measured: ``AppData.refresh`` on the server
   (``group.refresh()`` inside) and the time until the newest step is on the step
   slider in the browser (this includes waiting for the 2 s refresh interval).
6. server memory (VmRSS of the server process, from /proc) after its first view and while
   viewing 50 different steps, with the default cache limit and with ``--small-cache-mb``;
   the caches' own accounting is printed next to it.

``--profile`` (or a missed server-side target) runs cProfile around the replayed
callbacks in this process (Flask test client) and prints the hot spots.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import dataclasses
import http.client
import io
import json
import math
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from comgra_like.app import ids

SCRIPT_PATH = Path(__file__).resolve()
REPO_ROOT = SCRIPT_PATH.parent.parent

CHROME_BINARY = os.environ.get("DASH_TEST_CHROMEPATH", "/usr/bin/chromium")
# The options of tests/conftest.py (headless Debian Chromium, as root, offline).
CHROME_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--mute-audio",
]

TARGETS = {
    "first_render": 2.0,
    "selector_p95": 0.100,
    "unseen_large_step": 0.300,
    "click_highlight": 0.250,
}
REFERENCE = {  # comgra 0.11.5's GUI on its tutorial, measured on this machine
    "first_render": "2.2 s",
    "selector": "-",
    "unseen_large_step": "3.2 s",
    "click_highlight": "189 ms (~30 nodes)",
    "memory": "+57 MB per step viewed (no limit)",
}

UPDATE_URL = "/_dash-update-component"
SELECTION_OUTPUT = {"id": ids.SELECTION, "property": "data"}


# ======================================================================================
# small helpers
# ======================================================================================


def say(*parts: Any) -> None:
    print(*parts, flush=True)


def loadavg() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); the max for small samples."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def secs(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def rss_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in kB (psutil is not installed here)."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":", 1)
                out[name] = int(value.split()[0])
    return out


# ======================================================================================
# the synthetic groups
# ======================================================================================


def default_cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "comgra_like" / "benchmark_gui"


def synthetic_group(
    cache_dir: Path, trials: int, steps: int, nodes: int, long_every: int, long_iterations: int
) -> Path:
    """The cached group of these parameters; built first (into a temp folder) if missing."""
    name = f"synthetic-t{trials}-s{steps}-n{nodes}-every{long_every}x{long_iterations}"
    path = cache_dir / name
    if (path / "trials").is_dir():
        say(f"  reusing {path}")
        return path
    from make_synthetic_group import build

    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    say(f"  building {path} (the real recorder; cached for the next runs) ...")
    started = time.perf_counter()
    try:
        build(staging / name, trials, steps, nodes, long_every, long_iterations)
        os.replace(staging / name, path)  # atomic: an interrupted build is never reused
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"  built in {time.perf_counter() - started:.0f} s")
    return path


def group_steps(group: Path, trial: str) -> dict[int, int]:
    """training step -> number of iterations, read through the query API."""
    from comgra_like.query import open_group

    frame = open_group(group).list_steps(trial)
    return {
        int(s): int(n) for s, n in frame.groupby("training_step")["iteration"].nunique().items()
    }


# ======================================================================================
# the server subprocess (``--serve``)
# ======================================================================================


def serve(path: str, cache_mb: float, refresh_seconds: float, prefetch: bool = True) -> None:
    """Run the real app on a free port of 127.0.0.1; print ``PORT n``; add /_bench routes."""
    import ctypes
    import gc
    import logging

    import pyarrow as pa
    from comgra_like.app import create_app
    from flask import jsonify
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # --no-prefetch: what the neighbour prefetch costs the view callbacks
    app = create_app(
        path,
        cache_bytes=int(cache_mb * 2**20),
        refresh_seconds=refresh_seconds,
        prefetch=prefetch,
    )
    data, timings = app.comgra_parts.data, app.comgra_parts.timings

    def refreshes() -> list[dict]:
        return [dataclasses.asdict(r) for r in data.refreshes()]

    # Extra routes on the app's Flask server, for this script only.
    @app.server.route("/_bench/state")
    def bench_state():
        caches = data.cache_usage()
        return jsonify(
            {
                "pid": os.getpid(),
                "memory_kb": rss_kb(os.getpid()),
                "cache_bytes": caches["bytes"],
                "cache_limit": caches["limit"],
                "arrow_bytes": pa.total_allocated_bytes(),
                "arrow_pool": pa.default_memory_pool().backend_name,
                "python_blocks": sys.getallocatedblocks(),
                "timings": timings.summary(),
                "refreshes": refreshes(),
            }
        )

    @app.server.route("/_bench/trim", methods=["POST"])
    def bench_trim():
        # Give freed memory back to the OS, so that RSS shows what is alive: Python's
        # garbage, Arrow's pool (mimalloc keeps freed pages) and glibc's heap.
        gc.collect()
        pa.default_memory_pool().release_unused()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        return jsonify({"memory_kb": rss_kb(os.getpid())})

    @app.server.route("/_bench/refresh", methods=["POST"])
    def bench_refresh():
        t = time.perf_counter()
        status = data.refresh(force=True)
        seconds = time.perf_counter() - t
        last = data.refreshes()[-1]
        return jsonify(
            {
                "seconds": seconds,
                "group_seconds": last.group_seconds,
                "version": status.version,
            }
        )

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    print(f"PORT {server.server_port}", flush=True)
    server.serve_forever()


class Server:
    """The app in a subprocess of this script (so its memory is its own)."""

    def __init__(
        self,
        group: Path,
        log_dir: Path,
        *,
        cache_mb: float = 256,
        refresh_seconds: float = 2.0,
        label: str = "server",
        prefetch: bool = True,
    ):
        self.label = label
        self.log_path = log_dir / f"{label}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open while the server runs
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT_PATH),
                "--serve",
                str(group),
                "--cache-mb",
                str(cache_mb),
                "--refresh",
                str(refresh_seconds),
                *([] if prefetch else ["--no-prefetch"]),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=str(REPO_ROOT),
        )
        self.port = None
        line = self.proc.stdout.readline().decode()  # blocks until the server listens
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(
                f"the {label} did not start; see {self.log_path}:\n{self.log_path.read_text()}"
            )
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def memory(self) -> dict[str, int]:
        return rss_kb(self.proc.pid)

    def get(self, path: str) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("GET", path)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def post(self, path: str, body: Any = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(
                "POST",
                path,
                body=json.dumps(body or {}),
                headers={"Content-Type": "application/json"},
            )
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # our own child, by its pid
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ======================================================================================
# the browser
# ======================================================================================

# Injected into every document before its own scripts (CDP), so it sees the whole load:
# records the app's callback requests (and, while ``capture`` is on, their payloads and
# responses), user input events, and "watchers": conditions polled once per animation
# frame, whose first true frame is the moment the result is visible.
PAGE_PROBE = r"""
(function () {
  if (window.__bench) { return; }
  var B = window.__bench = {fetches: [], capture: true, watchers: [], lastInput: {},
                            firstRender: null, firstRenderParts: {}};
  var originalFetch = window.fetch;
  window.fetch = function (input, init) {
    var url = String(input && input.url ? input.url : input);
    if (url.indexOf('_dash-update-component') < 0) { return originalFetch.apply(this, arguments); }
    var rec = {url: url, t0: performance.now(), t1: null, status: null,
               body: B.capture && init ? init.body : null, response: null, output: null};
    try { rec.output = JSON.parse(init.body).output; } catch (e) {}
    B.fetches.push(rec);
    return originalFetch.apply(this, arguments).then(function (r) {
      rec.status = r.status;
      if (B.capture) {
        return r.clone().text().then(function (t) { rec.response = t; rec.t1 = performance.now(); return r; });
      }
      rec.t1 = performance.now();
      return r;
    }, function (e) { rec.t1 = performance.now(); rec.error = String(e); throw e; });
  };
  B.idleSince = function (t0) {
    for (var i = B.fetches.length - 1; i >= 0; i--) {
      var f = B.fetches[i];
      if (f.t0 >= t0 && f.t1 === null) { return false; }
    }
    return true;
  };
  B.requestsSince = function (t0) {
    return B.fetches.filter(function (f) { return f.t0 >= t0; }).length;
  };
  B.graph = function (domId) {
    var box = document.getElementById(domId);
    return box ? box.querySelector('.js-plotly-plot') : null;
  };
  B.headerValue = function (label) {
    var e = document.querySelector('#value-header .hdr-item[data-label="' + label + '"] .hdr-value');
    return e ? e.textContent : null;
  };
  // A watcher waits for its trigger (an input event type, or 'now'), then reports for
  // each named condition the time from the trigger to the first frame it holds.
  B.arm = function (trigger, conditions) {
    var w = {trigger: trigger, t0: trigger === 'now' ? performance.now() : null,
             wall0: trigger === 'now' ? Date.now() : null, results: {}, wall: {}, done: false,
             conditions: {}};
    Object.keys(conditions).forEach(function (name) {
      w.conditions[name] = new Function('t0', conditions[name]);
    });
    B.watchers.push(w);
    return B.watchers.length - 1;
  };
  function onInput(event) {
    var kind = event.type === 'keydown' ? 'key:' + event.key : event.type;
    B.lastInput[kind] = event.timeStamp;
    B.watchers.forEach(function (w) {
      if (w.t0 === null && w.trigger === kind) { w.t0 = event.timeStamp; w.wall0 = Date.now(); }
    });
  }
  ['mousedown', 'mouseup', 'keydown'].forEach(function (type) {
    document.addEventListener(type, onInput, true);
  });
  function graphDrawn() {
    var box = document.getElementById('dependency-graph-container');
    return !!(box && box.querySelector('.scatterlayer .point'));
  }
  function valuesDrawn() {
    var stats = document.querySelector('#stats-table tr');
    var gd = B.graph('neuron-values');
    return !!(stats && gd && gd.data && gd.data.length && gd._fullLayout &&
              gd.querySelector('.main-svg'));
  }
  function frame() {
    var now = performance.now();
    if (!B.plotlyReady && window.Plotly) { B.plotlyReady = now; }
    if (B.firstRender === null) {
      if (!B.firstRenderParts.graph && graphDrawn()) { B.firstRenderParts.graph = now; }
      if (!B.firstRenderParts.values && valuesDrawn()) { B.firstRenderParts.values = now; }
      if (B.firstRenderParts.graph && B.firstRenderParts.values) { B.firstRender = now; }
    }
    B.watchers.forEach(function (w) {
      if (w.done || w.t0 === null) { return; }
      var pending = 0;
      Object.keys(w.conditions).forEach(function (name) {
        if (w.results[name] !== undefined) { return; }
        var ok = false;
        try { ok = w.conditions[name](w.t0); } catch (e) { ok = false; }
        if (ok) { w.results[name] = now - w.t0; w.wall[name] = Date.now(); } else { pending++; }
      });
      if (!pending) { w.done = true; }
    });
    requestAnimationFrame(frame);
  }
  requestAnimationFrame(frame);
})();
"""

# Condition snippets for watchers (bodies of ``function (t0) {...}``).
IDLE = "B.idleSince(t0) && B.requestsSince(t0) > 0"


def cond(body: str) -> str:
    return "var B = window.__bench; " + body


class Browser:
    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        options = Options()
        options.binary_location = CHROME_BINARY
        for arg in CHROME_ARGS:
            options.add_argument(arg)
        driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
        self.driver = webdriver.Chrome(service=Service(driver_path), options=options)
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PAGE_PROBE})

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, script: str, *args: Any, timeout: float = 60, what: str = "") -> Any:
        end = time.monotonic() + timeout
        while True:
            value = self.js(script, *args)
            if value:
                return value
            if time.monotonic() > end:
                raise TimeoutError(f"timed out waiting for {what or script[:80]}")
            time.sleep(0.03)

    def load(self, url: str, fresh_session: bool = True) -> dict:
        """Open ``url``; wait for the first render; return the page's timings (ms)."""
        if fresh_session:
            # the selection store lives in the tab's session storage (of the app's origin)
            self.js("try { sessionStorage.clear(); } catch (e) {}")
            self.driver.get("about:blank")
            with contextlib.suppress(Exception):  # about:blank may refuse: nothing to delete
                self.driver.delete_all_cookies()
        self.driver.get(url)
        self.wait("return window.__bench && window.__bench.firstRender", what="first render")
        return self.js(
            """
            var B = window.__bench, nav = performance.getEntriesByType('navigation')[0];
            var res = performance.getEntriesByType('resource');
            var plotly = res.filter(function (r) { return r.name.indexOf('plotly') >= 0; })[0];
            var dash = res.filter(function (r) { return r.name.indexOf('dash_renderer') >= 0; })[0];
            var calls = B.fetches.map(function (f) {
              var out = null;
              try { out = JSON.parse(f.body).output; } catch (e) {}
              return {output: out, t0: f.t0, t1: f.t1};
            });
            return {first_render: B.firstRender, graph: B.firstRenderParts.graph,
                    values: B.firstRenderParts.values,
                    dom_content_loaded: nav ? nav.domContentLoadedEventEnd : null,
                    plotly_loaded: plotly ? plotly.responseEnd : null,
                    plotly_ready: B.plotlyReady || null,
                    renderer_loaded: dash ? dash.responseEnd : null, calls: calls};
            """
        )

    def captured(self) -> list[dict]:
        """The callback requests of this page (after they all answered and 0.5 s passed)."""
        self.wait(
            "var B = window.__bench, last = 0;"
            "for (var i = 0; i < B.fetches.length; i++) {"
            "  if (B.fetches[i].t1 === null) { return false; }"
            "  last = Math.max(last, B.fetches[i].t1); }"
            "return performance.now() - last > 500;",
            what="the page's callbacks to finish",
        )
        return self.js(
            "return window.__bench.fetches.filter(function (f) { return f.body && f.t1; })"
            ".map(function (f) { return {body: f.body, response: f.response, status: f.status,"
            " t0: f.t0, t1: f.t1}; });"
        )

    def set_capture(self, on: bool) -> None:
        self.js("window.__bench.capture = arguments[0];", bool(on))

    def arm(self, trigger: str, conditions: dict[str, str]) -> int:
        return self.js(
            "return window.__bench.arm(arguments[0], arguments[1]);",
            trigger,
            {k: cond(v) for k, v in conditions.items()},
        )

    def watcher(self, index: int, timeout: float = 60) -> dict:
        """Wait until every condition of watcher ``index`` held; its times in seconds."""
        try:
            w = self.wait(
                "var w = window.__bench.watchers[arguments[0]]; return w.done ? w : null;",
                index,
                timeout=timeout,
                what="the page to show the result",
            )
        except TimeoutError as exc:
            state = self.js(
                "var B = window.__bench, w = B.watchers[arguments[0]];"
                "return {trigger: w.trigger, t0: w.t0, results: w.results,"
                " header: (document.querySelector('#value-header') || {}).textContent,"
                " pending: B.fetches.filter(function (f) { return f.t1 === null; }).length};",
                index,
            )
            raise TimeoutError(f"{exc}: {state}") from None
        calls = self.js(
            "var B = window.__bench, t0 = B.watchers[arguments[0]].t0;"
            "return B.fetches.filter(function (f) { return f.t0 >= t0; }).map(function (f) {"
            " return [f.output, (f.t0 - t0) / 1000, (f.t1 - t0) / 1000]; });",
            index,
        )
        return {
            "calls": [(_short_output(o or "?"), a, b) for o, a, b in calls],
            "times": {k: v / 1000 for k, v in w["results"].items()},
            "wall": {k: v / 1000 for k, v in w["wall"].items()},
            "wall0": (w["wall0"] or 0) / 1000,
        }

    def mouse_click(self, x: float, y: float, hover_seconds: float = 0.15) -> None:
        """A real mouse click at viewport coordinates (moves there first, like a user)."""
        send = self.driver.execute_cdp_cmd
        send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        time.sleep(hover_seconds)
        for kind in ("mousePressed", "mouseReleased"):
            send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )

    def quit(self) -> None:
        self.driver.quit()


# ======================================================================================
# replaying the browser's callback requests (server time of a selector change)
# ======================================================================================


class HttpTransport:
    def __init__(self, port: int):
        self.port = port
        self._local = threading.local()

    def post(self, body: dict) -> tuple[int, Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=300
            )
        data = json.dumps(body)
        try:
            conn.request(
                "POST", UPDATE_URL, body=data, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
        except (ConnectionError, http.client.HTTPException):
            conn.close()
            conn = self._local.conn = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=300
            )
            conn.request(
                "POST", UPDATE_URL, body=data, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
        raw = response.read()
        if response.status >= 400:
            raise RuntimeError(f"callback failed: HTTP {response.status}: {raw[:2000]!r}")
        return response.status, (json.loads(raw) if raw else None)


class FlaskTransport:
    """The same requests through Flask's test client, in this process (for cProfile)."""

    def __init__(self, app: Any):
        self.client = app.server.test_client()

    def post(self, body: dict) -> tuple[int, Any]:
        response = self.client.post(UPDATE_URL, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"callback failed: HTTP {response.status_code}")
        return response.status_code, (response.get_json() if response.data else None)


def _prop_key(component_id: Any, prop: str) -> tuple[str, str]:
    return ids.dom_id(component_id), prop


class Replayer:
    """A minimal stand-in for the Dash renderer: it knows the page's components (from the
    captured requests), keeps their property values up to date from the responses, and
    sends what the browser sends when the user changes a selector."""

    def __init__(self, captured: list[dict], transport: Any, parallel: bool = True):
        self.transport = transport
        self.parallel = parallel
        self.templates: dict[str, dict] = {}
        self.props: dict[tuple[str, str], Any] = {}
        events = []
        for rec in captured:
            body = json.loads(rec["body"])
            self.templates[body["output"]] = body
            events.append((rec["t0"], 0, body))
            if rec.get("response") and rec.get("status") == 200:
                events.append((rec["t1"], 1, json.loads(rec["response"])))
        for _, kind, payload in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == 0:
                for entry in _flat(payload.get("inputs", []) + payload.get("state", [])):
                    if "value" in entry:
                        self.props[_prop_key(entry["id"], entry["property"])] = entry["value"]
            else:
                self.apply(payload)
        self.selection_template = next(
            (
                b
                for b in self.templates.values()
                if isinstance(b["outputs"], list) and b["outputs"][0] == SELECTION_OUTPUT
            ),
            None,
        )
        if self.selection_template is None:
            raise RuntimeError("the page load did not call the selection callback")
        self.view_templates = [
            b
            for b in self.templates.values()
            if b is not self.selection_template
            and any(
                e.get("id") == ids.SELECTION and e.get("property") == "data"
                for e in _flat(b.get("inputs", []))
            )
        ]
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.view_templates)))

    # --- the renderer's side --------------------------------------------------------

    def apply(self, response: dict | None) -> None:
        if not response:
            return
        for dom, values in (response.get("response") or {}).items():
            for prop, value in values.items():
                if isinstance(value, dict) and "__dash_patch_update" in value:
                    continue  # figure patches; no callback reads the figures
                self.props[(dom, prop)] = value

    def fill(self, template: dict, changed: list[str]) -> dict:
        body = copy.deepcopy(template)

        def fill_entries(entries: list) -> list:
            out = []
            for entry in entries:
                if isinstance(entry, list):
                    out.append(fill_entries(entry))
                    continue
                new = {"id": entry["id"], "property": entry["property"]}
                key = _prop_key(entry["id"], entry["property"])
                if key in self.props:
                    new["value"] = self.props[key]
                out.append(new)
            return out

        body["inputs"] = fill_entries(body.get("inputs", []))
        if "state" in body:
            body["state"] = fill_entries(body["state"])
        body["changedPropIds"] = list(changed)
        body["parsedChangedPropsIds"] = list(changed)
        return body

    def value(self, component_id: Any, prop: str) -> Any:
        return self.props.get(_prop_key(component_id, prop))

    @property
    def selection(self) -> dict:
        return self.props.get((ids.SELECTION, "data")) or {}

    def options(self, field: str) -> list:
        return [o["value"] for o in self.value(ids.selector(field), "options") or []]

    # --- one user action ------------------------------------------------------------

    def _post(self, body: dict) -> tuple[float, Any]:
        t = time.perf_counter()
        _status, response = self.transport.post(body)
        return time.perf_counter() - t, response

    def change(self, component_id: Any, prop: str, value: Any) -> dict:
        """The user sets ``prop`` of ``component_id``; returns the server times (s)."""
        key = _prop_key(component_id, prop)
        self.props[key] = value
        before = self.selection
        started = time.perf_counter()
        t_sel, response = self._post(self.fill(self.selection_template, [f"{key[0]}.{key[1]}"]))
        self.apply(response)
        times = {"selection": t_sel}
        if self.selection != before:
            views = [
                (b["output"], self.fill(b, [f"{ids.SELECTION}.data"])) for b in self.view_templates
            ]
            run = self._pool.map if self.parallel else map
            results = list(run(lambda v: (v[0], *self._post(v[1])), views))
            for output, seconds, response in results:
                times[_short_output(output)] = seconds
                self.apply(response)
        times["total"] = time.perf_counter() - started
        return times

    def set_step(self, step: int) -> dict:
        return self.change(ids.step_input(), "value", int(step))

    def set_field(self, field: str, value: Any) -> dict:
        return self.change(ids.selector(field), "value", value)

    def close(self) -> None:
        self._pool.shutdown()


def _flat(entries: list) -> list[dict]:
    out = []
    for entry in entries:
        out.extend(_flat(entry) if isinstance(entry, list) else [entry])
    return out


def _short_output(output: str) -> str:
    for name, marker in (
        ("graph", "dependency-graph"),
        ("values", ids.VALUE_HEADER),
        ("series", "series-graph"),
        ("selection", "..selection.data.."),
    ):
        if marker in output:
            return name
    return output[:40]


# ======================================================================================
# the plan: which steps each section may view (each "unseen" step is used once)
# ======================================================================================


class Plan:
    def __init__(self, steps: dict[int, int], seed: int = 0):
        self.rng = random.Random(seed)
        self.long = [s for s, n in sorted(steps.items()) if n > 1]
        ordered = sorted(steps)
        near_long = set()
        for s in self.long:
            i = ordered.index(s)
            near_long.update(ordered[max(0, i - 2) : i + 3])  # the prefetch reads neighbours
        self.short = [s for s in ordered if steps[s] == 1 and s not in near_long]
        self.rng.shuffle(self.long)
        self.rng.shuffle(self.short)
        self._all_short = (
            tuple(self.short) or tuple(s for s in ordered if steps[s] == 1) or tuple(ordered)
        )
        self.iterations = steps

    def take_long(self, n: int) -> list[int]:
        taken, self.long = self.long[:n], self.long[n:]
        return taken

    def take_short(self, n: int) -> list[int]:
        if len(self.short) < n:  # a small group: view some steps again
            again = list(self._all_short)
            self.rng.shuffle(again)
            self.short += again * (1 + n // max(1, len(again)))
        taken, self.short = self.short[:n], self.short[n:]
        return taken


# ======================================================================================
# the sections
# ======================================================================================


class Results:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.missed: list[str] = []

    def add(
        self, metric: str, value: str, target: str = "", reference: str = "", ok: bool | None = None
    ) -> None:
        verdict = "" if ok is None else ("ok" if ok else "MISSED")
        if ok is False:
            self.missed.append(metric)
        self.rows.append((metric, value, target, reference, verdict))

    def print(self) -> None:
        header = ("measure", "measured", "target", "comgra 0.11.5", "")
        widths = [max(len(r[i]) for r in [header, *self.rows]) for i in range(5)]
        line = "  ".join("-" * w for w in widths)
        say(line)
        for row in [header, None, *self.rows]:
            if row is None:
                say(line)
                continue
            say("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        say(line)


def section_first_render(browser: Browser, server: Server, loads: int, res: Results) -> None:
    say(f"\n[1] first render: {loads} page loads, fresh session each (load {loadavg()})")
    timings = []
    for i in range(loads):
        t = browser.load(server.url + "/")
        timings.append(t)
        calls = [c for c in t["calls"] if c["t1"]]
        server_ms = sum(c["t1"] - c["t0"] for c in calls)
        say(
            f"  load {i + 1}: first render {t['first_render']:.0f} ms (graph {t['graph']:.0f}, "
            f"values {t['values']:.0f}; DOMContentLoaded {t['dom_content_loaded']:.0f}, "
            f"plotly.js loaded {t['plotly_loaded'] or 0:.0f}, evaluated {t['plotly_ready'] or 0:.0f}; "
            f"{len(calls)} callback requests, "
            f"{server_ms:.0f} ms summed round trips)"
        )
    values = [t["first_render"] / 1000 for t in timings]
    warm = median(values[1:]) if len(values) > 1 else values[0]
    res.add(
        "1. first render (median of loads)",
        secs(median(values)),
        f"<= {TARGETS['first_render']:.0f} s",
        REFERENCE["first_render"],
        median(values) <= TARGETS["first_render"],
    )
    res.add("   first load (cold) / median of the others", f"{secs(values[0])} / {secs(warm)}")
    timeline = timings[len(timings) // 2]
    say("  timeline of a typical load (ms since navigation start):")
    for c in timeline["calls"]:
        if c["t1"]:
            say(f"    {c['t0']:7.0f} -> {c['t1']:7.0f}  {_short_output(c['output'] or '?')}")


def section_selector_changes(
    replay: Replayer, plan: Plan, n: int, res: Results, server: Server | None
) -> list[dict]:
    say(f"\n[2] selector change, server side: {n} changes replayed (load {loadavg()})")
    n_nodes = max(1, n // 4)
    n_iterations = max(1, n // 5)
    n_steps = n - n_nodes - n_iterations
    steps = plan.take_short(n_steps + 2)
    # warm up (imports, first figure of this structure): not timed
    replay.set_step(steps.pop())
    replay.set_step(steps.pop())
    samples: list[tuple[str, dict]] = []
    nodes_every = max(1, n_steps // n_nodes)
    for i, step in enumerate(steps):
        samples.append(("step", replay.set_step(step)))
        if i % nodes_every == nodes_every - 1 and sum(k == "node" for k, _ in samples) < n_nodes:
            current = replay.selection.get("current", {}).get("node")
            choices = [o for o in replay.options("node") if o != current]
            samples.append(("node", replay.set_field("node", plan.rng.choice(choices))))
    # iterations: within one large step (its first view is section 3's business)
    long_steps = plan.take_long(1)
    if long_steps:
        replay.set_step(long_steps[0])
        iterations = [o for o in replay.options("iteration")]
        plan.rng.shuffle(iterations)
        for it in iterations[:n_iterations]:
            if it != replay.selection.get("current", {}).get("iteration"):
                samples.append(("iteration", replay.set_field("iteration", it)))
    totals = [t["total"] for _, t in samples]
    say(
        f"  {len(samples)} changes: median {ms(median(totals))}, p95 {ms(percentile(totals, 95))}, "
        f"max {ms(max(totals))}"
    )
    for kind in ("step", "node", "iteration"):
        part = [t["total"] for k, t in samples if k == kind]
        if part:
            say(
                f"    {kind:9s} x{len(part):2d}: median {ms(median(part))}, "
                f"p95 {ms(percentile(part, 95))}"
            )
    for name in ("selection", "graph", "values", "series"):
        part = [t[name] for _, t in samples if name in t]
        if part:
            say(
                f"    callback {name:9s}: median {ms(median(part))}, p95 {ms(percentile(part, 95))}"
                f" ({len(part)} calls)"
            )
    if server is not None:
        summary = server.get("/_bench/state")["timings"]
        inside = ", ".join(
            f"{k} {v['median_ms']:.0f}/{v['max_ms']:.0f}" for k, v in sorted(summary.items())
        )
        say(f"  inside the callbacks (the app's timings, median/max ms): {inside}")
    p95 = percentile(totals, 95)
    res.add("2. selector change, server (median)", ms(median(totals)))
    res.add(
        "   selector change, server (p95)",
        ms(p95),
        f"<= {TARGETS['selector_p95'] * 1000:.0f} ms",
        REFERENCE["selector"],
        p95 <= TARGETS["selector_p95"],
    )
    return [t for _, t in samples]


def section_large_step(
    replay: Replayer, browser: Browser | None, plan: Plan, n: int, res: Results
) -> None:
    say(f"\n[3] large step not viewed before (load {loadavg()})")
    server_times = []
    for step in plan.take_long(n):
        replay.set_step(plan.take_short(1)[0])  # come from an ordinary step (not timed)
        t = replay.set_step(step)
        server_times.append(t["total"])
        parts = ", ".join(f"{k} {ms(v)}" for k, v in t.items() if k != "total")
        say(
            f"  server, step {step} ({plan.iterations[step]} iterations): {ms(t['total'])} "
            f"({parts})"
        )
    if server_times:
        res.add("3. unseen large step, server (median)", ms(median(server_times)))
    if browser is None:
        return
    browser_times = []
    step_box = f"[id='{ids.dom_id(ids.step_input())}']"
    for step in plan.take_long(n):
        _type_step(browser, step_box, plan.take_short(1)[0])  # not timed
        before = browser.js("return document.querySelector('#stats-table').textContent")
        element = _type_into(browser, step_box, str(step))
        watcher = browser.arm(
            "key:Enter",
            {
                "shown": f"return B.headerValue('step') === '{step}' && "
                f"document.querySelector('#stats-table').textContent !== {json.dumps(before)}"
                f" && {IDLE};",
            },
        )
        element.send_keys("\n")
        w = browser.watcher(watcher)
        t = w["times"]["shown"]
        browser_times.append(t)
        calls = ", ".join(
            f"{name} {a * 1000:.0f}-{b * 1000:.0f}"
            for name, a, b in w["calls"]
            if name != "data-status.data"
        )
        say(
            f"  browser, step {step}: {ms(t)} from Enter until every view shows it "
            f"(requests, ms after Enter: {calls})"
        )
    if not browser_times:
        say("  no unseen step with more than one iteration left for the browser")
        return
    value = median(browser_times)
    res.add(
        "   unseen large step, browser (median)",
        ms(value),
        f"<= {TARGETS['unseen_large_step'] * 1000:.0f} ms",
        REFERENCE["unseen_large_step"],
        value <= TARGETS["unseen_large_step"],
    )


def _type_into(browser: Browser, selector: str, text: str) -> Any:
    """Select the field's text and type over it, as a user does (not submitted yet)."""
    from selenium.webdriver.common.keys import Keys

    element = browser.driver.find_element("css selector", selector)
    element.send_keys(Keys.CONTROL, "a")
    element.send_keys(text)
    typed = element.get_attribute("value")
    if typed != text:
        raise RuntimeError(f"typing {text!r} into the step field gave {typed!r}")
    return element


def _type_step(browser: Browser, step_box: str, step: int) -> None:
    element = _type_into(browser, step_box, str(step))
    watcher = browser.arm(
        "key:Enter", {"shown": f"return B.headerValue('step') === '{step}' && {IDLE};"}
    )
    element.send_keys("\n")
    browser.watcher(watcher)


GRAPH_POINTS_JS = """
var gd = window.__bench.graph(arguments[0]);
var xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
var box = gd.getBoundingClientRect(), points = [];
gd.data.forEach(function (trace, t) {
  if (!trace.customdata || !trace.mode || trace.mode.indexOf('markers') < 0) { return; }
  for (var i = 0; i < trace.customdata.length; i++) {
    var px = xa.l2p(trace.x[i]), py = ya.l2p(trace.y[i]);
    points.push({name: trace.customdata[i], x: trace.x[i], y: trace.y[i],
                 px: box.left + xa._offset + px, py: box.top + ya._offset + py,
                 inside: px > 5 && px < xa._length - 5 && py > 5 && py < ya._length - 5});
  }
});
return {points: points, width: box.width, height: box.height,
        xrange: xa.range, yrange: ya.range};
"""


def _graph_points(browser: Browser, graph_dom: str) -> dict:
    info = browser.js(GRAPH_POINTS_JS, graph_dom)
    for p in info["points"]:
        p["gap"] = min(
            (
                ((p["px"] - q["px"]) ** 2 + (p["py"] - q["py"]) ** 2) ** 0.5
                for q in info["points"]
                if q is not p
            ),
            default=1e9,
        )
    return info


def section_click(
    browser: Browser, server: Server, clicks: int, res: Results, seed: int = 0, main: bool = True
) -> None:
    """``main``: the graph of the target (else a comparison: no target in the table)."""
    browser.load(server.url + "/")
    graph_dom = ids.GRAPH_CONTAINER
    info = _graph_points(browser, graph_dom)
    points = info["points"]
    gap = median([p["gap"] for p in points])
    say(
        f"\n[4] click-to-highlight: {len(points)} nodes in a {info['width']:.0f}x"
        f"{info['height']:.0f} px graph, {clicks} clicks (load {loadavg()})"
        + ("" if main else "; for comparison, the graph of the main group")
    )
    zoom = 1.0
    if gap < 14:
        # Too dense to click at the initial zoom: zoom in around the middle node, as a user
        # would (the figure, and so the cost of a highlight, stays the whole graph).
        zoom = min(40.0, 16 / max(gap, 0.5))
        middle = sorted(points, key=lambda p: p["x"])[len(points) // 2]
        (x0, x1), (y0, y1) = info["xrange"], info["yrange"]
        half_x, half_y = (x1 - x0) / (2 * zoom), (y1 - y0) / (2 * zoom)
        browser.driver.execute_async_script(
            "var done = arguments[arguments.length - 1];"
            "Plotly.relayout(window.__bench.graph(arguments[0]), {'xaxis.range': arguments[1],"
            " 'yaxis.range': arguments[2]}).then(function () {"
            " requestAnimationFrame(function () { done(true); }); });",
            graph_dom,
            [middle["x"] - half_x, middle["x"] + half_x],
            [middle["y"] - half_y, middle["y"] + half_y],
        )
        info = _graph_points(browser, graph_dom)
        say(
            f"  nodes are {gap:.1f} px apart at the initial zoom: zoomed in {zoom:.0f}x "
            f"({sum(p['inside'] for p in info['points'])} nodes in view)"
        )
    # clickable: in view and at least 10 px from every other node
    clickable = [p for p in info["points"] if p["inside"] and p["gap"] >= 10]
    rng = random.Random(seed)
    rng.shuffle(clickable)
    highlight_times, values_times, wrong = [], [], 0
    phases: list[dict] = []
    current = None
    for p in clickable[: clicks + 1]:
        if p["name"] == current:
            continue
        watcher = browser.arm(
            "mouseup",
            {
                "highlight": (
                    f"var gd = B.graph('{graph_dom}'); var r = (gd._fullData || []).filter("
                    "function (t) { return t.name === 'selected'; })[0];"
                    f"return !!(r && r.x && r.x.length === 1 && Math.abs(r.x[0] - {p['x']}) < 1e-9"
                    f" && Math.abs(r.y[0] - {p['y']}) < 1e-9);"
                ),
                "values": f"return B.headerValue('node') === {json.dumps(p['name'])} && {IDLE};",
            },
        )
        browser.mouse_click(p["px"], p["py"])
        try:
            w = browser.watcher(watcher, timeout=20)
        except TimeoutError:
            wrong += 1
            continue
        t = w["times"]
        current = p["name"]
        if len(highlight_times) < clicks:
            highlight_times.append(t["highlight"])
            values_times.append(t["values"])
            phases.append({name: (a, b) for name, a, b in w["calls"]})
    if not highlight_times:
        raise RuntimeError(f"no click selected its node ({len(clickable)} clickable nodes)")
    say(
        f"  highlight drawn: median {ms(median(highlight_times))}, "
        f"max {ms(max(highlight_times))}; values shown: median {ms(median(values_times))}"
        + (f"; {wrong} clicks did not select their node" if wrong else "")
    )
    say("  all: " + ", ".join(f"{x * 1000:.0f}" for x in highlight_times) + " ms")
    timeline = []
    for name in ("selection", "graph", "values", "series"):
        starts = [ph[name][0] for ph in phases if name in ph]
        ends = [ph[name][1] for ph in phases if name in ph]
        if starts:
            timeline.append(f"{name} {median(starts) * 1000:.0f}-{median(ends) * 1000:.0f}")
    say(
        "  median timeline after the mouse button's release (request sent - answer received, "
        "ms): " + ", ".join(timeline) + f"; highlight drawn {median(highlight_times) * 1000:.0f}"
    )
    summary = server.get("/_bench/state")["timings"]
    if "graph_patch" in summary:
        say(
            f"  server: highlight patch {summary['graph_patch']['median_ms']:.1f} ms median, "
            f"selection callback {summary['selection']['median_ms']:.0f} ms median"
        )
    value = median(highlight_times)
    if not main:
        res.add(f"   click-to-highlight, {len(points)} nodes (median)", ms(value))
        return
    res.add(
        f"4. click-to-highlight, {len(points)} nodes (median)",
        ms(value),
        f"<= {TARGETS['click_highlight'] * 1000:.0f} ms",
        REFERENCE["click_highlight"],
        value <= TARGETS["click_highlight"],
    )


# --- section 5: a running trial gets 50 new steps -------------------------------------


LIVE_TRIAL = "000-live"  # sorts first: the trial the GUI opens with


class LiveTrial:
    """A running trial recorded in advance (every step flushed to its own shards) and
    published into a group batch by batch: moving the files of 50 steps in at once."""

    def __init__(
        self,
        work: Path,
        big_group: Path,
        nodes: int,
        batches: int,
        per_batch: int,
        initial: int = 10,
    ):
        import torch
        from make_synthetic_group import Chain

        from comgra_like.objects import DecisionMakerForRecordingsHardcoded
        from comgra_like.recorder import ComgraRecorder

        self.group = work / "live-group"
        trials = self.group / "trials"
        trials.mkdir(parents=True)
        for trial in sorted((big_group / "trials").iterdir()):  # the big trials, as they are
            if trial.is_dir():
                (trials / trial.name).symlink_to(trial.resolve(), target_is_directory=True)
        staging_root = work / "staging"
        total = initial + batches * per_batch
        torch.manual_seed(0)
        width, batch = 16, 8
        net = Chain(max(1, (nodes - 4) // 3), width)
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        rec = ComgraRecorder(
            staging_root,
            "live-group",
            LIVE_TRIAL,
            DecisionMakerForRecordingsHardcoded(range(total)),
            max_num_batch_size_to_record=4,
            calculate_svd_and_other_expensive_operations_of_parameters=False,
        )
        rec.writer.flush_seconds = 0
        rec.track_module("net", net)
        self.staging = staging_root / "live-group" / "trials" / LIVE_TRIAL
        self.target = trials / LIVE_TRIAL
        seen: set[Path] = set()
        self.batches: list[list[Path]] = []
        self.last_step: list[int] = []
        started = time.perf_counter()
        for b in range(batches + 1):
            count = initial if b == 0 else per_batch
            first = 0 if b == 0 else initial + (b - 1) * per_batch
            for step in range(first, first + count):
                _record_step(rec, net, opt, step, batch, width)
                rec.writer.flush()  # the step's shards, without the KPIs kept back
            rec.flush()  # and the batch's KPIs
            files = {p for p in self.staging.rglob("*") if p.is_file()}
            self.batches.append(sorted(files - seen))
            seen |= files
            self.last_step.append(first + count - 1)
        rec.writer.close()  # not finalized: the trial stays "running", shards uncompacted
        self.record_seconds = time.perf_counter() - started
        self.shards = [sum(1 for p in b if p.suffix == ".parquet") for b in self.batches]

    def publish(self, batch: int) -> tuple[float, float]:
        """Move a batch in (data first, the step lists last); (wall start, wall end)."""
        order = {"graphs": 0, "tensors": 1, "kpis": 2, "steps": 3}
        files = sorted(
            self.batches[batch],
            key=lambda p: (order.get(p.relative_to(self.staging).parts[0], -1), p),
        )
        start = time.time()
        for path in files:
            dest = self.target / path.relative_to(self.staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
        return start, time.time()


def _record_step(rec: Any, net: Any, opt: Any, step: int, batch: int, width: int) -> None:
    from make_synthetic_group import record_step

    record_step(rec, net, opt, step, 1, batch, width)


def section_refresh(
    browser: Browser | None, big_group: Path, nodes: int, work: Path, rounds: int, res: Results
) -> None:
    per_batch = 50
    say(f"\n[5] refresh after {per_batch} new steps of a running trial (load {loadavg()})")
    live = LiveTrial(work, big_group, nodes, batches=1 + rounds, per_batch=per_batch)
    kinds = {}
    for path in live.batches[1]:
        kind = path.relative_to(live.staging).parts[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    say(
        f"  recorded {live.last_step[-1] + 1} steps in {live.record_seconds:.1f} s, each flushed "
        f"on its own: {live.shards[1]} parquet shards per {per_batch} steps ("
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + ")"
    )
    live.publish(0)
    server = Server(live.group, work, label="server-live")
    try:
        idle = [server.post("/_bench/refresh")["seconds"] for _ in range(5)]
        live.publish(1)
        after = server.post("/_bench/refresh")
        say(
            f"  AppData.refresh (group.refresh inside): nothing new {ms(median(idle))}; "
            f"{per_batch} new steps ({live.shards[1]} shards) {ms(after['seconds'])} "
            f"(group.refresh {ms(after['group_seconds'])})"
        )
        res.add(f"5. refresh, {per_batch} new steps (server)", ms(after["seconds"]), reference="")
        res.add("   refresh, nothing new (server)", ms(median(idle)))
        if browser is None:
            return
        browser.load(server.url + "/")
        shown = browser.js("return window.__bench.headerValue('trial');")
        if shown != LIVE_TRIAL:
            raise RuntimeError(f"the GUI opened trial {shown!r}, not the live trial {LIVE_TRIAL}")
        latencies = []
        for r in range(rounds):
            batch = 2 + r
            step = live.last_step[batch]
            watcher = browser.arm(
                "now",
                {
                    "step": "var m = document.querySelectorAll('.sel-slider .dash-slider-mark');"
                    f" return m.length > 0 && m[m.length - 1].textContent === '{step}';"
                },
            )
            start, end = live.publish(batch)
            w = browser.watcher(watcher, timeout=60)
            latency = w["wall"]["step"] - end
            latencies.append(latency)
            refreshes = server.get("/_bench/state")["refreshes"]
            before = max((x["version"] for x in refreshes if x["wall_time"] < start), default=0)
            found = next(
                (x for x in refreshes if x["wall_time"] >= start and x["version"] > before),
                None,
            )
            say(
                f"  round {r + 1}: {per_batch} steps moved in within {ms(end - start)}; step "
                f"{step} visible in the browser {secs(latency)} later"
                + (f" (the refresh that found it: {ms(found['seconds'])})" if found else "")
            )
        value = median(latencies)
        res.add(
            f"   new step visible in the browser (median of {rounds})",
            secs(value),
            "(refresh interval 2 s)",
        )
    finally:
        server.stop()


# --- section 6: memory -----------------------------------------------------------------


def _live_memory(server: Server) -> tuple[int, int]:
    """(RSS, RSS after gc and returning freed memory to the OS) of the server, in kB."""
    raw = server.memory()["VmRSS"]
    return raw, server.post("/_bench/trim")["memory_kb"]["VmRSS"]


def section_memory(
    group: Path,
    captured: list[dict],
    steps: dict[int, int],
    work: Path,
    small_mb: float,
    n: int,
    res: Results,
) -> None:
    say(f"\n[6] server memory while viewing {n} different steps (load {loadavg()})")
    rng = random.Random(1)
    ordered = sorted(steps)
    long = [s for s in ordered if steps[s] > 1]
    short = [s for s in ordered if steps[s] == 1]
    n_long = min(len(long), max(1, n // 5))
    first_step = short[len(short) // 2]  # not the step the captured page showed
    chosen = rng.sample(long, n_long) + rng.sample(
        [s for s in short if s != first_step], n - n_long
    )
    rng.shuffle(chosen)
    say(
        f"  {n_long} of the steps have {max(steps.values())} iterations; each server is new, "
        "and its first view computes every view, as a page load does"
    )
    rows = []
    for label, cache_mb in (("default", 256.0), ("small", small_mb)):
        server = Server(group, work, cache_mb=cache_mb, label=f"server-memory-{label}")
        try:
            idle = server.memory()["VmRSS"]
            replay = Replayer(captured, HttpTransport(server.port))
            for key in (ids.GRAPH_KEY, ids.VALUES_KEY, ids.SERIES_KEY):  # nothing shown yet
                replay.props.pop((key, "data"), None)
            if replay.selection.get("current", {}).get("training_step") == first_step:
                raise RuntimeError("the first view must change the step")
            replay.set_step(first_step)  # the first view (imports, figures, the series)
            first = server.get("/_bench/state")
            base = _live_memory(server)
            marks = []
            for i, step in enumerate(chosen, 1):
                replay.set_step(step)
                if i % 10 == 0 or i == len(chosen):
                    marks.append((i, *_live_memory(server)))
            state = server.get("/_bench/state")
            replay.close()
        finally:
            server.stop()
        mb = 2**20
        limit = state["cache_limit"] / mb
        used = state["cache_bytes"] / mb
        used_first = first["cache_bytes"] / mb
        growth = (marks[-1][1] - base[0]) / 1024
        live_growth = (marks[-1][2] - base[1]) / 1024
        say(f"  --cache-mb {cache_mb:g} (one cache for the query API and the app):")
        say(
            f"    RSS, MB (in brackets: after gc and giving freed memory back): idle server "
            f"{idle / 1024:.0f}; after the first view {base[0] / 1024:.0f} "
            f"({base[1] / 1024:.0f}), when the caches held {used_first:.1f} MB and Arrow "
            f"{first['arrow_bytes'] / mb:.0f} MB"
        )
        say(
            "    after "
            + ", ".join(f"{i} steps {a / 1024:.0f} ({b / 1024:.0f})" for i, a, b in marks)
            + f"; peak {state['memory_kb']['VmHWM'] / 1024:.0f}"
        )
        say(
            f"    cache at the end {used:.1f} MB; Arrow allocations "
            f"{state['arrow_bytes'] / mb:.0f} MB ({state['arrow_pool']})"
        )
        rows.append((label, cache_mb, used, used_first, limit, growth, live_growth))
    for label, cache_mb, used, used_first, limit, growth, live_growth in rows:
        res.add(
            f"6. memory, --cache-mb {cache_mb:g}: RSS growth, {len(chosen)} steps",
            f"{growth:+.0f} MB ({growth / len(chosen):+.1f} MB/step)",
            "",
            REFERENCE["memory"] if label == "default" else "",
        )
        res.add(
            "   the same after gc + returning freed memory",
            f"{live_growth:+.0f} MB ({live_growth / len(chosen):+.1f} MB/step)",
            f"<= {limit:.0f} MB",
            "",
            live_growth <= limit,
        )
        res.add(
            "   caches after the first view / at the end",
            f"{used_first:.0f} / {used:.0f} MB",
            f"<= {limit:.0f} MB",
            "",
            max(used_first, used) <= limit * 1.01,
        )


# --- profiling ---------------------------------------------------------------------------


def profile_server(group: Path, captured: list[dict], steps: dict[int, int], top: int) -> None:
    """cProfile around the replayed callbacks, in this process (Flask test client)."""
    from comgra_like.app import create_app

    say(
        f"\n[profile] the callbacks of selector changes and unseen large steps, in-process "
        f"(load {loadavg()})"
    )
    app = create_app(group)
    replay = Replayer(captured, FlaskTransport(app), parallel=False)  # one thread: profiled
    plan = Plan(steps, seed=7)
    rng = random.Random(7)

    def other_node() -> str:
        current = replay.selection.get("current", {}).get("node")
        return rng.choice([o for o in replay.options("node") if o != current])

    # (kind, untimed setup, profiled action)
    jobs: list[tuple[str, Callable[[], Any] | None, Callable[[], Any]]] = []
    for step in plan.take_short(10):
        jobs.append(("step change", None, lambda s=step: replay.set_step(s)))
        jobs.append(("node change", None, lambda: replay.set_field("node", other_node())))
    for step in plan.take_long(3):
        short = plan.take_short(1)[0]
        jobs.append(
            (
                "unseen large step",
                lambda s=short: replay.set_step(s),
                lambda s=step: replay.set_step(s),
            )
        )
    replay.set_step(plan.take_short(1)[0])
    for kind in ("step change", "node change", "unseen large step"):
        profiler = cProfile.Profile()
        count, wall = 0, 0.0
        for name, setup, action in jobs:
            if name != kind:
                continue
            if setup is not None:
                setup()
            started = time.perf_counter()
            profiler.enable()
            action()
            profiler.disable()
            wall += time.perf_counter() - started
            count += 1
        stats = pstats.Stats(profiler, stream=io.StringIO())
        say(
            f"\n  {kind}: {count} actions, {wall / max(count, 1) * 1000:.0f} ms per action "
            f"(selection and view callbacks one after the other, with the profiler's overhead);"
            f" top {top} by cumulative time:"
        )
        _print_hot(stats, top)
    replay.close()


def _print_hot(stats: pstats.Stats, top: int) -> None:
    site = str(Path(shutil.__file__).parent)
    rows = []
    for (path, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():
        short = path.replace(str(REPO_ROOT) + "/", "")
        short = short.split("site-packages/")[-1].replace(site + "/", "")
        rows.append((cumtime, tottime, ncalls, f"{short}:{line}({func})"))
    skip = (
        "dispatch",
        "wrapper",
        "add_context",
        "_invoke_callback",
        "<lambda>",
        "run",
        "_post",
        "change",
        "set_step",
        "post",
        "open",
        "full_dispatch_request",
    )
    shown = 0
    say(f"    {'cumulative':>10s} {'own':>8s} {'calls':>7s}  function")
    for cumtime, tottime, ncalls, name in sorted(rows, reverse=True):
        func = name.rsplit("(", 1)[-1].rstrip(")")
        if (
            func in skip
            or any(lib in name for lib in ("werkzeug", "flask/", "contextvars", "copy.py"))
            or name.startswith("benchmarks/benchmark_gui.py")
        ):
            continue
        say(f"    {cumtime:10.3f} {tottime:8.3f} {ncalls:7d}  {name}")
        shown += 1
        if shown >= top:
            break


# ======================================================================================
# main
# ======================================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--group", type=Path, help="an existing group folder (else a synthetic one)")
    p.add_argument("--steps", type=int, default=2000, help="recorded steps per trial (2000)")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--nodes", type=int, default=60, help="graph size of the main group (~60)")
    p.add_argument(
        "--long-every",
        type=int,
        default=None,
        help="every n-th step runs --long-iterations iterations "
        "(default 100, fewer for small --steps: at least 20 such steps)",
    )
    p.add_argument("--long-iterations", type=int, default=20)
    p.add_argument("--click-nodes", type=int, default=500, help="graph size for section 4")
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"where synthetic groups are kept (default {default_cache_dir()})",
    )
    p.add_argument("--sections", default="1,2,3,4,5,6", help="which sections to run (1-6)")
    p.add_argument("--loads", type=int, default=5, help="page loads for section 1")
    p.add_argument("--changes", type=int, default=50, help="selector changes for section 2")
    p.add_argument("--large-steps", type=int, default=5, help="unseen large steps for section 3")
    p.add_argument("--clicks", type=int, default=10, help="clicks for section 4")
    p.add_argument("--live-rounds", type=int, default=3, help="browser rounds for section 5")
    p.add_argument("--memory-steps", type=int, default=50, help="steps viewed for section 6")
    p.add_argument("--small-cache-mb", type=float, default=32, help="the small cache of section 6")
    p.add_argument(
        "--profile",
        action="store_true",
        help="always profile the server side (else only when a target is missed)",
    )
    p.add_argument("--no-profile", action="store_true", help="never profile")
    p.add_argument("--profile-top", type=int, default=25)
    p.add_argument(
        "--no-prefetch",
        action="store_true",
        help="turn off the server's prefetch of neighbouring steps (sections 1-3, to see "
        "what it costs the callbacks)",
    )
    # internal: run one server
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--cache-mb", type=float, default=256, help=argparse.SUPPRESS)
    p.add_argument("--refresh", type=float, default=2.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve, args.cache_mb, args.refresh, prefetch=not args.no_prefetch)
        return 0
    sections = {int(s) for s in args.sections.split(",") if s.strip()}
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser()
    long_every = args.long_every or max(2, min(100, args.steps // 20))
    say(f"comgra_like GUI benchmark; {os.cpu_count()} cores, load average {loadavg()}")
    say("groups:")
    if args.group:
        group = args.group.expanduser().resolve()
        if not (group / "trials").is_dir():
            say(f"error: {group} is not a group folder (no trials/)")
            return 2
        say(f"  using {group}")
    else:
        group = synthetic_group(
            cache_dir, args.trials, args.steps, args.nodes, long_every, args.long_iterations
        )
    click_group = None
    if 4 in sections:
        click_group = synthetic_group(cache_dir, 1, 3, args.click_nodes, 0, 1)
    from comgra_like.query import open_group

    trial = open_group(group).list_trials()[0].trial_id  # the one the GUI opens with
    steps = group_steps(group, trial)
    say(
        f"  {trial}: {len(steps)} recorded steps, {sum(n > 1 for n in steps.values())} with "
        f"more than one iteration (up to {max(steps.values())})"
    )
    plan = Plan(steps)
    res = Results()
    work = Path(tempfile.mkdtemp(prefix="comgra-benchmark-gui-"))
    browser = server = replay = None
    captured: list[dict] = []
    try:
        needs_browser = bool(sections & {1, 3, 4, 5})
        if needs_browser:
            browser = Browser()
        if sections & {1, 2, 3, 6} or args.profile:
            server = Server(group, work, label="server", prefetch=not args.no_prefetch)
            if browser is not None:
                if 1 in sections:
                    section_first_render(browser, server, args.loads, res)
                else:
                    browser.load(server.url + "/")
                captured = browser.captured()  # the requests of the last page load
                browser.set_capture(False)
            else:
                # no browser sections: one page load only to learn the page's requests
                tmp = Browser()
                try:
                    tmp.load(server.url + "/")
                    captured = tmp.captured()
                finally:
                    tmp.quit()
            if sections & {2, 3}:
                replay = Replayer(captured, HttpTransport(server.port))
            if 2 in sections:
                section_selector_changes(replay, plan, args.changes, res, server)
            if 3 in sections:
                section_large_step(replay, browser, plan, args.large_steps, res)
        if 4 in sections and browser is not None:
            click_server = Server(click_group, work, label="server-click")
            try:
                section_click(browser, click_server, args.clicks, res)
            finally:
                click_server.stop()
            if server is not None:  # the same on the main group's smaller graph
                section_click(browser, server, args.clicks, res, main=False)
        if 5 in sections:
            section_refresh(browser, group, args.nodes, work, args.live_rounds, res)
        if 6 in sections:
            section_memory(
                group, captured, steps, work, args.small_cache_mb, args.memory_steps, res
            )
        server_side_missed = any(
            m.startswith(("2.", "   selector", "3.", "   unseen")) for m in res.missed
        )
        if captured and not args.no_profile and (args.profile or server_side_missed):
            profile_server(group, captured, steps, args.profile_top)
    finally:
        if replay is not None:
            replay.close()
        if server is not None:
            server.stop()
        if browser is not None:
            browser.quit()
        shutil.rmtree(work, ignore_errors=True)
    say(f"\nresults (load average at the end {loadavg()}; {os.cpu_count()} cores, shared):")
    res.print()
    if res.missed:
        say("missed: " + "; ".join(m.strip() for m in res.missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
