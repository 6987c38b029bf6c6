"""The page shell: top bar, stores, the live refresh, the banner and the page router.

Pages are rendered on demand: the router puts the layout of the page named by the URL
into the shell. The selection lives in the app-level ``dcc.Store`` (per browser tab),
so switching pages keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dash
from dash import Input, Output, State, dcc, html, no_update

from . import ids, selectors
from .pages import Page
from .parts import AppParts


def top_bar(pages: Sequence[Page]) -> html.Header:
    return html.Header(
        [
            html.Div("comgra", className="brand", title="comgra-like"),
            html.Nav(
                [
                    dcc.Link(p.name, href=p.path, id=f"nav-{p.name.lower()}", className="nav-link")
                    for p in pages
                ],
                id=ids.NAV,
                className="page-nav",
            ),
            html.Div(
                [html.Span("Trial", className="sel-label me-2"), selectors.trial_selector()],
                className="trial-box",
            ),
            html.Div(id=ids.BADGE, className="live-badge badge-waiting", children="connecting…"),
        ],
        className="topbar",
    )


def build_shell(refresh_seconds: float, pages: Sequence[Page]) -> html.Div:
    """The app's layout: the top bar linking ``pages``, the stores, the refresh interval
    and the place the router puts a page."""
    return html.Div(
        [
            dcc.Location(id=ids.URL, refresh=False),
            dcc.Store(id=ids.SELECTION, storage_type="session"),
            dcc.Store(id=ids.DATA_STATUS, storage_type="memory"),
            dcc.Store(id=ids.KEY_EVENT, storage_type="memory"),
            dcc.Interval(id=ids.TICK, interval=int(refresh_seconds * 1000)),
            top_bar(pages),
            html.Div(id=ids.BANNER, className="banner-area"),
            html.Main(id=ids.PAGE, className="page"),
        ],
        className="app-shell",
    )


def banner(status: dict | None) -> list:
    """Alerts for a missing/empty group and for skipped (unreadable) files."""
    if not status:
        return []
    alerts = []
    if status.get("problem"):
        alerts.append(
            html.Div(status["problem"], className="alert alert-info py-1 px-3 mb-1", role="status")
        )
    skipped = status.get("skipped") or []
    if skipped:
        alerts.append(
            html.Details(
                [
                    html.Summary(
                        f"{len(skipped)} unreadable file{'s' if len(skipped) != 1 else ''} "
                        "skipped (the rest of the data is shown)"
                    ),
                    html.Ul(
                        [
                            html.Li([html.Code(path), f": {reason}"])
                            for path, reason in skipped[:50]
                        ],
                        className="mb-0 small",
                    ),
                ],
                className="alert alert-warning py-1 px-3 mb-1 skipped-banner",
                role="alert",
            )
        )
    return alerts


def register_callbacks(
    app: dash.Dash, parts: AppParts, pages: Sequence[Page]
) -> None:
    """The router (``pages`` by URL path), the data-status refresh, the banner and the badge."""
    data, plugin = parts.data, parts.plugin
    by_path = {p.path: p for p in pages}

    @app.callback(
        Output(ids.PAGE, "children"),
        *[Output(f"nav-{p.name.lower()}", "className") for p in pages],
        Input(ids.URL, "pathname"),
    )
    def route(pathname: str | None) -> tuple:
        page = by_path.get((pathname or "/").rstrip("/") or "/")
        classes = ["nav-link active" if p is page else "nav-link" for p in pages]
        if page is None:
            content = html.Div(
                [
                    html.H4("Page not found"),
                    html.P(f"There is no page {pathname}."),
                    dcc.Link("Back to the tensors", href="/"),
                ],
                className="p-4",
            )
        else:
            content = page.layout()
        return (content, *classes)

    @app.callback(
        Output(ids.DATA_STATUS, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.DATA_STATUS, "data"),
    )
    def tick(_n: int | None, previous: dict | None) -> Any:
        # The cheap "data version" check every view depends on; it only changes the store
        # (and so wakes the views) when something was found.
        status = data.refresh().as_dict()
        status["plugin_mtime"] = plugin.mtime() if plugin is not None else None
        return status if status != previous else no_update

    @app.callback(Output(ids.BANNER, "children"), Input(ids.DATA_STATUS, "data"))
    def show_banner(status: dict | None) -> list:
        return banner(status)

    app.clientside_callback(
        dash.ClientsideFunction(namespace="comgra", function_name="liveBadge"),
        Output(ids.BADGE, "children"),
        Output(ids.BADGE, "className"),
        Output(ids.BADGE, "title"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
    )
