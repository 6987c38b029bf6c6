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
    "FlowChain",
    "GraphError",
    "Monitor",
    "NotFoundError",
    "RecordingDecisionError",
    "RegistrationError",
    "Stage",
    "StepEvent",
    "StepListener",
    "StorageError",
    "TrainingStepError",
    "UnsafePickleError",
    "any_rank",
    "attach",
    "compact_trial",
    "find",
    "first_divergence",
    "import_flow_info",
    "my_recorder",
    "open_group",
    "request_rows",
    "serve",
    "show",
    "submit_input",
    "watch",
    "write_flows",
]


# The public face: every name a user needs, imported when first used (torch stays out of
# `import comgra_like`). Internal folders (record/, format/, writer/, transport/, probe/,
# protocol/) may move; these names and the public modules (listed in
# docs/ARCHITECTURE.md, "The public face") stay. tests/test_public_face.py checks that the
# README and docs/ import and name only them.
_LAZY = {
    "ComgraRecorder": ("record.recorder", "ComgraRecorder"),
    "FlightRecorder": ("record.flight", "FlightRecorder"),  # the armed ring (issue 30)
    "Monitor": ("integrations.taiyi", "Monitor"),  # Taiyi's entry point
    "open_group": ("query", "open_group"),
    "watch": ("record.watching", "watch"),
    "attach": ("record.watching", "attach"),
    "show": ("notebook", "show"),  # the GUI in a notebook: a background `comgra`
    "compact_trial": ("writer.compaction", "compact_trial"),
    # the recorder's lifecycle, for drivers of its steps (record/lifecycle.py)
    "StepListener": ("record.lifecycle", "StepListener"),
    "StepEvent": ("record.lifecycle", "StepEvent"),
    "Stage": ("record.lifecycle", "Stage"),
    # gradient flow and the probe loop (docs/FLOW.md)
    "FlowChain": ("record.flow", "FlowChain"),
    "write_flows": ("record.flow", "write_flows"),
    "serve": ("probe", "serve"),
    "submit_input": ("format.flows", "submit_input"),
    "request_rows": ("format.flow_requests", "request_rows"),
    "import_flow_info": ("format.vnittest", "import_flow_info"),
    # the optimizer's gradient and state for a loop without watch() (docs/OPTIMIZER.md)
    "watch_optimizer": ("record.optimizer", "watch_optimizer"),
    # distributed recording (docs/DISTRIBUTED.md)
    "any_rank": ("record.ranks", "any_rank"),
    # findings and comparison
    "find": ("analysis", "find"),
    "first_divergence": ("analysis", "first_divergence"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'comgra_like' has no attribute {name!r}")
    import importlib

    module, attribute = target
    return getattr(importlib.import_module(f".{module}", __name__), attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
