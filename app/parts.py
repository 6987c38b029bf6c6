"""What the callbacks of one app share on the server side."""

from __future__ import annotations

from dataclasses import dataclass

from comgra_like.errors import ReadOnlyError

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
        read_only: refuse every callback that writes into the group (``--read-only``; the
            default of ``comgra`` off loopback): they call :meth:`refuse_writes` first.
    """

    data: AppData
    timings: Timings
    prefetch: NeighbourPrefetch | None
    plugin: VisualizationPlugin | None
    read_only: bool = False

    def refuse_writes(self, what: str) -> None:
        """Raise ReadOnlyError (a ComgraError, which the writing callbacks show on the page)
        when this GUI is read-only; ``what``: the write refused, for the message."""
        if self.read_only:
            raise ReadOnlyError(
                f"this GUI is read-only, so it does not {what} (comgra was started with "
                "--read-only, or listens beyond this machine without --allow-writes)")
