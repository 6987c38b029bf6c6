"""The Flow page's reads and its one write seam.

Reads go through the query API: the flows and probes of a trial (``Group.read_flows``,
``read_flow``, ``read_probes``, ``read_probe_input``) and the probe loop's state
(``comgra_like.query.flow_serving``: the serving process's heartbeat, a row request).

Writes: the page writes two things into a group, a row request (the button under a unit
whose row is not stored) and an edited input (Save). Both go through this module only,
:meth:`FlowData.request_row` and :meth:`FlowData.save_edit`, which first ask
``AppParts.refuse_writes`` (a read-only GUI refuses) and then call ``format``'s writers
(``flow_requests.request_rows``, ``flows.submit_input``): no callback writes itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from comgra_like.format import flow_requests
from comgra_like.format.flows import submit_input
from comgra_like.query import flow_serving

from ... import flow_edits as fe
from ... import flow_figures as ff
from ...parts import AppParts
from .pieces import chains_of


class FlowData:
    """What the Flow page's callbacks read and write, for one app."""

    def __init__(self, parts: AppParts) -> None:
        self.parts = parts
        self.data = parts.data

    # --- reads ------------------------------------------------------------------------

    def listed(self, trial: str) -> tuple[list, list]:
        """The trial's flows and probes (empty when the trial is unknown)."""
        data = self.data
        group = data.group
        if group is None or trial not in data.trial_ids():
            return [], []
        flows = data.safely(f"flows of {trial}", lambda: group.read_flows(trial), [])
        probes = data.safely(f"probes of {trial}", lambda: group.read_probes(trial), [])
        return flows, probes

    def chain_data(self, trial: str, chain: str | None) -> list:
        """The FlowData of a chain, in order (memory-mapped arrays)."""
        group = self.data.group
        if not isinstance(chain, str) or group is None:
            return []
        flows, _ = self.listed(trial)
        by_chain = chains_of(flows)
        out = []
        for f in by_chain.get(chain, []):
            stored = group.read_flow(trial, f.record_id)
            answers = by_chain.get(flow_serving.rows_chain_id(f.record_id), [])
            out.append(ff.with_rows(stored, [group.read_flow(trial, a.record_id)
                                             for a in answers]))
        return out

    def grouped(self, trial: str, flows: list, max_units: int) -> list:
        """The chain grouped in blocks; cached per record (records never change)."""
        blocks = ff.chain_blocks(flows, max_units)
        out = []
        for f in flows:
            key = ("flow_grouped", trial, f.info.record_id, f.info.rows, blocks[f.info.source],
                   blocks[f.info.target])
            out.append(self.data.cached(key, lambda f=f: ff.grouped_flow(
                f, blocks[f.info.source], blocks[f.info.target]),
                size=lambda g: 512 + (g.matrix.nbytes if g.matrix is not None else 0)))
        return out

    def serving(self, trial: str) -> flow_serving.Serving:
        """Whether a process serves the trial's probes (nobody when unreadable)."""
        return self.data.safely(f"the serving process of {trial}",
                                lambda: flow_serving.serving(self.data.path, trial),
                                flow_serving.NOBODY)

    def nobody_serves(self, trial: str) -> str:
        return (f"No process is serving probes for {trial}: "
                f"{flow_serving.how_to_serve(self.data.path, trial)}.")

    def row_request(self, trial: str, request_id: str) -> flow_serving.RowRequest | None:
        """A row request the page wrote, with its state (None: unreadable)."""
        return self.data.safely(f"row request of {trial}", lambda: flow_serving.read_row_request(
            self.data.path, trial, request_id), None)

    def editable(self, trial: str | None, chain: Any) -> fe.StoredInput | None:
        """What an edit of ``chain`` must look like, from the stored chain (never from the
        browser): its first node's input for the sample, its origin, step and shape."""
        if trial is None or not isinstance(chain, str):
            return None
        return fe.stored_input(chain, self.chain_data(trial, chain))

    def edited_batch(self, trial: str, stored: fe.StoredInput,
                     values: np.ndarray) -> tuple[np.ndarray, int]:
        """The array handed to the served function: an edit's whole batch with this
        sample replaced, or (from the recorded run, which stores only the sample) a batch
        of this one sample. float32, as the chain's input is recorded."""
        group = self.data.group
        if stored.probe_id is not None and group is not None:
            probe = next((p for p in group.read_probes(trial)
                          if p.probe_id == stored.probe_id), None)
            if (probe is not None and len(probe.shape) == values.ndim + 1
                    and tuple(probe.shape[1:]) == values.shape
                    and stored.sample < probe.shape[0]):
                batch = np.array(group.read_probe_input(trial, stored.probe_id),
                                 dtype=np.float32)
                if batch.shape == tuple(probe.shape):
                    batch[stored.sample] = values
                    return batch, stored.sample
        return values[None], 0

    # --- the one write seam -----------------------------------------------------------

    def request_row(self, trial: str, record_id: str, unit: int) -> str:
        """Ask the serving process for one unit's row of a flow stored without it; the
        request's id. ComgraError when the GUI is read-only or a bound is reached."""
        self.parts.refuse_writes("write row requests into the group")
        return flow_requests.request_rows(self.data.path, trial, record_id, [unit])

    def save_edit(self, trial: str, stored: fe.StoredInput, state: Any, note: str) -> str:
        """Store the edited input the browser sends (checked against ``stored``) for the
        serving process; the probe id. ComgraError when the GUI is read-only or the edit
        is refused."""
        self.parts.refuse_writes("save edited inputs into the group")
        values = fe.edited_values(state, stored)
        batch, sample = self.edited_batch(trial, stored, values)
        # like=: submit_input checks the batch against the chain's recorded input
        return submit_input(self.data.path, trial, batch, training_step=stored.step,
                            sample=sample, note=note, like=stored.record_id)
