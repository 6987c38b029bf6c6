"""The comgra-like GUI (Dash). ``create_app(path)`` builds one app; ``comgra`` runs it.

No module-level app object: every call builds a fresh ``dash.Dash`` with its own
server-side parts (:class:`~comgra_like.app.parts.AppParts`: the data layer, the
callback timings, the neighbour prefetch and the plugin), so tests can create many apps
in one process. Data is read only through the query API (``comgra_like.query``).
"""

from __future__ import annotations

import os
from pathlib import Path

import dash

from . import selectors, shell
from .data import DEFAULT_CACHE_BYTES, AppData
from .pages import PAGES
from .parts import AppParts
from .plugin import VisualizationPlugin
from .prefetch import NeighbourPrefetch
from .timings import Timings

__all__ = ["create_app"]


def create_app(
    path: str | os.PathLike,
    *,
    visualization_file: str | os.PathLike | None = None,
    refresh_seconds: float = 2.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    prefetch: bool = True,
    read_only: bool = False,
    index_wait: float | None = None,
) -> dash.Dash:
    """A Dash app showing the group folder ``path`` (which may not exist yet).

    ``refresh_seconds``: how often the browser asks for new data. ``cache_bytes``: bound
    of the server-side caches (shared by all browser sessions). ``prefetch``: read the
    steps before and after the one shown in the background (off: every step is read when
    it is shown; benchmarks compare both). ``read_only``: refuse the callbacks that write
    into the group (the Flow page's saved inputs and row requests). ``index_wait``: index
    the group in the background and wait at most this many seconds for it (None: index it
    before returning; ``comgra`` waits 1 s, then serves while it indexes). The server-side parts
    are at ``app.comgra_parts``.
    """
    data = AppData(path, cache_bytes=cache_bytes, refresh_seconds=refresh_seconds,
                   index_wait=index_wait)
    parts = AppParts(
        data=data,
        timings=Timings(),
        prefetch=NeighbourPrefetch(data) if prefetch else None,
        plugin=VisualizationPlugin(visualization_file) if visualization_file else None,
        read_only=read_only,
    )
    app = dash.Dash(
        __name__,
        assets_folder=str(Path(__file__).with_name("assets")),
        title="comgra",
        update_title=None,
        suppress_callback_exceptions=True,  # pages are inserted by the router
        serve_locally=True,
    )
    pages = [page for page in PAGES if page.available(parts)]
    app.layout = shell.build_shell(data.refresh_seconds, pages)
    if parts.prefetch is not None:
        parts.prefetch.watch_requests(app.server)
    shell.register_callbacks(app, parts, pages)
    selectors.register_callbacks(app, parts)
    for page in pages:
        page.register_callbacks(app, parts)
    app.comgra_parts = parts
    return app
