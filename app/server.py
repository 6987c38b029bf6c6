"""Serving the GUI: the ``comgra`` command's server flags, the access rules they make and
the server that runs the app (docs/SERVING.md).

The server is waitress (pure Python, no build step, maintained, the same on Linux, macOS
and Windows); ``--debug`` runs Werkzeug's development server with Dash's dev tools but
without Werkzeug's interactive debugger, whose console runs Python in the server. Every
request passes :class:`~comgra_like.app.access.AccessGuard` first (Host header, body
size, access token). Off loopback the server needs a token and is read-only unless
``--allow-writes``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from comgra_like.errors import ConfigurationError

from .access import Access, AccessGuard, HostPolicy, host_name, ip_of, is_loopback_name

DEFAULT_PORT = 8055
DEFAULT_HOST = "127.0.0.1"
#: the largest request body (MB) by default: a callback of the Flow page sends the edited
#: input twice as JSON numbers (~20 bytes a value), so 8 MB fit an input of ~200,000
#: values; every other request of the GUI is a few KB.
DEFAULT_MAX_REQUEST_MB = 8.0
#: waitress's request threads (Dash answers each callback in one; the development server
#: starts a thread per request).
THREADS = 8
TOKEN_ENVIRONMENT = "COMGRA_TOKEN"
PARENT_CHECK_SECONDS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's flags of ``comgra``."""
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"default {DEFAULT_PORT}; 0 picks a free port (printed)")
    parser.add_argument(
        "--host", default=DEFAULT_HOST,
        help=f"interface to listen on; default {DEFAULT_HOST} (this machine only). Any other "
        "address needs an access token and is read-only unless --allow-writes")
    parser.add_argument(
        "--token", default=None,
        help="the access token to require (default: none on loopback, a random one printed "
        f"in the URL otherwise; also read from ${TOKEN_ENVIRONMENT}, which other users of "
        "this machine cannot see in the process list)")
    writes = parser.add_mutually_exclusive_group()
    writes.add_argument(
        "--read-only", action="store_true",
        help="refuse everything that writes into the group (the Flow page's saved inputs "
        "and row requests); the default when listening beyond loopback")
    writes.add_argument(
        "--allow-writes", action="store_true",
        help="let the Flow page write requests into the group when listening beyond loopback")
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="also answer requests whose Host header is NAME (e.g. the name a proxy or a "
        "colleague uses; repeatable; '*' turns the check off). Loopback names are always "
        "answered, IP addresses too when listening beyond loopback")
    parser.add_argument(
        "--max-request-mb", type=float, default=DEFAULT_MAX_REQUEST_MB, metavar="MB",
        help=f"the largest request body accepted (default {DEFAULT_MAX_REQUEST_MB:g} MB)")
    parser.add_argument(
        "--debug", action="store_true",
        help="Werkzeug's development server with Dash's dev tools and debug logging (no "
        "interactive debugger console)")
    parser.add_argument(
        "--stop-with-parent", action="store_true",
        help="stop when the process that started this one ends, or closes this one's "
        "standard input (comgra_like.show uses it)")


@dataclass(frozen=True)
class ServeOptions:
    """How ``comgra`` serves one app (from :func:`options_from_args`)."""

    host: str
    port: int
    token: str | None
    read_only: bool
    hosts: HostPolicy
    max_body_bytes: int
    debug: bool = False
    stop_with_parent: bool = False

    @property
    def loopback(self) -> bool:
        return is_loopback_name(self.host)

    def access(self, port: int) -> Access:
        return Access(hosts=self.hosts, token=self.token, cookie=f"comgra-token-{port}",
                      max_body_bytes=self.max_body_bytes)


def is_wildcard(host: str) -> bool:
    return host_name(host) in ("", "0.0.0.0", "::")


def machine_names() -> set[str]:
    """This machine's own names (for a server bound to every interface)."""
    names = set()
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.add(name.lower())
    return names


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """The options of the parsed flags; ConfigurationError for values that cannot work."""
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port must be between 0 and 65535, not {args.port}")
    if not args.max_request_mb > 0:
        raise ConfigurationError("--max-request-mb must be positive")
    loopback = is_loopback_name(args.host)
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENVIRONMENT)
    if token is not None:
        token = token.strip()
        if len(token) < 8 or not token.isascii() or not token.isprintable() or any(
                c in token for c in ";, \"\\"):
            raise ConfigurationError(
                "the access token must be at least 8 printable ASCII characters without "
                "spaces, quotes, commas, semicolons or backslashes")
    elif not loopback:
        token = secrets.token_urlsafe(24)
    extra = {host_name(name) for name in args.allow_host}
    names = set(extra) - {"*"}
    if not loopback:
        names |= machine_names()
        if not is_wildcard(args.host) and ip_of(host_name(args.host)) is None:
            names.add(host_name(args.host))
    hosts = HostPolicy(names=frozenset(names), any_address=not loopback, anything="*" in extra)
    return ServeOptions(
        host=args.host, port=args.port, token=token,
        read_only=args.read_only or (not loopback and not args.allow_writes),
        hosts=hosts, max_body_bytes=int(args.max_request_mb * 2**20), debug=args.debug,
        stop_with_parent=args.stop_with_parent)


def urls(options: ServeOptions, port: int) -> list[str]:
    """Where to open the GUI: the bound address (the machine's name and loopback for a
    server on every interface), with the token."""
    hosts = [options.host]
    if is_wildcard(options.host):
        hosts = [socket.gethostname() or "localhost", "127.0.0.1"]
    query = f"?token={options.token}" if options.token else ""
    shown = [f"[{h}]" if ":" in h else h for h in hosts]
    return [f"http://{h}:{port}/{query}" for h in shown]


def guard(app: Any, options: ServeOptions, port: int) -> None:
    """Put the access rules in front of the app's Flask server (both servers use it)."""
    flask_app = app.server
    flask_app.config["MAX_CONTENT_LENGTH"] = options.max_body_bytes
    flask_app.wsgi_app = AccessGuard(flask_app.wsgi_app, options.access(port))


def stop_with_parent(stop: Callable[[], None]) -> None:
    """Call ``stop`` when the parent process ends or closes this process's standard input
    (both watched by daemon threads; the second also works where a dead parent's children
    are not handed to another process, e.g. on Windows)."""
    parent = os.getppid()

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        stop()

    def watch_input() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError, AttributeError):
            return  # no usable standard input: the parent watch decides
        stop()

    if hasattr(os, "getppid") and os.name == "posix":
        threading.Thread(target=watch_parent, name="comgra-parent", daemon=True).start()
    threading.Thread(target=watch_input, name="comgra-stdin", daemon=True).start()


def serve(app: Any, options: ServeOptions, announce: Callable[[list[str]], None]) -> int:
    """Serve ``app`` until interrupted; ``announce(urls)`` once the port is bound.

    Returns the exit status (1 when the address cannot be bound)."""
    if options.stop_with_parent:
        stop_with_parent(lambda: os._exit(0))
    try:
        if options.debug:
            return _serve_debug(app, options, announce)
        return _serve_waitress(app, options, announce)
    except OSError as exc:
        print(f"comgra: error: cannot listen on {options.host}:{options.port}: {exc}. "
              "Is another comgra running? Try --port.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _serve_waitress(app: Any, options: ServeOptions,
                    announce: Callable[[list[str]], None]) -> int:
    from waitress.server import create_server

    server = create_server(app.server, host=options.host, port=options.port, threads=THREADS,
                           # a little above the guard's limit: a body with a length
                           # gets the guard's message; a chunked one stops here or in Flask
                           max_request_body_size=options.max_body_bytes + 2**16,
                           clear_untrusted_proxy_headers=True)
    port = int(getattr(server, "effective_port", options.port))
    guard(app, options, port)
    announce(urls(options, port))
    try:
        server.run()
    finally:
        server.close()
    return 0


def _serve_debug(app: Any, options: ServeOptions, announce: Callable[[list[str]], None]) -> int:
    """Werkzeug's development server without its debugger (no console, no PIN): a plain
    ``make_server`` around the app, which ``Flask.run(debug=True)`` would wrap in
    ``DebuggedApplication``; Dash's dev tools (error overlay, callback graph) stay."""
    from werkzeug.serving import make_server

    app.enable_dev_tools(debug=True, dev_tools_hot_reload=False)
    server = make_server(options.host, options.port, app.server, threaded=True)
    port = int(server.port)
    guard(app, options, port)
    announce(urls(options, port))
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
