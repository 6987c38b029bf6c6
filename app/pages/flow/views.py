"""What the Flow page's views show, from its reads (``FlowData``) and the pure builders of
``flow_figures``: the lists of origins, steps and chains; the Sankey and the summary; the
heatmaps with a unit's outline and the offer of its row; the state of a row request;
the input editor. The callbacks parse their inputs, call one of these and return."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import html, no_update

from comgra_like.errors import ComgraError
from comgra_like.query import flow_serving
from comgra_like.query.flow_serving import DONE, FAILED, PENDING

from ... import flow_edits as fe
from ... import flow_figures as ff
from ... import other_trials
from ...controls.shown import nothing, unchanged
from ...figures import empty_figure
from .data import FlowData
from .layout import DEFAULT_SLIDER, MAX_UNITS_CHOICES, RUN
from .pieces import (
    chain_label,
    chain_names,
    chains_of,
    clicked_point,
    history,
    newest_unseen,
    origin_of,
    probe_text,
    unit_of_point,
)

HIDDEN_BEFORE = {"flex": "1 1 45%", "minWidth": "420px", "display": "none"}
SHOWN_BEFORE = {"flex": "1 1 45%", "minWidth": "420px"}


def lists_view(reads: FlowData, trial: str | None, origin: str | None, step: int | None,
               chain: str | None, shown: Any) -> tuple:
    """The origins, steps and chains of the trial and the ones chosen, the chain before
    the edit, the history line, and the key (9 values; ``no_update`` for all when the
    key is the one shown)."""
    every, probes = reads.listed(trial) if trial else ([], [])
    # rows served on demand join the flow they complete (chain_data): no chain of theirs
    flows = [f for f in every if not flow_serving.is_rows_chain(f.chain_id)]
    entries = history(probes)
    values = [e["value"] for e in entries]
    origin = newest_unseen(values, trial, shown) or origin
    if origin not in values:
        origin = RUN
    at = values.index(origin)
    origin = values[at]
    mine = [f for f in flows if origin_of(f) == origin]
    steps = sorted({f.training_step for f in mine}, key=lambda s: (s is None, s or 0))
    if step not in steps:
        step = steps[-1] if steps else None
    chains = chains_of([f for f in mine if f.training_step == step])
    chain_options = [{"label": chain_label(fs), "value": c} for c, fs in chains.items()]
    if chain not in chains:
        # the same nodes as the chain shown before (a new edit of the same chain)
        before_names = chain_names(chains_of(flows).get(chain, []))
        same = [c for c, fs in chains.items() if chain_names(fs) == before_names]
        chain = (same or list(chains) or [None])[-1]
    before = None
    if at > 0 and chain is not None:
        names = chain_names(chains[chain])
        earlier = [f for f in flows if origin_of(f) == values[at - 1]]
        candidates = [c for c, fs in chains_of(earlier).items() if chain_names(fs) == names]
        same_step = [c for c in candidates
                     if chains_of(earlier)[c][0].training_step == step]
        before = (same_step or candidates or [None])[-1]
    if at == 0:
        text = (f"recorded run · {len(probes)} edit{'s' if len(probes) != 1 else ''} "
                "in the history" if probes else "recorded run · no edits yet")
    else:
        text = probe_text(probes[at - 1], at, len(probes))
        if probes[at - 1].status == PENDING and not reads.serving(trial).alive:
            text += " · " + reads.nobody_serves(trial)
    shown_text: Any = text
    offered: list[str] = []
    if not flows and trial:
        text = (f"No gradient flows stored for {trial}: compute them with "
                "comgra_like.record.flow (FlowChain, write_flows) or serve probes.")
        # the trials that have flows: buttons after the text that open them
        having = other_trials.with_flows(reads.data)
        offer = other_trials.offer(having, trial, "flows")
        offered = other_trials.others_of(having, trial)
        shown_text = [text, " ", offer] if offer is not None else text
    key = [trial, [f.record_id for f in every], [(p.probe_id, p.status) for p in probes],
           origin, step, chain, before, text, offered]
    if unchanged(key, shown):
        return nothing(9)
    step_options = [{"label": "—" if s is None else str(s), "value": s} for s in steps]
    return (entries, origin, step_options, step, chain_options, chain, before, shown_text,
            key)


def sankey_view(reads: FlowData, trial: str | None, chain: str | None, before: str | None,
                slider: float | None, max_units: int | None, history_text: Any) -> tuple:
    """The Sankey, the one before the edit, its box's style and the summary lines."""
    if trial is None or chain is None:
        if isinstance(history_text, list):  # the text, then the other trials' buttons
            history_text = next((t for t in history_text if isinstance(t, str)), None)
        message = history_text if isinstance(history_text, str) and history_text else (
            "No trial selected." if trial is None else "No flows to show.")
        return empty_figure(message, 420), no_update, HIDDEN_BEFORE, ""
    max_units = fe.checked_count(max_units, 1, max(MAX_UNITS_CHOICES),
                                 ff.DEFAULT_MAX_UNITS)
    slider = fe.checked_slider(slider, ff.SLIDER_MIN, ff.SLIDER_MAX, DEFAULT_SLIDER)
    flows = reads.chain_data(trial, chain)
    if not flows:
        return empty_figure("No flows to show.", 420), no_update, HIDDEN_BEFORE, ""
    groups = reads.grouped(trial, flows, max_units)
    blocks = ff.chain_blocks(flows, max_units)
    shapes = {n.name: n.shape for n in ff.chain_nodes(flows)}
    threshold = ff.threshold_for(slider, ff.largest_link(groups))
    model = ff.sankey_model(groups, shapes, threshold)
    figure = ff.sankey_figure(model, title=f"{chain_label([f.info for f in flows])}")
    lines = ff.summary_lines(model, shapes, blocks)
    before_figure, style = no_update, HIDDEN_BEFORE
    if before is not None:
        earlier = reads.chain_data(trial, before)
        if earlier:
            old = ff.sankey_model(reads.grouped(trial, earlier, max_units), shapes, threshold)
            before_figure = ff.sankey_figure(old, title="before this edit")
            style = SHOWN_BEFORE
            lines.append(f"before this edit: {len(old.link_value)} links drawn at the "
                         "same threshold")
    summary = [html.Div(line, className="flow-summary-line") for line in lines]
    return figure, before_figure, style, summary


def picked_unit(reads: FlowData, trial: str | None, chain: str | None, click: Any) -> Any:
    """The unit a click on the heatmaps picks ({"chain", "node", "unit"}), or no_update
    (an outline, or a point off the units)."""
    point = clicked_point(click)
    if chain is None or trial is None:
        return no_update
    nodes = ff.chain_nodes(reads.chain_data(trial, chain))
    k = point.get("curveNumber")
    if type(k) is not int or not 0 <= k < len(nodes):
        return no_update  # an outline, not a heatmap
    unit = unit_of_point(point, nodes[k].shape)
    if unit is None:
        return no_update
    return {"chain": chain, "node": nodes[k].name, "unit": unit}


def heatmaps_figure(trial: str | None, chain: str | None, flows: list,
                    picked: tuple[str, int] | None) -> tuple:
    """The heatmaps with the picked unit's outline, and the line that says what it
    exchanges gradient with."""
    if trial is None or chain is None:
        return empty_figure("", 120), ""
    nodes = ff.chain_nodes(flows)
    if picked is not None:
        node, unit = picked
        found = ff.highlight_sets(flows, node, unit)
        figure = ff.heatmaps_figure(nodes, selected=picked, highlight=found["units"])
        parts_text = [f"{name}: {len(u)} unit{'s' if len(u) != 1 else ''}"
                      for name, u in found["units"].items() if name != node]
        text = f"{node} unit {unit} exchanges gradient with " + (
            ", ".join(parts_text) or "no unit")
        if found["unknown"]:
            text += (f" · not known for {', '.join(found['unknown'])}: only some rows "
                     "of that flow were computed (or none)")
        return figure, text
    return ff.heatmaps_figure(nodes), ""


def heatmaps_view(reads: FlowData, trial: str | None, chain: str | None,
                  unit: dict | None) -> tuple:
    """The heatmaps, the unit's line, and the box offering the unit's row when its flow
    is stored without it (style, text)."""
    flows = reads.chain_data(trial, chain) if trial is not None else []
    picked = fe.checked_unit(unit, chain, ff.chain_nodes(flows))
    figure, text = heatmaps_figure(trial, chain, flows, picked)
    hidden = {"display": "none"}
    if trial is None or picked is None:
        return figure, text, hidden, ""
    lacking = ff.missing_row(flows, *picked)
    if lacking is None:
        return figure, text, hidden, ""
    info = lacking.info
    known = "no full matrix" if info.status != ff.PARTIAL else (
        f"only the rows of {len(info.rows or ())} units")
    offer = (f"{info.source} → {info.target} has {known} stored "
             f"({info.full_entries:,} entries: too large to compute whole). Its row for "
             f"{info.target} unit {picked[1]} takes one backward pass in the process "
             "serving probes.")
    if not reads.serving(trial).alive:
        offer += " " + reads.nobody_serves(trial)
    return figure, text, {"display": "block"}, offer


def ask_row(reads: FlowData, trial: str, chain: str | None, unit: dict | None) -> Any:
    """Write the request for the picked unit's row: what was asked (with the request id
    or the error), or no_update when there is nothing to ask for."""
    flows = reads.chain_data(trial, chain)
    picked = fe.checked_unit(unit, chain, ff.chain_nodes(flows))
    if picked is None:
        return no_update
    lacking = ff.missing_row(flows, *picked)
    if lacking is None:
        return no_update  # served meanwhile
    asked = {"trial": trial, "node": picked[0], "unit": picked[1]}
    try:
        request_id = reads.request_row(trial, lacking.info.record_id, picked[1])
    except ComgraError as e:
        return {**asked, "error": str(e)}
    return {**asked, "request_id": request_id}


def row_status(reads: FlowData, asked: Any) -> str:
    """The state of the row request the button wrote."""
    if not isinstance(asked, Mapping) or not asked:
        return ""
    what = f"the row of {asked.get('node')} unit {asked.get('unit')}"
    if asked.get("error"):
        return f"Not asked for {what}: {asked['error']}"
    trial, request_id = asked.get("trial"), asked.get("request_id")
    if trial not in reads.data.trial_ids() or not isinstance(request_id, str):
        return ""
    request = reads.row_request(trial, request_id)
    if request is None:
        return f"Asked for {what}; its request cannot be read."
    if request.status == DONE:
        took = f" in {request.seconds:.2f} s" if request.seconds is not None else ""
        note = f" Note: {request.note}." if request.note else ""
        return f"Computed {what}{took} in the serving process: shown above.{note}"
    if request.status == FAILED:
        return f"The serving process could not compute {what}: {request.error}"
    alive = reads.serving(trial)
    if alive.alive:
        return f"Computing {what} in the serving process (pid {alive.pid})…"
    return (f"Asked for {what} (request {request.request_id}). "
            f"{reads.nobody_serves(trial)} It answers the request when it starts.")


def edit_view(reads: FlowData, trial: str | None, chain: str | None, on_editor: bool,
              click: Any, state: Any, z: Any, mode: str | None) -> tuple:
    """The edit state, the editor's figure and the status line; ``on_editor``: a click
    on the editor (``click``, its clickData) triggered the call (else a new chain or
    Reset shows the stored input)."""
    try:
        stored = reads.editable(trial, chain)
    except ComgraError as e:
        return None, empty_figure("No input to edit for this chain.", 200), str(e)
    if stored is None:
        return None, empty_figure("No input to edit for this chain.", 200), ""
    values = stored.values
    if on_editor and isinstance(state, Mapping) and state.get("chain") == chain:
        # the browser's state is checked against the stored input before any use
        try:
            values = fe.edited_values(state, stored)
            z = fe.checked_z(z)
        except ComgraError as e:
            return no_update, no_update, f"Edit refused: {e}"
        unit = unit_of_point(clicked_point(click), stored.shape)
        if unit is None:
            return no_update, no_update, no_update
        values = (ff.paint(values, [unit], z) if mode == "paint"
                  else ff.toggle(values, unit, z))
    changed = int((values != stored.values).sum())
    figure = ff.editor_figure(values, original=stored.values, title=(
        f"{stored.node} of sample {stored.sample} · {changed} cell"
        f"{'s' if changed != 1 else ''} edited"))
    return fe.editor_state(stored, values), figure, ""


def save_view(reads: FlowData, trial: str | None, clicks: int | None, state: Any,
              note: Any) -> tuple:
    """Save the edit: (saved, status line, the new origin)."""
    chain = state.get("chain") if isinstance(state, Mapping) else None
    try:
        stored = reads.editable(trial, chain) if clicks else None
        if stored is None:
            return (no_update, "Nothing to save: choose a chain with an input first.",
                    no_update)
        probe_id = reads.save_edit(trial, stored, state, note or "")
    except ComgraError as e:
        return no_update, f"Not saved: {e}", no_update
    # the request is on disk: the origin's options list it at once
    return ({"probe_id": probe_id, "clicks": clicks},
            f"Saved as {probe_id}; its flows appear when the serving process has run it.",
            probe_id)
