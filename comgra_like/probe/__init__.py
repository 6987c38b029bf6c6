"""The probe loop (issue 18): edit an input in the GUI, see the new gradient flows.

The GUI (or a script) saves an edited input with :func:`submit_input`; the user's
process runs :func:`serve`, which waits for such inputs, runs the user's function on
each (forward and backward, under the recorder if the user records), stores the flows
as records of that probe and writes the probe's result. The query API reads both
(``Group.read_probes``, ``Group.read_flows(trial_id, probe_id=...)``).

``serve`` also answers row requests: the Flow page asks, with :func:`request_rows`, for
the row of one unit of a flow too large to store whole, and ``serve`` computes it with
one backward pass (:mod:`comgra_like.format.flow_requests`).

``submit_input`` and ``request_rows`` need no torch (they live in ``format``); ``serve``
imports torch when it is first used.
"""

from __future__ import annotations

from typing import Any

from ..format.flow_requests import request_rows
from ..format.flows import submit_input

__all__ = ["request_rows", "serve", "submit_input"]


def __getattr__(name: str) -> Any:
    if name == "serve":
        from .loop import serve

        return serve
    raise AttributeError(f"module 'comgra_like.probe' has no attribute {name!r}")
