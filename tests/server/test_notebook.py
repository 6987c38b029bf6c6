"""comgra_like.show() in a real Jupyter kernel (nbclient + ipykernel) and in a script:
an IFrame to a server that answers, reused by the next call, gone with the kernel."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from .conftest import ROOT, TUTORIAL

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

IFRAME = re.compile(r'<iframe[^>]*src="http://127\.0\.0\.1:(\d+)/"')


def notebook(path) -> object:
    cells = [
        ("import sys\nimport comgra_like\n"
         f"comgra_like.show({str(path)!r}, height=600)\n"
         "print('loaded:', sorted({'dash', 'torch'} & set(sys.modules)))"),
        f"comgra_like.show({str(path)!r})",
        "from comgra_like import notebook\nprint('pids:', [s.pid for s in notebook.running()])",
        f"%load_ext comgra_like.notebook\n%comgra {path}",
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def text_of(outputs: list) -> str:
    parts = []
    for output in outputs:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/html", ""))
        parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def gone(port: int, pid: int, seconds: float = 20) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                requests.get(f"http://127.0.0.1:{port}/", timeout=2)
            except requests.ConnectionError:
                return True
        time.sleep(0.2)
    return False


def assert_gone(port: int, pid: int, what: str) -> None:
    if not gone(port, pid):
        os.kill(pid, signal.SIGKILL)  # leave no server behind
        raise AssertionError(f"the server outlived {what}")


def run_cells(client, nb) -> list[str]:
    texts = []
    for index, cell in enumerate(nb.cells):
        client.execute_cell(cell, index)
        texts.append(text_of(cell.outputs))
    return texts


def started(texts: list[str]) -> tuple[int, int]:
    first = IFRAME.search(texts[0])
    assert first, texts[0]
    assert 'height="600"' in texts[0] and "loaded: []" in texts[0]  # no dash, no torch
    port = int(first.group(1))
    second = IFRAME.search(texts[1])
    assert second and int(second.group(1)) == port, texts[1]  # the same server
    assert f"reusing the server for {TUTORIAL} on port {port}" in texts[1]
    magic = IFRAME.search(texts[3])  # %comgra PATH: the same server too
    assert magic and int(magic.group(1)) == port, texts[3]
    pids = re.search(r"pids: \[(\d+)\]", texts[2])
    assert pids, texts[2]
    page = requests.get(f"http://127.0.0.1:{port}/", timeout=60)
    assert page.status_code == 200 and "_dash-config" in page.text
    layout = requests.get(f"http://127.0.0.1:{port}/_dash-layout", timeout=60)
    assert layout.status_code == 200
    return port, int(pids.group(1))


def client_for(nb, tmp_path):
    return nbclient.NotebookClient(nb, kernel_name="python3", timeout=180,
                                   resources={"metadata": {"path": str(tmp_path)}})


def test_show_in_a_kernel_reuses_the_server_and_stops_with_the_kernel(tmp_path):
    nb = notebook(TUTORIAL)
    client = client_for(nb, tmp_path)
    with client.setup_kernel():
        port, pid = started(run_cells(client, nb))
    assert_gone(port, pid, "the kernel")


def test_the_server_dies_with_a_killed_kernel(tmp_path):
    nb = notebook(TUTORIAL)
    client = client_for(nb, tmp_path)
    with client.setup_kernel():
        port, pid = started(run_cells(client, nb))
        kernel = client.km.provisioner.process.pid
        os.kill(kernel, signal.SIGKILL)  # no atexit: the server sees its parent go
        assert_gone(port, pid, "the killed kernel")


def test_show_outside_a_notebook_prints_the_url(tmp_path):
    code = ("import sys, comgra_like\n"
            f"comgra_like.show({str(TUTORIAL)!r})\n"
            "assert not {'dash', 'torch'} & set(sys.modules), sys.modules.keys()\n"
            "from comgra_like import notebook\n"
            "server, = notebook.running()\n"
            "print('pid', server.pid, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    url = re.search(r"is shown at http://127\.0\.0\.1:(\d+)/", done.stdout)
    pid = re.search(r"pid (\d+)", done.stdout)
    assert url and pid, done.stdout
    assert_gone(int(url.group(1)), int(pid.group(1)), "the script")
