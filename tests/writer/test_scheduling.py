"""The writer gives way to training threads between units of work, until it is behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from comgra_like.protocol import CaptureSpec
from comgra_like.writer import scheduling
from comgra_like.writer.process import _Input
from comgra_like.writer.statistics import compute_tensor_table


@pytest.fixture
def yields(monkeypatch):
    """Counts the sched_yield() calls instead of making them."""
    calls = []
    monkeypatch.setattr(scheduling, "_sched_yield", lambda: calls.append(1))
    return calls


def test_courtesy_gives_way_until_the_training_process_waits(yields):
    answers = iter([False, False, True])  # the third check finds training waiting
    courtesy = scheduling.Courtesy(lambda: next(answers, False))
    pause = courtesy.start()
    for _ in range(6):
        pause()
    assert len(yields) == 2  # the rest of that step goes on without yielding
    # The next step starts polite again.
    pause = courtesy.start()
    pause()
    pause()
    assert len(yields) == 4


def test_input_separates_the_hurry_line_from_messages():
    r, w = os.pipe()
    try:
        source = _Input(r)
        os.write(w, b'{"op":"a"}\nh\n{"op":')
        assert source.read()
        assert list(source.lines) == [b'{"op":"a"}']
        assert source.hurried() is True
        assert source.hurried() is False  # said once, counted once
        os.write(w, b'"b"}\n')
        assert source.hurried() is False  # reads what came without blocking
        assert list(source.lines) == [b'{"op":"a"}', b'{"op":"b"}']
        os.write(w, b"h\n")
        assert source.hurried() is True
        os.close(w)
        w = None
        assert source.read() is False  # end of input
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def _specs_and_arrays(rng):
    specs = [
        CaptureSpec("x", "x", "x", "input", 0, "forward", (8, 300), 0, True, True, -1),
        CaptureSpec("h", "h", "h", "calculated", 0, "forward", (8, 300), 0, True, True, -1),
        CaptureSpec("w", "w", "w", "parameter", -1, "forward", (300, 300), None, False, False, 0),
        CaptureSpec("w", "w", "w", "parameter", -1, "update", (300, 300), None, False, False, 0),
        CaptureSpec("w", "w", "w", "parameter", -1, "gradient:l", (300, 300), None, False, False,
                    0),
    ]
    arrays = [rng.standard_normal(s.numel).astype(np.float32) for s in specs]
    return specs, arrays


def test_pauses_come_between_units_and_change_no_value():
    specs, arrays = _specs_and_arrays(np.random.default_rng(3))
    calls = []
    paused = compute_tensor_table("t", 1, "main", [0, 5], specs, arrays, {},
                                  pause=lambda: calls.append(1))
    plain = compute_tensor_table("t", 1, "main", [0, 5], specs, arrays, {})
    # Units: the batch block, each 90,000-value parameter capture on its own (more than
    # a cache-sized chunk), the power iteration, and the table.
    assert len(calls) >= 5
    assert paused.equals(plain)
