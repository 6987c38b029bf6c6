"""Who may talk to the GUI's server: one WSGI layer in front of the Dash app.

:class:`AccessGuard` checks every request before Flask and Dash see it, pages, callbacks
(``/_dash-update-component``, ``/_dash-layout``, ``/_dash-dependencies``), assets and
component bundles alike, in this order:

1. the ``Host`` header (:class:`HostPolicy`): a browser tricked by DNS rebinding sends the
   attacker's name, which is not on the list; IP literals are safe (a rebinding attack
   needs a name), so a server bound beyond loopback answers any of them;
2. the ``Origin`` of a request that may change something (POST and the like), when the
   browser sends one: it must be the server itself;
3. the size of the request body (``Content-Length``; the WSGI servers also stop a
   chunked body at the same limit);
4. the access token, when there is one: in the query (``?token=...``, which also sets an
   HttpOnly SameSite=Lax cookie so that the page's own requests carry it), in that cookie,
   or in an ``Authorization: token ...`` / ``Bearer ...`` header; compared in constant time.

Every answer also says ``Referrer-Policy: same-origin`` (a URL with the token is not sent
to other sites) and ``X-Content-Type-Options: nosniff``.

No dash, no torch: plain WSGI and the standard library.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: on every answer: the page's URL (which may hold the token) is not sent to other sites
#: as the Referer, and a browser takes each answer as the type it says it is
HEADERS = [("Referrer-Policy", "same-origin"), ("X-Content-Type-Options", "nosniff")]


def host_name(value: str) -> str:
    """The name or address of a Host header or URL netloc, without the port, lower case."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8055
        return value[1:value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def ip_of(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return None


def is_loopback_name(name: str) -> bool:
    """Whether a name or address is this machine only (127.0.0.0/8, ::1, localhost)."""
    name = host_name(name)
    address = ip_of(name)
    if address is not None:
        return address.is_loopback
    return name in LOOPBACK_NAMES or name.endswith(".localhost")


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` headers the server answers.

    Attributes:
        names: host names accepted besides the loopback ones (lower case).
        any_address: whether any IP literal is accepted (a server bound beyond loopback);
            otherwise only loopback addresses are.
        anything: accept every Host (``--allow-host '*'``, e.g. behind a proxy that
            checks it).
    """

    names: frozenset[str] = field(default_factory=frozenset)
    any_address: bool = False
    anything: bool = False

    def allows(self, header: str | None) -> bool:
        if self.anything:
            return True
        if not header:
            return False  # HTTP/1.1 requires it; browsers always send it
        name = host_name(header)
        address = ip_of(name)
        if address is not None:
            return self.any_address or address.is_loopback
        return is_loopback_name(name) or name in self.names


@dataclass(frozen=True)
class Access:
    """What :class:`AccessGuard` enforces.

    Attributes:
        hosts: the Host header allow-list.
        token: the access token; None: none is needed.
        cookie: the cookie's name (cookies are shared by all ports of a host, so the name
            carries the port).
        max_body_bytes: the largest request body accepted.
    """

    hosts: HostPolicy
    token: str | None
    cookie: str
    max_body_bytes: int


StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict, StartResponse], Iterable[bytes]]


class AccessGuard:
    """WSGI middleware enforcing an :class:`Access` in front of ``app``."""

    def __init__(self, app: WsgiApp, access: Access):
        self.app = app
        self.access = access
        self._token = access.token.encode() if access.token else None

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        return self._check(environ, _with_headers(start_response, HEADERS))

    def _check(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        access = self.access
        host = environ.get("HTTP_HOST") or ""
        if not access.hosts.allows(host):
            return _refuse(environ, start_response, "403 Forbidden", (
                f"This comgra server does not answer to the name {host_name(host)!r} (Host "
                "header). It refuses names it was not started for, so that a web page cannot "
                "reach it by rebinding a name of its own to this machine. Open it by the "
                "address it printed, or start it with --allow-host "
                f"{host_name(host) or 'NAME'}."))
        method = environ.get("REQUEST_METHOD", "GET").upper()
        origin = environ.get("HTTP_ORIGIN")
        if (method not in SAFE_METHODS and origin and origin != "null"
                and urlsplit(origin).netloc.lower() != host.lower()):
            return _refuse(environ, start_response, "403 Forbidden", (
                f"Refused a {method} request from the page at {origin}: this comgra "
                "server answers only its own pages."))
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _refuse(environ, start_response, "400 Bad Request",
                           "The Content-Length header is not a number.")
        if length > access.max_body_bytes:
            return _refuse(environ, start_response, "413 Content Too Large", (
                f"The request body has {length:,} bytes; this comgra server accepts at most "
                f"{access.max_body_bytes:,} (--max-request-mb)."))
        if self._token is None:
            return self.app(environ, start_response)
        from_query = parse_qs(environ.get("QUERY_STRING", "")).get("token", [])
        if from_query:
            if not self._matches(from_query[-1]):
                return self._ask_for_token(environ, start_response, wrong=True)
            return self.app(environ, self._setting_cookie(start_response))
        if self._matches(self._from_header(environ)) or self._matches(
                self._from_cookie(environ)):
            return self.app(environ, start_response)
        return self._ask_for_token(environ, start_response, wrong=False)

    def _matches(self, given: str | None) -> bool:
        if given is None or self._token is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), self._token)

    @staticmethod
    def _from_header(environ: dict) -> str | None:
        scheme, _, value = (environ.get("HTTP_AUTHORIZATION") or "").partition(" ")
        return value.strip() if scheme.lower() in ("token", "bearer") and value else None

    def _from_cookie(self, environ: dict) -> str | None:
        raw = environ.get("HTTP_COOKIE")
        if not raw:
            return None
        cookies: SimpleCookie = SimpleCookie()
        try:
            cookies.load(raw)
        except CookieError:
            return None
        morsel = cookies.get(self.access.cookie)
        return morsel.value if morsel is not None else None

    def _setting_cookie(self, start_response: StartResponse) -> StartResponse:
        cookie = (f"{self.access.cookie}={self.access.token}; Path=/; HttpOnly; "
                  "SameSite=Lax")
        return _with_headers(start_response, [("Set-Cookie", cookie)])

    def _ask_for_token(self, environ: dict, start_response: StartResponse, *,
                       wrong: bool) -> Iterable[bytes]:
        problem = ("That access token is wrong." if wrong
                   else "This comgra server needs its access token.")
        return _refuse(environ, start_response, "401 Unauthorized", (
            f"{problem} Open the URL it printed when it started (it ends in ?token=...), "
            "or send the token in an 'Authorization: token ...' header."),
            [("WWW-Authenticate", 'Token realm="comgra"')])


def _with_headers(start_response: StartResponse, extra: list) -> StartResponse:
    def start(status: str, headers: list, exc_info: Any = None) -> Any:
        return start_response(status, [*headers, *extra], exc_info)

    return start


def _refuse(environ: dict, start_response: StartResponse, status: str, message: str,
            headers: list | None = None) -> Iterable[bytes]:
    """A short answer: an HTML page for a browser's page request, plain text otherwise."""
    if "text/html" in environ.get("HTTP_ACCEPT", ""):
        body = (f"<!doctype html><title>comgra: {html.escape(status)}</title>"
                f"<h3>comgra: {html.escape(status)}</h3><p>{html.escape(message)}</p>")
        kind = "text/html; charset=utf-8"
    else:
        body, kind = f"comgra: {message}\n", "text/plain; charset=utf-8"
    data = body.encode("utf-8")
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(data))),
                            ("Cache-Control", "no-store"), *(headers or [])])
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [data]
