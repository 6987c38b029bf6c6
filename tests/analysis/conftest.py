"""Recorded training loops for the detector tests: each loop is trained and recorded
once per session (the real recorder and writer), on first use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from . import loops

EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
FIXED_TRIAL = "trial_no_activation_function_on_output_layer"


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Callable[..., Path]:
    """``recorded("dying_relu", kill_at=None)``: the group folder of that loop."""
    root = tmp_path_factory.mktemp("analysis_runs")
    done: dict[tuple, Path] = {}

    def get(name: str, **kwargs) -> Path:
        key = (name, tuple(sorted(kwargs.items())))
        if key not in done:
            done[key] = getattr(loops, name)(root, group=f"{name}_{len(done)}", **kwargs)
        return done[key]

    return get
