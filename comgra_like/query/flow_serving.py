"""The probe loop as a reader sees it (issue 18): whether a process serves a trial's
probes and row requests, what to run when nobody does, and the state of one row request.

Reads only, over ``format/flow_requests.py`` (the files' layout and format live there):
the GUI's Flow page reads the loop's state through these functions, never through the
format module. Writing a request or an edited input is the page's one write seam
(``app/pages/flow/data.py``), which calls ``format``'s writers.
"""

from __future__ import annotations

import os

from ..format import flow_requests as _requests
from ..format.flow_requests import RowRequest, Serving
from ..format.flows import DONE, FAILED, PENDING  # an edit's and a row request's states

#: What :func:`serving` says of a trial whose heartbeat cannot be read at all.
NOBODY = Serving(False, None, None, None, None, None)


def serving(group: str | os.PathLike, trial_id: str) -> Serving:
    """The trial's serving process as its heartbeat says (alive while the heartbeat is
    fresh and the process has not stopped)."""
    return _requests.serving(group, trial_id)


def how_to_serve(group: str | os.PathLike, trial_id: str) -> str:
    """What to run so that the trial's edits and row requests are answered."""
    return _requests.how_to_serve(group, trial_id)


def read_row_request(group: str | os.PathLike, trial_id: str, request_id: str) -> RowRequest:
    """One row request with its state (pending, done or failed); NotFoundError when the
    trial has no such request, StorageError when its file is damaged."""
    return _requests.read_request(group, trial_id, request_id)


def is_rows_chain(chain_id: str | None) -> bool:
    """Whether a chain id is that of the rows served on demand (they join the flow they
    complete rather than being a chain of their own)."""
    return _requests.is_rows_chain(chain_id)


def rows_chain_id(record_id: str) -> str:
    """The chain id under which the rows answering requests for ``record_id`` are stored."""
    return _requests.rows_chain_id(record_id)


__all__ = ["DONE", "FAILED", "NOBODY", "PENDING", "RowRequest", "Serving", "how_to_serve", "is_rows_chain",
           "read_row_request", "rows_chain_id", "serving"]
