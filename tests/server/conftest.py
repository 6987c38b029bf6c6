"""Real `comgra` server processes for the tests of serving (tests/server).

Every server is started as ``python -m comgra_like.app.cli --port 0 ...`` (the port it
bound is read from what it prints) and stopped after the test. Requests go to 127.0.0.1
only, also when a server listens on 0.0.0.0.
"""

from __future__ import annotations

import queue
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "example_runs" / "tutorial"
START_SECONDS = 90
_OPEN = re.compile(r"comgra: open http://\S+?:(\d+)/(?:\?token=(\S+))?")


@dataclass
class Running:
    """A started server: its process, port, token (None without one) and output."""

    process: subprocess.Popen
    port: int
    token: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        kwargs.setdefault("allow_redirects", False)
        return requests.request(method, self.base + path, **kwargs)

    def session(self) -> requests.Session:
        """A session that opened the page with the token (it holds the cookie)."""
        session = requests.Session()
        answer = session.get(f"{self.base}/?token={self.token}", timeout=60)
        assert answer.status_code == 200, answer.text
        return session


def _read_lines(process: subprocess.Popen, into: queue.Queue) -> None:
    for line in process.stdout:
        into.put(line)
    into.put(None)


@pytest.fixture
def start_server(tmp_path) -> Callable[..., Running]:
    """start_server(*flags, path=TUTORIAL) -> Running."""
    started: list[Running] = []

    def start(*flags: str, path: Path = TUTORIAL) -> Running:
        log = (tmp_path / f"server-{len(started)}.err").open("w")
        process = subprocess.Popen(
            [sys.executable, "-m", "comgra_like.app.cli", "--path", str(path), "--port", "0",
             *flags], stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
            text=True, cwd=tmp_path)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(process, lines), daemon=True).start()
        seen: list[str] = []
        while True:
            try:
                line = lines.get(timeout=START_SECONDS)
            except queue.Empty:
                line = None
            if line is None:
                process.kill()
                raise AssertionError(
                    f"the server did not start: {seen}\n"
                    f"{(tmp_path / f'server-{len(started)}.err').read_text()}")
            seen.append(line)
            match = _OPEN.search(line)
            if match and "Ctrl+C" in line:
                running = Running(process, int(match.group(1)), match.group(2), seen)
                started.append(running)
                return running

    yield start
    for running in started:
        running.process.terminate()
        try:
            running.process.wait(10)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait(10)


@pytest.fixture
def tutorial_copy(tmp_path) -> Path:
    """A copy of the example group that a server may write into."""
    return Path(shutil.copytree(TUTORIAL, tmp_path / "tutorial"))


def callback_body(dependencies: list[dict], output_part: str,
                  values: dict[str, Any]) -> dict:
    """The body the browser posts to /_dash-update-component for the callback whose
    output names ``output_part``; ``values``: "id.property" -> value of its inputs and
    states (None where not given)."""
    spec = next(d for d in dependencies if output_part in d["output"])
    output = spec["output"]
    parts = output[2:-2].split("...") if output.startswith("..") else [output]
    outputs = [dict(zip(("id", "property"), p.rsplit(".", 1))) for p in parts]

    def filled(items: list[dict]) -> list[dict]:
        return [{**item, "value": values.get(f"{item['id']}.{item['property']}")}
                for item in items]

    inputs = filled(spec["inputs"])
    return {"output": output, "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": inputs, "state": filled(spec["state"]),
            "changedPropIds": [f"{i['id']}.{i['property']}" for i in inputs]}


def post_callback(running: Running, session: requests.Session, output_part: str,
                  values: dict[str, Any]) -> dict:
    """Run one callback of the server as the page would (see callback_body); its answer's
    "response" (component id -> property -> value)."""
    dependencies = session.get(running.base + "/_dash-dependencies", timeout=60).json()
    body = callback_body(dependencies, output_part, values)
    answer = session.post(running.base + "/_dash-update-component", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["response"]
