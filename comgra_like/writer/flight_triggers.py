"""The flight recorder's triggers in the writer: each :class:`protocol.FlightTrigger` is
named in the trial's trial.json (``format/trial.py``: ``flight_triggers``, the first
``FLIGHT_TRIGGERS_KEPT`` listed, the rest counted), written atomically in order with the
shards, so a trigger sent before the training process was killed is on disk.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

from ..format.files import Files
from ..format.layout import TRIAL_JSON
from ..format.trial import add_flight_trigger, json_number, json_safe, write_flight_triggers
from ..protocol import FlightTrigger


def trigger_entry(msg: FlightTrigger) -> dict:
    """A trigger as trial.json lists it (plain JSON; non-finite values as strings)."""
    return {
        "kind": str(msg.kind),
        "training_step": int(msg.training_step),
        "tensor": None if msg.tensor is None else str(msg.tensor),
        "value": json_number(msg.value),
        "window_steps": [int(s) for s in msg.window_steps],
        "detail": json_safe(dict(msg.detail or {})),
        "wall_time": float(msg.wall_time),
        "rank": int(msg.rank),
    }


class FlightTriggers:
    """Adds triggers to the writer's trial.json (``info``: the dict the writer wrote at
    the start and rewrites when the trial finishes, so the triggers stay in it) and
    queues the rewrite with ``submit`` (the writer's ordered upload queue).

    ``info`` None (a rank other than the lead, which alone writes trial.json): the
    triggers are not named there; said once on stderr."""

    def __init__(self, trial_dir: Path, info: dict | None, files: Files,
                 submit: Callable[[list], None], rank: int = 0):
        self.trial_dir = Path(trial_dir)
        self.info = info
        self.files = files
        self.submit = submit
        self.rank = rank
        self.received = 0
        self._warned = False

    def add(self, msg: FlightTrigger) -> None:
        self.received += 1
        entry = trigger_entry(msg)
        if self.info is None:
            if not self._warned:
                self._warned = True
                print(f"comgra_like writer: rank {self.rank} is not the lead rank, which "
                      "alone writes trial.json; its flight-recorder triggers (the first: "
                      f"{entry['kind']} at step {entry['training_step']}) are not named "
                      "there", file=sys.stderr)
            return
        add_flight_trigger(self.info, entry)
        snapshot = copy.deepcopy(self.info)  # the lists as they are now
        where = self.files.display(self.trial_dir / TRIAL_JSON)
        self.submit([(lambda: write_flight_triggers(self.trial_dir, snapshot, self.files),
                      f"naming a flight-recorder trigger in {where}")])
