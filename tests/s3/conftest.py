"""A real S3-compatible server on loopback for the object-storage tests: moto's server
mode (``moto[server]``, in the test extra) started as a subprocess, one per test session.

The server's Python is this interpreter; ``COMGRA_TEST_MOTO_PYTHON`` names another one
that has moto (for a machine whose test environment lacks it). Without moto the tests
are skipped; ``REQUIRE_S3=1`` (CI) makes that an error.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from tests.s3.gate import Gate

BUCKET = "comgra-test"


def _moto_python() -> str | None:
    other = os.environ.get("COMGRA_TEST_MOTO_PYTHON")
    if other:
        return other
    return sys.executable if importlib.util.find_spec("moto") is not None else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log_dir) -> tuple[subprocess.Popen, str]:
    """A moto server process on a free loopback port and its endpoint URL."""
    python = _moto_python()
    if python is None:
        if os.environ.get("REQUIRE_S3"):
            pytest.fail("REQUIRE_S3 is set but moto is not installed: pip install -e '.[test]'")
        pytest.skip("moto is not installed (pip install 'moto[server]')")
    port = _free_port()
    # its log goes to a file: a pipe nobody reads fills up and stops the server
    log = log_dir / f"moto-{port}.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([python, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"],
                                stdout=sink, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=2).close()
            return proc, endpoint
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("moto server exited: " + log.read_text(errors="replace"))
            if time.monotonic() > deadline:
                stop_moto(proc)
                raise RuntimeError("moto server did not start within 60 s") from None
            time.sleep(0.2)


def stop_moto(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The endpoint URL of a running moto server (one per session)."""
    proc, endpoint = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield endpoint
    finally:
        stop_moto(proc)


def use_server(monkeypatch, endpoint: str) -> str:
    """Set the environment a user sets for an S3-compatible server (inherited by the
    writer process and every child process) and make the bucket; a fresh s3:// root."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    import pyarrow.fs as pafs

    from comgra_like.format.files import s3_options

    fs = pafs.S3FileSystem(**s3_options(), allow_bucket_creation=True)
    fs.create_dir(BUCKET)  # a bucket: made once, later calls find it
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh ``s3://`` root on the session's server, with the environment set."""
    return use_server(monkeypatch, s3_server)


@pytest.fixture
def gate(s3_server):
    """A relay in front of the moto server that the test opens and shuts (the store
    going away and coming back); open at the start."""
    g = Gate(s3_server)
    g.open()
    try:
        yield g
    finally:
        g.close()
