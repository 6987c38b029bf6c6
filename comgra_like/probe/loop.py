"""``serve``: the process side of the probe loop (see the package's text)."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import CallOrderError, ConfigurationError
from ..format import flow_requests as fr
from ..format import flows as ff
from ..record.flow import DEFAULT_MAX_ENTRIES, FlowChain, write_flows


def run_probe(fn: Callable[[torch.Tensor], FlowChain], group: str | os.PathLike,
              trial_id: str, probe_id: str, *, max_entries: int = DEFAULT_MAX_ENTRIES,
              weighting: str = "gradient", recorder: Any = None) -> dict:
    """Run one submitted probe and write its result.json; returns the result.

    A failure of ``fn`` or of the flows is written as the probe's result (status
    ``failed`` with the error) rather than raised: one bad edit does not end the loop.
    A step of ``recorder`` that ``fn`` left open is aborted (:func:`_close_step`).
    """
    folder = ff.probes_dir(group, trial_id) / probe_id
    request = ff.files_for(group).read_json(folder / ff.REQUEST_JSON)
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
        result.update(status=ff.FAILED, record_ids=[], error=_error_text(e, recorder))
    finally:
        if chain is not None:
            chain.release()
        _close_step(recorder, result, f"probe {probe_id}")
    result.update(finished=time.time(), seconds=time.perf_counter() - t0)
    ff.write_probe_result(group, trial_id, probe_id, result)
    return result


def _close_step(recorder: Any, result: dict, what: str) -> None:
    """Return ``recorder`` to a clean state after a request: a step that ``fn`` left open
    (it raised between ``start_batch`` and ``finish_batch``, e.g. on an input of the
    wrong shape) is aborted, so that the next request's ``start_batch`` works instead of
    every later request failing with CallOrderError. Never raises into the loop."""
    if recorder is None:
        return
    try:
        aborted = recorder.abort_batch()
    except Exception as e:  # noqa: BLE001 - the loop goes on; said on stderr
        print(f"comgra_like.probe: the recorder's step after {what} could not be "
              f"aborted ({type(e).__name__}: {e})", file=sys.stderr)
        return
    if aborted:
        note = ("the served function left the recorder's step open; it was aborted, not "
                "recorded")
        result["note"] = f"{result['note']}; {note}" if result.get("note") else note


def _error_text(e: BaseException, recorder: Any) -> str:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, CallOrderError) and recorder is None:
        text += (" (a step an earlier request left open? pass serve(..., recorder=...) "
                 "so that the loop aborts a failed request's step)")
    return text


def _served_input(group: str | os.PathLike, trial_id: str, request: fr.RowRequest
                  ) -> tuple[np.ndarray, int]:
    """(batch handed to fn, sample) that reproduce the asked record: a probe's whole
    input and its sample, or for the recorded run the sample stored with the chain's
    first node as a batch of one (the run stores no more of its input)."""
    from ..query import flows as qf

    if request.probe_id is not None:
        return qf.read_probe_input(group, trial_id, request.probe_id), request.sample
    chain = [f for f in qf.list_flows(group, trial_id, training_step=request.training_step,
                                      probe_id=None) if f.chain_id == request.chain_id]
    first = min(chain, key=lambda f: f.position, default=None)
    if first is None:
        raise ConfigurationError(f"the chain {request.chain_id} of record {request.record_id} "
                                 "is not stored any more: no input to run")
    value = qf.read_flow(group, trial_id, first.record_id).value_source
    if value is None:
        raise ConfigurationError(f"record {first.record_id} stores no value of its source "
                                 f"{first.source!r}: no input to run")
    return np.array(value)[None], 0


def _weight_like(flow: Any, stored: Any, request: fr.RowRequest) -> str | None:
    """Weight the served Jacobian rows by the record's own upstream gradient, so that
    they are rows of the stored flow: the Jacobian depends only on the sample's input
    (samples not interacting), while the served function's loss may differ from the
    run's (no labels for an edited input, a batch of one instead of the run's batch
    averaged over). Returns a note when the served values differ from the record's."""
    flow.weighting = request.weighting
    if stored.grad_target is not None:
        flow.grad_target = np.array(stored.grad_target)
        flow.grad_source = (np.array(stored.grad_source) if stored.grad_source is not None
                            else flow.grad_source)
        if request.weighting == "gradient":
            g = flow.grad_target.reshape(-1)[np.asarray(request.units)]
            flow.flow = flow.flow * g.reshape((-1,) + (1,) * (flow.flow.ndim - 1))
    elif request.weighting == "gradient":
        raise ConfigurationError(f"record {request.record_id} stores no gradient of "
                                 f"{request.target!r}: its rows cannot be weighted by it")
    if stored.value_target is not None and not np.allclose(
            flow.value_target, stored.value_target, rtol=1e-4, atol=1e-6):
        return (f"the served network's {request.target} differs from the record's (its "
                "weights changed since?): the row is the current network's Jacobian")
    return None


def run_row_request(fn: Callable[[torch.Tensor], FlowChain], group: str | os.PathLike,
                    trial_id: str, request_id: str, *, recorder: Any = None) -> dict:
    """Answer one row request (comgra_like.format.flow_requests): run ``fn`` on the
    input the asked record was computed for, compute the asked units' rows of that pair
    alone (one batched backward pass per 128 units), weighted by the record's stored
    upstream gradient, and store them as a partial record whose chain id is
    ``rows_chain_id(record_id)``. Writes and returns the result; a
    failure is the result (status ``failed``), not raised."""
    from ..query import flows as qf

    started = time.time()
    t0 = time.perf_counter()
    result: dict[str, Any] = {"request_id": request_id, "started": started, "note": None}
    chain = None
    try:
        request = fr.read_request(group, trial_id, request_id)
        batch, sample = _served_input(group, trial_id, request)
        chain = fn(torch.from_numpy(np.ascontiguousarray(batch)))
        if not isinstance(chain, FlowChain):
            raise ConfigurationError(
                f"the served function returned {type(chain).__name__}; it must return the "
                "FlowChain of its nodes after the backward pass (see comgra_like.probe.serve)")
        flow = chain.flow(request.source, request.target, sample, rows=list(request.units),
                          weighting="none")
        stored = qf.read_flow(group, trial_id, request.record_id)
        result["note"] = _weight_like(flow, stored, request)
        flow.position = request.position
        ids = write_flows([flow], group, trial_id, training_step=request.training_step,
                          iteration=request.iteration, probe_id=request.probe_id,
                          chain_id=fr.rows_chain_id(request.record_id),
                          extra={"row_of": request.record_id, "request_id": request_id})
        result.update(status=ff.DONE, record_ids=ids, error=None)
    except Exception as e:  # noqa: BLE001 - reported to the GUI through the result
        print(f"comgra_like.probe: row request {request_id} failed:\n"
              f"{traceback.format_exc()}", file=sys.stderr)
        result.update(status=ff.FAILED, record_ids=[], error=_error_text(e, recorder))
    finally:
        if chain is not None:
            chain.release()
        _close_step(recorder, result, f"row request {request_id}")
    result.update(finished=time.time(), seconds=time.perf_counter() - t0)
    fr.write_request_result(group, trial_id, request_id, result)
    return result


class _Heartbeat:
    """Rewrites the trial's serving.json every HEARTBEAT_SECONDS from a thread, so that a
    page knows someone will answer (also while fn runs a long time); marks it stopped."""

    def __init__(self, group: str | os.PathLike, trial_id: str) -> None:
        self.group, self.trial_id, self.started = group, trial_id, time.time()
        self._stop = threading.Event()
        fr.write_heartbeat(group, trial_id, started=self.started)
        self._thread = threading.Thread(target=self._run, name="comgra-probe-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(fr.HEARTBEAT_SECONDS):
            try:
                fr.write_heartbeat(self.group, self.trial_id, started=self.started)
            except OSError as e:  # a full disk must not end the loop; the page says stale
                print(f"comgra_like.probe: heartbeat not written: {e}", file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        fr.write_heartbeat(self.group, self.trial_id, started=self.started,
                           stopped=time.time())


def _refuse_a_second_server(group: str | os.PathLike, trial_id: str) -> None:
    """One serving process per trial: requests are not claimed (S3 cannot rename), so a
    second one would answer each request again."""
    other = fr.serving(group, trial_id)
    if other.alive and (other.pid, other.host) != (os.getpid(), socket.gethostname()):
        raise ConfigurationError(
            f"process {other.pid} on {other.host} already serves trial {trial_id!r} of "
            f"{group} (its heartbeat is {time.time() - (other.beat or 0):.1f} s old): one "
            "serving process per trial; stop that one first, or wait "
            f"{fr.STALE_SECONDS:g} s if it died")


def serve(fn: Callable[[torch.Tensor], FlowChain], *, group: str | os.PathLike, trial_id: str,
          poll_seconds: float = 0.5, max_probes: int | None = None,
          timeout: float | None = None, max_entries: int = DEFAULT_MAX_ENTRIES,
          weighting: str = "gradient", max_rows: int | None = None,
          recorder: Any = None) -> list[str]:
    """Serve probes and row requests of ``trial_id`` in the group folder ``group`` until
    the limits given were reached (``max_probes`` probes, ``max_rows`` row requests) or
    ``timeout`` seconds passed (no limit and no timeout: forever; Ctrl-C ends it).

    ``fn(input)`` gets the submitted array as a CPU tensor, runs the network forward
    and backward (recording with the ``ComgraRecorder`` as the user's loop does, if
    wanted) and returns a :class:`~comgra_like.record.flow.FlowChain` of the nodes whose
    flows are wanted, with ``chain.backward(loss)`` done. Probes (edited inputs) and
    row requests (one unit's row of a flow too large to store whole, asked for by the
    Flow page) are run oldest first; those submitted before ``serve`` started are run
    too. While it runs, a heartbeat file tells the page that requests will be answered.
    ``group`` may be ``s3://bucket/prefix/group`` (every file goes through the group's
    filesystem seam). One serving process per trial: requests are not claimed, so this
    refuses to start while another process's heartbeat for the trial is fresh.
    ``recorder``: the ``ComgraRecorder`` that ``fn`` records with, if it does. When
    ``fn`` fails inside a step (an edited input the network refuses), the request is
    answered with the error and the recorder's open step is aborted
    (``ComgraRecorder.abort_batch``), so the next request records normally.
    Returns the ids of the probes and requests run, in order.
    """
    if poll_seconds <= 0:
        raise ConfigurationError(f"poll_seconds must be > 0, not {poll_seconds}")
    for name, limit in (("max_probes", max_probes), ("max_rows", max_rows)):
        if limit is not None and limit < 1:
            raise ConfigurationError(f"{name} must be None or >= 1, not {limit}")
    ff.require_trial(group, trial_id)
    _refuse_a_second_server(group, trial_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    done: list[str] = []
    probes = rows = 0

    def finished() -> bool:
        limits = [(n, m) for n, m in ((probes, max_probes), (rows, max_rows)) if m is not None]
        return bool(limits) and all(n >= m for n, m in limits)

    heartbeat = _Heartbeat(group, trial_id)
    try:
        while not finished():
            pending = ff.pending_probes(group, trial_id)
            asked = fr.pending_requests(group, trial_id)
            # oldest first across both kinds: ids begin with their creation time
            for item in sorted(pending + asked, key=lambda i: i[1:]):
                if item in asked:
                    run_row_request(fn, group, trial_id, item, recorder=recorder)
                    rows += 1
                else:
                    run_probe(fn, group, trial_id, item, max_entries=max_entries,
                              weighting=weighting, recorder=recorder)
                    probes += 1
                done.append(item)
                if finished():
                    return done
            if deadline is not None and time.monotonic() >= deadline:
                break
            if not pending and not asked:
                time.sleep(poll_seconds)
    finally:
        heartbeat.stop()
    return done
