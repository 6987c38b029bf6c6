"""The probe loop (issue 18): edit an input in the GUI, see the new gradient flows.

The GUI (or a script) saves an edited input with :func:`submit_input`; the user's
process runs :func:`serve`, which waits for such inputs, runs the user's function on
each (forward and backward, under the recorder if the user records), stores the flows
as records of that probe and writes the probe's result. The query API reads both
(``Group.read_probes``, ``Group.read_flows(trial_id, probe_id=...)``).

``submit_input`` needs no torch (it is :func:`comgra_like.format.flows.submit_input`);
``serve`` imports torch when it is first used.
"""

from __future__ import annotations

from typing import Any

from ..format.flows import submit_input

__all__ = ["serve", "submit_input"]


def __getattr__(name: str) -> Any:
    if name == "serve":
        from .loop import serve

        return serve
    raise AttributeError(f"module 'comgra_like.probe' has no attribute {name!r}")
