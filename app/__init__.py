"""The comgra-like GUI (Dash). ``create_app(path)`` builds one app; ``comgra`` runs it.

No module-level app object: every call builds a fresh ``dash.Dash`` with its own
server-side :class:`~comgra_like.app.state.AppState`, so tests can create many apps in
one process. Data is read only through the query API (``comgra_like.query``).
"""

from __future__ import annotations

import os
from pathlib import Path

import dash

from . import (
    layout,
    page_graphs,
    page_network,
    page_notes,
    page_tensors,
    page_visualization,
    selectors,
)
from .plugin import VisualizationPlugin
from .state import DEFAULT_CACHE_BYTES, AppState

__all__ = ["create_app"]


def create_app(
    path: str | os.PathLike,
    *,
    visualization_file: str | os.PathLike | None = None,
    refresh_seconds: float = 2.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> dash.Dash:
    """A Dash app showing the group folder ``path`` (which may not exist yet).

    ``refresh_seconds``: how often the browser asks for new data. ``cache_bytes``: bound
    of the server-side caches (shared by all browser sessions). The app's state is at
    ``app.comgra_state``.
    """
    state = AppState(path, cache_bytes=cache_bytes, refresh_seconds=refresh_seconds)
    plugin = VisualizationPlugin(visualization_file) if visualization_file else None
    app = dash.Dash(
        __name__,
        assets_folder=str(Path(__file__).with_name("assets")),
        title="comgra",
        update_title=None,
        suppress_callback_exceptions=True,  # pages are inserted by the router
        serve_locally=True,
    )
    pages = [
        layout.Page(page_tensors.PATH, page_tensors.NAME, page_tensors.build),
        layout.Page(page_network.PATH, page_network.NAME, page_network.build),
        layout.Page(page_notes.PATH, page_notes.NAME, page_notes.build),
        layout.Page(page_graphs.PATH, page_graphs.NAME, page_graphs.build),
    ]
    if plugin is not None:
        pages.append(
            layout.Page(page_visualization.PATH, page_visualization.NAME, page_visualization.build)
        )
    app.layout = layout.build_shell(state, pages)
    _track_callbacks(app, state)
    layout.register_callbacks(app, state, pages, plugin)
    selectors.register_callbacks(app, state)
    page_tensors.register_callbacks(app, state)
    page_network.register_callbacks(app, state)
    page_notes.register_callbacks(app, state)
    page_graphs.register_callbacks(app, state)
    page_visualization.register_callbacks(app, state, plugin)
    app.comgra_state = state
    app.comgra_plugin = plugin
    return app


def _track_callbacks(app: dash.Dash, state: AppState) -> None:
    """Tell ``state`` when callback requests run (its prefetch waits until none does)."""
    import flask

    server = app.server

    @server.before_request
    def callback_started() -> None:
        if flask.request.path.endswith("/_dash-update-component"):
            flask.g.comgra_callback = True
            state.callback_started()

    @server.teardown_request
    def callback_finished(_exc: BaseException | None) -> None:
        if flask.g.pop("comgra_callback", False):
            state.callback_finished()
