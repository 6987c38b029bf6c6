"""``comgra_like.show(path)``: the GUI inside a Jupyter or VS Code notebook.

Like TensorBoard's ``%tensorboard``: the first call for a group starts ``comgra`` on a free
port of 127.0.0.1 in a background process (the same server as the command), later calls
for the same group reuse it, and the server stops with the Python process that started it
(at exit, and on its own when that process dies or closes the server's standard input:
``comgra --stop-with-parent``). In a notebook the GUI is shown in an IFrame; elsewhere the
URL is printed. ``%load_ext comgra_like.notebook`` adds the ``%comgra PATH`` magic.

Nothing heavy is imported here: no torch, no dash (the server process imports dash).
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigurationError, StorageError

START_SECONDS = 90.0
STOP_SECONDS = 5.0
DEFAULT_HEIGHT = 800
_URL = re.compile(r"comgra: open (http://\S+)")

__all__ = ["Server", "running", "show", "stop"]


@dataclass
class Server:
    """One background ``comgra`` started by :func:`show`."""

    key: str
    url: str
    process: subprocess.Popen
    output: collections.deque = field(default_factory=lambda: collections.deque(maxlen=40))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_SECONDS)


_servers: dict[str, Server] = {}
_lock = threading.Lock()
_atexit_registered = False


def _key(path: str | os.PathLike) -> str:
    text = os.fspath(path)
    if text.startswith("s3://"):
        return text.rstrip("/")
    return str(Path(text).expanduser().absolute())


def _start(key: str, arguments: list[str], timeout: float) -> Server:
    global _atexit_registered
    command = [sys.executable, "-m", "comgra_like.app.cli", "--path", key,
               "--host", "127.0.0.1", "--port", "0", "--stop-with-parent", *arguments]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, bufsize=1,
        # its own session: interrupting the kernel (SIGINT to its process group) must not
        # stop the server; it stops with its parent instead
        start_new_session=True)
    if not _atexit_registered:
        atexit.register(stop)
        _atexit_registered = True
    output: collections.deque = collections.deque(maxlen=40)
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        for line in process.stdout or ():  # read to the end: a full pipe would block the server
            output.append(line.rstrip("\n"))
            match = _URL.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=drain, name=f"comgra-output-{process.pid}", daemon=True).start()
    ready.wait(timeout)
    if not found:
        if process.poll() is None:
            process.kill()
            process.wait(STOP_SECONDS)
            problem = f"did not say where it listens within {timeout:g} s"
        else:
            problem = f"ended with status {process.returncode}"
        shown = "\n".join(output) or "(no output)"
        raise StorageError(f"the comgra server for {key} {problem}:\n{shown}")
    return Server(key=key, url=found[0], process=process, output=output)


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ipython = shell.get_ipython()
    except AttributeError:
        return False
    return ipython is not None and getattr(ipython, "kernel", None) is not None


def show(path: str | os.PathLike, *, height: int = DEFAULT_HEIGHT,
         arguments: list[str] | tuple[str, ...] = (), timeout: float = START_SECONDS) -> None:
    """Show the GUI of the group folder ``path`` (``<comgra_root_path>/<group>`` or
    ``s3://...``) in this notebook, or print its URL outside one.

    The server is started on the first call for ``path`` (a few seconds) and reused by the
    next ones; ``arguments`` are more flags of ``comgra`` (e.g. ``["--refresh", "1"]``) for
    that start. ``height``: of the IFrame in pixels.
    """
    if not isinstance(height, int) or height <= 0:
        raise ConfigurationError(f"height must be a positive number of pixels, not {height!r}")
    key = _key(path)
    arguments = [str(a) for a in arguments]
    with _lock:
        server = _servers.get(key)
        if server is not None and server.alive():
            print(f"comgra: reusing the server for {key} on port {server.port} "
                  f"(pid {server.pid})")
        else:
            server = _servers[key] = _start(key, arguments, timeout)
    if _in_notebook():
        from IPython.display import IFrame, display

        display(IFrame(server.url, width="100%", height=height))
    else:
        print(f"comgra: {key} is shown at {server.url}")


def running() -> list[Server]:
    """The servers :func:`show` started that still run."""
    return [s for s in _servers.values() if s.alive()]


def stop(path: str | os.PathLike | None = None) -> None:
    """Stop the server of ``path`` (all of them without one)."""
    keys = list(_servers) if path is None else [_key(path)]
    for key in keys:
        server = _servers.pop(key, None)
        if server is not None:
            server.stop()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext comgra_like.notebook``: the ``%comgra PATH [FLAGS...]`` line magic."""

    def comgra(line: str) -> None:
        words = shlex.split(line)
        if not words:
            print("usage: %comgra PATH [more flags of comgra]")
            return
        show(words[0], arguments=words[1:])

    ipython.register_magic_function(comgra, "line", "comgra")
