"""What the callbacks of one app share on the server side."""

from __future__ import annotations

from dataclasses import dataclass

from .data import AppData
from .plugin import VisualizationPlugin
from .prefetch import NeighbourPrefetch
from .timings import Timings


@dataclass(frozen=True)
class AppParts:
    """The server-side parts of one ``create_app`` (``app.comgra_parts``).

    Attributes:
        data: the recordings (the query API, refreshes, the derived cache).
        timings: server times of the callbacks (debug log, benchmarks).
        prefetch: reads the neighbouring steps in the background; None when turned off.
        plugin: the ``--visualization-file`` plugin, None without one.
    """

    data: AppData
    timings: Timings
    prefetch: NeighbourPrefetch | None
    plugin: VisualizationPlugin | None
