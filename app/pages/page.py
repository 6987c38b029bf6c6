"""What a page of the GUI is: a path, a name, a pure layout and its callbacks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dash

from ..parts import AppParts


@dataclass(frozen=True)
class Page:
    """One page of the top bar.

    Attributes:
        path: the URL path the router shows it at ("/" for the first page).
        name: the link text in the top bar.
        layout: builds the page's components; pure (no data, no app): the router calls it
            each time the page is shown, and the page's callbacks fill it.
        register_callbacks: adds the page's callbacks to an app, given its server parts.
        needs_plugin: shown only when the GUI runs with a ``--visualization-file``.
    """

    path: str
    name: str
    layout: Callable[[], Any]
    register_callbacks: Callable[[dash.Dash, AppParts], None]
    needs_plugin: bool = False

    def available(self, parts: AppParts) -> bool:
        """Whether an app with these parts shows the page."""
        return parts.plugin is not None or not self.needs_plugin
