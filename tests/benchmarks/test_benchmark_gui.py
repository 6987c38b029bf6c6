"""The GUI benchmark's server (``benchmarks/benchmark_gui.py --serve``) runs the real app
through its public hooks (create_app(prefetch=...), the data layer's refresh records and
cache usage), as a file of the not-installed benchmarks/ folder."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _get(url: str, method: str = "GET") -> dict:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("prefetch", [True, False])
def test_the_benchmark_server_reports_refreshes_caches_and_timings(tiny_group, tmp_path, prefetch):
    command = [sys.executable, str(BENCHMARKS / "benchmark_gui.py"), "--serve", str(tiny_group)]
    if not prefetch:
        command.append("--no-prefetch")
    # from another folder: the script finds its own imports wherever it is started
    server = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("PORT "), server.stderr.read()
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        refreshed = _get(url + "/_bench/refresh", "POST")
        assert refreshed["version"] > 0 and refreshed["group_seconds"] <= refreshed["seconds"]
        state = _get(url + "/_bench/state")
        assert state["refreshes"][-1]["version"] == refreshed["version"]
        assert state["cache_limit"] > 0
        assert state["timings"] == {}  # no callback ran yet
    finally:
        server.terminate()  # our own child, by its handle
        server.wait(30)
        server.stdout.close()
        server.stderr.close()


@pytest.mark.parametrize(
    "script", ["benchmark_gui.py", "benchmark_recorder.py", "make_synthetic_group.py",
               "screenshot_pages.py"]
)
def test_each_tool_starts_as_a_file(script, tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--help"],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout
