"""Recordings of the real-model tests, each trained once per session on first use: the
bare run and the watched run of a model and a set-up (the same seed and batches)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from . import models

#: Steps of every run, and how often watch records (steps 0, 2, 4, 6).
STEPS, LOG_FREQ = 8, 2
#: A small metric config: the weights' RMS of every Linear at steps 1, 4, 7 (the loss is
#: logged at every step by the loop).
METRICS = {"Linear": [["WeightRMS", "linear(3, 1)"]]}


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Callable[..., tuple[models.Run, models.Run]]:
    """``runs("gpt2", checkpointing="reentrant")``: (bare run, watched run) of that case
    and set-up, trained on first use (``bare=False``: (None, watched run); ``log_freq``:
    how often the watched run records)."""
    root = tmp_path_factory.mktemp("realmodels")
    done: dict[tuple, tuple[models.Run, models.Run]] = {}

    def get(name: str, bare: bool = True, log_freq: int = LOG_FREQ, **setup
            ) -> tuple[models.Run | None, models.Run]:
        key = (name, bare, log_freq, tuple(sorted(setup.items())))
        if key not in done:
            case = models.CASES[name]
            plain = models.train(case, STEPS, **setup) if bare else None
            watched = models.train(case, STEPS, folder=root / f"{name}_{len(done)}",
                                   log_freq=log_freq, metrics=METRICS, **setup)
            done[key] = (plain, watched)
        return done[key]

    return get
