"""``serve``: the process side of the probe loop (see the package's text)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import ConfigurationError
from ..format import flows as ff
from ..record.flow import DEFAULT_MAX_ENTRIES, FlowChain, write_flows


def run_probe(fn: Callable[[torch.Tensor], FlowChain], group: str | os.PathLike,
              trial_id: str, probe_id: str, *, max_entries: int = DEFAULT_MAX_ENTRIES,
              weighting: str = "gradient") -> dict:
    """Run one submitted probe and write its result.json; returns the result.

    A failure of ``fn`` or of the flows is written as the probe's result (status
    ``failed`` with the error) rather than raised: one bad edit does not end the loop.
    """
    folder = ff.probes_dir(group, trial_id) / probe_id
    request = ff.LOCAL.read_json(folder / ff.REQUEST_JSON)
    started = time.time()
    t0 = time.perf_counter()
    result: dict[str, Any] = {"probe_id": probe_id, "started": started}
    chain = None
    try:
        array = np.array(ff.load_npy(folder / ff.INPUT_NPY, mmap=False))
        chain = fn(torch.from_numpy(array))
        if not isinstance(chain, FlowChain):
            raise ConfigurationError(
                f"the served function returned {type(chain).__name__}; it must return the "
                "FlowChain of its nodes after the backward pass (see comgra_like.probe.serve)")
        flows = chain.flows(int(request.get("sample", 0)), rows=request.get("rows"),
                            max_entries=max_entries, weighting=weighting)
        ids = write_flows(flows, group, trial_id, training_step=request.get("training_step"),
                          probe_id=probe_id)
        result.update(status=ff.DONE, record_ids=ids, error=None)
    except Exception as e:  # noqa: BLE001 - reported to the GUI through result.json
        print(f"comgra_like.probe: probe {probe_id} failed:\n{traceback.format_exc()}",
              file=sys.stderr)
        result.update(status=ff.FAILED, record_ids=[], error=f"{type(e).__name__}: {e}")
    finally:
        if chain is not None:
            chain.release()
    result.update(finished=time.time(), seconds=time.perf_counter() - t0)
    ff.write_probe_result(group, trial_id, probe_id, result)
    return result


def serve(fn: Callable[[torch.Tensor], FlowChain], *, group: str | os.PathLike, trial_id: str,
          poll_seconds: float = 0.5, max_probes: int | None = None,
          timeout: float | None = None, max_entries: int = DEFAULT_MAX_ENTRIES,
          weighting: str = "gradient") -> list[str]:
    """Serve probes of ``trial_id`` in the group folder ``group`` until ``max_probes``
    were run or ``timeout`` seconds passed (None: forever; Ctrl-C ends it).

    ``fn(input)`` gets the submitted array as a CPU tensor, runs the network forward
    and backward (recording with the ``ComgraRecorder`` as the user's loop does, if
    wanted) and returns a :class:`~comgra_like.record.flow.FlowChain` of the nodes whose
    flows are wanted, with ``chain.backward(loss)`` done. Probes are run oldest first;
    those submitted before ``serve`` started are run too (their result was missing).
    Returns the ids of the probes run.
    """
    if poll_seconds <= 0:
        raise ConfigurationError(f"poll_seconds must be > 0, not {poll_seconds}")
    if max_probes is not None and max_probes < 1:
        raise ConfigurationError(f"max_probes must be None or >= 1, not {max_probes}")
    ff.require_trial(group, trial_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    done: list[str] = []
    while max_probes is None or len(done) < max_probes:
        pending = ff.pending_probes(group, trial_id)
        for probe_id in pending:
            run_probe(fn, group, trial_id, probe_id, max_entries=max_entries,
                      weighting=weighting)
            done.append(probe_id)
            if max_probes is not None and len(done) >= max_probes:
                return done
        if deadline is not None and time.monotonic() >= deadline:
            break
        if not pending:
            time.sleep(poll_seconds)
    return done
