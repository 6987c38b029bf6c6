"""comgra_like: record the internals of PyTorch training runs and explore them in a GUI.

The recorder (``ComgraRecorder``) needs torch; it is imported lazily so that the query
API (``comgra_like.query``) and the GUI work where torch is not installed.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    CallOrderError,
    ComgraError,
    ConfigurationError,
    FlightTriggerError,
    GraphError,
    NotFoundError,
    RecordingDecisionError,
    RegistrationError,
    StorageError,
    TrainingStepError,
    UnsafePickleError,
)
from .objects import (
    DecisionMakerForRecordings,
    DecisionMakerForRecordingsFrequencyPerType,
    DecisionMakerForRecordingsHardcoded,
)

__version__ = "0.1.0"

my_recorder: Any = None
"""The module-level holder users assign their recorder to (``comgra_like.my_recorder = ...``)."""

__all__ = [
    "CallOrderError",
    "ComgraError",
    "ComgraRecorder",
    "ConfigurationError",
    "DecisionMakerForRecordings",
    "DecisionMakerForRecordingsFrequencyPerType",
    "DecisionMakerForRecordingsHardcoded",
    "FlightRecorder",
    "FlightTriggerError",
    "GraphError",
    "Monitor",
    "NotFoundError",
    "RecordingDecisionError",
    "RegistrationError",
    "StorageError",
    "TrainingStepError",
    "UnsafePickleError",
    "attach",
    "compact_trial",
    "my_recorder",
    "open_group",
    "show",
    "watch",
]


def __getattr__(name: str) -> Any:
    if name == "ComgraRecorder":
        from .record.recorder import ComgraRecorder

        return ComgraRecorder
    if name == "FlightRecorder":  # issue 30: the armed ring of every step's statistics
        from .record.flight import FlightRecorder

        return FlightRecorder
    if name == "Monitor":  # Taiyi's entry point (per-module metrics)
        from .integrations.taiyi import Monitor

        return Monitor
    if name == "open_group":
        from .query import open_group

        return open_group
    if name in ("watch", "attach"):
        from .record import watching as _watch

        return getattr(_watch, name)
    if name == "show":  # the GUI in a notebook: a background `comgra`, no dash here
        from .notebook import show

        return show
    if name == "compact_trial":
        from .writer.compaction import compact_trial

        return compact_trial
    raise AttributeError(f"module 'comgra_like' has no attribute {name!r}")
