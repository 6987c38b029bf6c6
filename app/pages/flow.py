"""Flow page (issue 18): how gradient moves along a chain of nodes, and the probe loop.

For the trial of the top bar: an origin (the recorded run, or one edit of the input in
the history of probes), a step and a chain of stored flows. The Sankey draws the flows
between the units of consecutive nodes above a threshold (a slider, relative to the
largest link), units grouped in blocks when a node has more than the chosen number; the
summary says the threshold, the grouping and the links of each pair, and which pairs
are partial (only some units' rows computed). Beside it, when the origin is an edit,
the same chain before that edit. Below: the gradient at each node as heatmaps; a click
on a unit outlines the units it exchanges gradient with in the other nodes.

The probe loop: the input of the chain's first node for the sample is an editable
heatmap (a click toggles a cell between 0 and z, or paints z); Save stores it with
``comgra_like.format.flows.submit_input`` (no torch) for the process running
``comgra_like.probe.serve``; the page selects the new edit and shows its flows once that
process has stored them (the lists are read again at every refresh tick).

Rows on demand: a flow above the bound of entries is stored without its matrix. A click
on a unit of its target says so and offers to compute that unit's row; the button writes
a request (``comgra_like.format.flow_requests``, no torch) that the same serving process
answers with one backward pass, and the row joins the flow at the next tick (Sankey,
outline). The serving process's heartbeat tells the page whether anyone will answer:
when nobody serves the trial, the page says how to start a serving process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import dash
import numpy as np
from dash import Input, Output, State, dcc, html, no_update

from comgra_like.errors import ComgraError
from comgra_like.format import flow_requests as fr
from comgra_like.format.flows import DONE, FAILED, PENDING, submit_input

from .. import flow_edits as fe
from .. import flow_figures as ff
from .. import ids, other_trials
from ..figures import empty_figure
from ..parts import AppParts
from .page import Page

PATH = "/flow"
NAME = "Flow"

# ids of this page
ORIGIN = "flow-origin"
PREVIOUS = "flow-previous"
FOLLOWING = "flow-following"
HISTORY = "flow-history"
STEP = "flow-step"
CHAIN = "flow-chain"
THRESHOLD = "flow-threshold"
MAX_UNITS = "flow-max-units"
SUMMARY = "flow-summary"
SANKEY = "flow-sankey"
BEFORE = "flow-before"
BEFORE_BOX = "flow-before-box"
BEFORE_CHAIN = "flow-before-chain"  # dcc.Store: the chain of the entry before the edit
HEATMAPS = "flow-heatmaps"
UNIT = "flow-unit"  # dcc.Store: {"chain", "node", "unit"} clicked on a heatmap
UNIT_INFO = "flow-unit-info"
EDITOR = "flow-editor"
EDIT = "flow-edit"  # dcc.Store: the sample's input being edited
Z_VALUE = "flow-z"
MODE = "flow-mode"
NOTE = "flow-note"
SAVE = "flow-save"
RESET = "flow-reset"
SAVED = "flow-saved"  # dcc.Store: the probe the last Save submitted
SAVE_STATUS = "flow-save-status"
EDIT_STATUS = "flow-edit-status"  # why an edit was refused
LISTS_KEY = "flow-lists-key"
ROW_BOX = "flow-row-box"  # shown when the clicked unit's row is not stored
ROW_TEXT = "flow-row-text"
ROW_BUTTON = "flow-row-button"
ROW_ASKED = "flow-row-asked"  # dcc.Store: the row request the button wrote
ROW_STATUS = "flow-row-status"

RUN = "__run__"  # the origin "recorded run"; names starting with "__" are never probe ids
MAX_UNITS_CHOICES = (16, 32, 64, 128, 256, 1024)
DEFAULT_SLIDER = -2.0


def layout() -> html.Div:
    marks = {s: f"{10.0 ** s:g}" for s in range(int(ff.SLIDER_MIN), int(ff.SLIDER_MAX) + 1)}
    return html.Div(
        [
            html.Div(
                [
                    html.Span("Origin", className="sel-label me-2"),
                    html.Button("◀", id=PREVIOUS, n_clicks=0, title="earlier edit",
                                className="btn btn-outline-secondary btn-sm sel-nav"),
                    dcc.Dropdown(id=ORIGIN, options=[], value=RUN, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "18rem"}),
                    html.Button("▶", id=FOLLOWING, n_clicks=0, title="later edit",
                                className="btn btn-outline-secondary btn-sm sel-nav me-3"),
                    html.Span("Step", className="sel-label me-2"),
                    dcc.Dropdown(id=STEP, options=[], value=None, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "6rem"}),
                    html.Span("Chain", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=CHAIN, options=[], value=None, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "20rem"}),
                ],
                className="d-flex align-items-center flex-wrap mb-1 flow-controls",
            ),
            html.Div(id=HISTORY, className="text-muted small mb-1"),
            html.Div(
                [
                    html.Span("Threshold (× largest link)", className="sel-label me-2"),
                    html.Div(dcc.Slider(id=THRESHOLD, min=ff.SLIDER_MIN, max=ff.SLIDER_MAX,
                                        step=0.1, value=DEFAULT_SLIDER, marks=marks,
                                        updatemode="drag"),
                             style={"width": "22rem"}),
                    html.Span("units per node at most", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=MAX_UNITS, value=ff.DEFAULT_MAX_UNITS, clearable=False,
                                 options=[{"label": str(n), "value": n}
                                          for n in MAX_UNITS_CHOICES],
                                 className="sel-dropdown", style={"minWidth": "6rem"}),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            html.Div(id=SUMMARY, className="small flow-summary mb-1"),
            html.Div(
                [
                    html.Div(dcc.Graph(id=SANKEY, figure=empty_figure("Loading…", 420),
                                       config={"displaylogo": False}),
                             style={"flex": "1 1 45%", "minWidth": "420px"}),
                    html.Div(dcc.Graph(id=BEFORE, figure=empty_figure("", 420),
                                       config={"displaylogo": False}),
                             id=BEFORE_BOX, style={"flex": "1 1 45%", "minWidth": "420px",
                                                   "display": "none"}),
                ],
                className="d-flex flex-wrap",
            ),
            html.Div("Gradient at each node: click a unit to outline the units it exchanges "
                     "gradient with.", className="text-muted small"),
            dcc.Graph(id=HEATMAPS, figure=empty_figure("", 300),
                      config={"displaylogo": False}),
            html.Div(id=UNIT_INFO, className="small mb-1"),
            html.Div([html.Span(id=ROW_TEXT, className="me-2"),
                      html.Button("compute this unit's row", id=ROW_BUTTON, n_clicks=0,
                                  className="btn btn-outline-primary btn-sm")],
                     id=ROW_BOX, className="small mb-1", style={"display": "none"}),
            html.Div(id=ROW_STATUS, className="small mb-2"),
            html.H6("Edit the input and see the new flow", className="mt-2"),
            html.Div(
                [
                    html.Div(dcc.Graph(id=EDITOR, figure=empty_figure("", 320),
                                       config={"displaylogo": False}),
                             style={"flex": "0 1 480px"}),
                    html.Div(
                        [
                            dcc.RadioItems(
                                id=MODE, value="toggle", inputClassName="me-1",
                                labelClassName="me-3 d-block",
                                options=[{"label": "click toggles 0 ↔ z", "value": "toggle"},
                                         {"label": "click paints z", "value": "paint"}]),
                            html.Div([html.Span("z ", className="sel-label me-1"),
                                      dcc.Input(id=Z_VALUE, type="number", value=1.0,
                                                debounce=True, style={"width": "7rem"})],
                                     className="my-1"),
                            dcc.Input(id=NOTE, type="text", placeholder="note (optional)",
                                      style={"width": "14rem"}, className="my-1"),
                            html.Div([
                                html.Button("Save", id=SAVE, n_clicks=0,
                                            className="btn btn-primary btn-sm me-2"),
                                html.Button("Reset", id=RESET, n_clicks=0,
                                            className="btn btn-outline-secondary btn-sm"),
                            ], className="my-1"),
                            html.Div(id=EDIT_STATUS, className="small text-danger"),
                            html.Div(id=SAVE_STATUS, className="small"),
                        ],
                        className="ms-3",
                    ),
                ],
                className="d-flex flex-wrap align-items-start",
            ),
            dcc.Store(id=UNIT, storage_type="memory"),
            dcc.Store(id=EDIT, storage_type="memory"),
            dcc.Store(id=SAVED, storage_type="memory"),
            dcc.Store(id=BEFORE_CHAIN, storage_type="memory"),
            dcc.Store(id=LISTS_KEY, storage_type="memory"),
            dcc.Store(id=ROW_ASKED, storage_type="memory"),
        ],
        className="page-padded",
    )


# --- pure pieces ----------------------------------------------------------------------


def origin_of(info: Any) -> str:
    return RUN if info.probe_id is None else info.probe_id


def history(probes: Sequence[Any]) -> list[dict]:
    """The origins in order: the recorded run, then every edit (oldest first)."""
    entries = [{"label": "recorded run", "value": RUN}]
    for k, p in enumerate(probes, 1):
        note = f" · {p.note}" if p.note else ""
        entries.append({"label": f"edit {k} ({p.status}){note}", "value": p.probe_id})
    return entries


def newest_unseen(values: Sequence[Any], trial: str | None, shown: Any) -> Any:
    """The newest edit of ``values`` that the listing shown before (``shown``, the
    LISTS_KEY of the same trial) did not have, or None. A new edit is followed: an
    interval tick whose call of ``lists`` left before Save and returns after it must not
    take the origin back to the edit shown before."""
    if not (isinstance(shown, list) and len(shown) > 2 and shown[0] == trial
            and isinstance(shown[2], list)):
        return None
    seen = {p[0] for p in shown[2] if isinstance(p, list) and p}
    new = [v for v in values[1:] if v not in seen]
    return new[-1] if new else None


def chains_of(flows: Sequence[Any]) -> dict[str, list[Any]]:
    """The flows by chain id, each chain in order of position (oldest chain first)."""
    chains: dict[str, list[Any]] = {}
    for f in flows:
        chains.setdefault(f.chain_id, []).append(f)
    return {c: sorted(fs, key=lambda f: f.position) for c, fs in chains.items()}


def chain_label(flows: Sequence[Any]) -> str:
    names = [flows[0].source] + [f.target for f in flows] if flows else []
    return f"{' → '.join(names)} (sample {flows[0].sample})" if flows else ""


def chain_names(flows: Sequence[Any]) -> list[str]:
    return [flows[0].source] + [f.target for f in flows] if flows else []


def unit_of_point(point: Mapping[str, Any], shape: Sequence[int]) -> int | None:
    """The unit a click on a heatmap cell of a node of ``shape`` names: by the cell's
    column and row (x, y), or its customdata when those are missing."""
    if not isinstance(point, Mapping):
        return None
    x, y = point.get("x"), point.get("y")
    if _finite(x) and _finite(y):
        return ff.map_layout(shape).unit_at(round(y), round(x))
    unit = point.get("customdata")
    n = math.prod(shape) if shape else 1
    return int(unit) if _finite(unit) and 0 <= unit < n else None


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def clicked_point(click: Any) -> Mapping[str, Any]:
    """The first point of a graph's clickData (an empty mapping for anything else)."""
    points = click.get("points") if isinstance(click, Mapping) else None
    point = points[0] if isinstance(points, list) and points else None
    return point if isinstance(point, Mapping) else {}


def probe_text(probe: Any, k: int, total: int) -> str:
    head = f"edit {k} of {total}"
    if probe.status == PENDING:
        return (f"{head}: pending — waiting for the process serving probes "
                "(comgra_like.probe.serve) to run it")
    if probe.status == FAILED:
        return f"{head}: failed — {probe.error}"
    seconds = f" in {probe.seconds:.2f} s" if probe.seconds is not None else ""
    return f"{head}: done{seconds}" + (f" · {probe.note}" if probe.note else "")


# --- callbacks ------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    def trial_of(selection: Any) -> str | None:
        current = selection.get("current") if isinstance(selection, Mapping) else None
        trial = current.get("trial") if isinstance(current, Mapping) else None
        return trial if isinstance(trial, str) else None

    def listed(trial: str) -> tuple[list, list]:
        group = data.group
        if group is None or trial not in data.trial_ids():
            return [], []
        flows = data.safely(f"flows of {trial}", lambda: group.read_flows(trial), [])
        probes = data.safely(f"probes of {trial}", lambda: group.read_probes(trial), [])
        return flows, probes

    def chain_data(trial: str, chain: str | None) -> list:
        """The FlowData of a chain, in order (memory-mapped arrays)."""
        if not isinstance(chain, str) or data.group is None:
            return []
        flows, _ = listed(trial)
        by_chain = chains_of(flows)
        out = []
        for f in by_chain.get(chain, []):
            stored = data.group.read_flow(trial, f.record_id)
            answers = by_chain.get(fr.rows_chain_id(f.record_id), [])
            out.append(ff.with_rows(stored, [data.group.read_flow(trial, a.record_id)
                                             for a in answers]))
        return out

    def serving(trial: str) -> fr.Serving:
        return data.safely(f"the serving process of {trial}",
                           lambda: fr.serving(data.path, trial),
                           fr.Serving(False, None, None, None, None, None))

    def nobody_serves(trial: str) -> str:
        return (f"No process is serving probes for {trial}: "
                f"{fr.how_to_serve(data.path, trial)}.")

    @app.callback(
        Output(ORIGIN, "options"),
        Output(ORIGIN, "value"),
        Output(STEP, "options"),
        Output(STEP, "value"),
        Output(CHAIN, "options"),
        Output(CHAIN, "value"),
        Output(BEFORE_CHAIN, "data"),
        Output(HISTORY, "children"),
        Output(LISTS_KEY, "data"),
        Input(ids.TICK, "n_intervals"),
        Input(ids.SELECTION, "data"),
        Input(ORIGIN, "value"),
        Input(STEP, "value"),
        Input(CHAIN, "value"),
        State(LISTS_KEY, "data"),
    )
    def lists(_tick: Any, selection: dict | None, origin: str | None, step: int | None,
              chain: str | None, shown: Any) -> tuple:
        trial = trial_of(selection)
        chain = chain if isinstance(chain, str) else None  # the browser's: a key below
        every, probes = listed(trial) if trial else ([], [])
        # rows served on demand join the flow they complete (chain_data): no chain of theirs
        flows = [f for f in every if not fr.is_rows_chain(f.chain_id)]
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
            if probes[at - 1].status == PENDING and not serving(trial).alive:
                text += " · " + nobody_serves(trial)
        if not flows and trial:
            text = (f"No gradient flows stored for {trial}: compute them with "
                    "comgra_like.record.flow (FlowChain, write_flows) or serve probes."
                    + other_trials.hint(other_trials.with_flows(data), trial, "flows"))
        key = [trial, [f.record_id for f in every], [(p.probe_id, p.status) for p in probes],
               origin, step, chain, before, text]
        if key == shown:
            return (no_update,) * 9
        step_options = [{"label": "—" if s is None else str(s), "value": s} for s in steps]
        return (entries, origin, step_options, step, chain_options, chain, before, text, key)

    # The history's buttons and Save set the origin in callbacks of their own: a click
    # sent while a tick's call of ``lists`` is on its way would be dropped with it.
    @app.callback(
        Output(ORIGIN, "value", allow_duplicate=True),
        Input(PREVIOUS, "n_clicks"),
        Input(FOLLOWING, "n_clicks"),
        State(ORIGIN, "value"),
        State(ORIGIN, "options"),
        prevent_initial_call=True,
    )
    def step_history(_p: Any, _f: Any, origin: str | None, options: list | None) -> Any:
        values = [o.get("value") for o in options if isinstance(o, Mapping)] if isinstance(
            options, list) else []
        if origin not in values:
            return no_update
        at = values.index(origin)
        triggered = set(dash.callback_context.triggered_prop_ids)
        if f"{PREVIOUS}.n_clicks" in triggered and at > 0:
            return values[at - 1]
        if f"{FOLLOWING}.n_clicks" in triggered and at < len(values) - 1:
            return values[at + 1]
        return no_update

    @app.callback(
        Output(SANKEY, "figure"),
        Output(BEFORE, "figure"),
        Output(BEFORE_BOX, "style"),
        Output(SUMMARY, "children"),
        Input(CHAIN, "value"),
        Input(BEFORE_CHAIN, "data"),
        Input(THRESHOLD, "value"),
        Input(MAX_UNITS, "value"),
        Input(HISTORY, "children"),
        Input(LISTS_KEY, "data"),  # rows served on demand join the chain
        State(ids.SELECTION, "data"),
    )
    def show_sankey(chain: str | None, before: str | None, slider: float | None,
                    max_units: int | None, history_text: Any, _lists: Any,
                    selection: dict | None) -> tuple:
        started = time.perf_counter()
        result = sankey_view(trial_of(selection), chain, before, slider, max_units,
                             history_text)
        parts.timings.record("flow.sankey", time.perf_counter() - started)
        return result

    def grouped(trial: str, flows: list, max_units: int) -> list:
        """The chain grouped in blocks; cached per record (records never change)."""
        blocks = ff.chain_blocks(flows, max_units)
        out = []
        for f in flows:
            key = ("flow_grouped", trial, f.info.record_id, f.info.rows, blocks[f.info.source],
                   blocks[f.info.target])
            out.append(data.cached(key, lambda f=f: ff.grouped_flow(
                f, blocks[f.info.source], blocks[f.info.target]),
                size=lambda g: 512 + (g.matrix.nbytes if g.matrix is not None else 0)))
        return out

    def sankey_view(trial: str | None, chain: str | None, before: str | None,
                    slider: float | None, max_units: int | None, history_text: Any) -> tuple:
        hidden = {"flex": "1 1 45%", "minWidth": "420px", "display": "none"}
        if trial is None or chain is None:
            message = history_text if isinstance(history_text, str) and history_text else (
                "No trial selected." if trial is None else "No flows to show.")
            return empty_figure(message, 420), no_update, hidden, ""
        max_units = fe.checked_count(max_units, 1, max(MAX_UNITS_CHOICES),
                                     ff.DEFAULT_MAX_UNITS)
        slider = fe.checked_slider(slider, ff.SLIDER_MIN, ff.SLIDER_MAX, DEFAULT_SLIDER)
        flows = chain_data(trial, chain)
        if not flows:
            return empty_figure("No flows to show.", 420), no_update, hidden, ""
        groups = grouped(trial, flows, max_units)
        blocks = ff.chain_blocks(flows, max_units)
        shapes = {n.name: n.shape for n in ff.chain_nodes(flows)}
        threshold = ff.threshold_for(slider, ff.largest_link(groups))
        model = ff.sankey_model(groups, shapes, threshold)
        figure = ff.sankey_figure(model, title=f"{chain_label([f.info for f in flows])}")
        lines = ff.summary_lines(model, shapes, blocks)
        before_figure, style = no_update, hidden
        if before is not None:
            earlier = chain_data(trial, before)
            if earlier:
                old = ff.sankey_model(grouped(trial, earlier, max_units), shapes, threshold)
                before_figure = ff.sankey_figure(old, title="before this edit")
                style = {"flex": "1 1 45%", "minWidth": "420px"}
                lines.append(f"before this edit: {len(old.link_value)} links drawn at the "
                             "same threshold")
        summary = [html.Div(line, className="flow-summary-line") for line in lines]
        return figure, before_figure, style, summary

    @app.callback(
        Output(UNIT, "data"),
        Input(HEATMAPS, "clickData"),
        State(CHAIN, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def pick_unit(click: Any, chain: str | None, selection: dict | None) -> Any:
        point = clicked_point(click)
        trial = trial_of(selection)
        if chain is None or trial is None:
            return no_update
        nodes = ff.chain_nodes(chain_data(trial, chain))
        k = point.get("curveNumber")
        if type(k) is not int or not 0 <= k < len(nodes):
            return no_update  # an outline, not a heatmap
        unit = unit_of_point(point, nodes[k].shape)
        if unit is None:
            return no_update
        return {"chain": chain, "node": nodes[k].name, "unit": unit}

    @app.callback(
        Output(HEATMAPS, "figure"),
        Output(UNIT_INFO, "children"),
        Output(ROW_BOX, "style"),
        Output(ROW_TEXT, "children"),
        Input(CHAIN, "value"),
        Input(UNIT, "data"),
        Input(LISTS_KEY, "data"),  # a row served on demand: outline with it
        State(ids.SELECTION, "data"),
    )
    def show_heatmaps(chain: str | None, unit: dict | None, _lists: Any,
                      selection: dict | None) -> tuple:
        trial = trial_of(selection)
        flows = chain_data(trial, chain) if trial is not None else []
        picked = fe.checked_unit(unit, chain, ff.chain_nodes(flows))
        figure, text = heatmaps_view(trial, chain, flows, picked)
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
        if not serving(trial).alive:
            offer += " " + nobody_serves(trial)
        return figure, text, {"display": "block"}, offer

    @app.callback(
        Output(ROW_ASKED, "data"),
        Input(ROW_BUTTON, "n_clicks"),
        State(UNIT, "data"),
        State(CHAIN, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def ask_row(clicks: int | None, unit: dict | None, chain: str | None,
                selection: dict | None) -> Any:
        trial = trial_of(selection)
        if not clicks or trial is None:
            return no_update
        flows = chain_data(trial, chain)
        picked = fe.checked_unit(unit, chain, ff.chain_nodes(flows))
        if picked is None:
            return no_update
        lacking = ff.missing_row(flows, *picked)
        if lacking is None:
            return no_update  # served meanwhile
        asked = {"trial": trial, "node": picked[0], "unit": picked[1]}
        try:
            parts.refuse_writes("write row requests into the group")
            request_id = fr.request_rows(data.path, trial, lacking.info.record_id,
                                         [picked[1]])
        except ComgraError as e:
            return {**asked, "error": str(e)}
        return {**asked, "request_id": request_id}

    @app.callback(
        Output(ROW_STATUS, "children"),
        Input(ids.TICK, "n_intervals"),
        Input(ROW_ASKED, "data"),
    )
    def row_status(_tick: Any, asked: dict | None) -> Any:
        if not isinstance(asked, Mapping) or not asked:
            return ""
        what = f"the row of {asked.get('node')} unit {asked.get('unit')}"
        if asked.get("error"):
            return f"Not asked for {what}: {asked['error']}"
        trial, request_id = asked.get("trial"), asked.get("request_id")
        if trial not in data.trial_ids() or not isinstance(request_id, str):
            return ""
        request = data.safely(f"row request of {trial}", lambda: fr.read_request(
            data.path, trial, request_id), None)
        if request is None:
            return f"Asked for {what}; its request cannot be read."
        if request.status == DONE:
            took = f" in {request.seconds:.2f} s" if request.seconds is not None else ""
            note = f" Note: {request.note}." if request.note else ""
            return f"Computed {what}{took} in the serving process: shown above.{note}"
        if request.status == FAILED:
            return f"The serving process could not compute {what}: {request.error}"
        alive = serving(trial)
        if alive.alive:
            return f"Computing {what} in the serving process (pid {alive.pid})…"
        return (f"Asked for {what} (request {request.request_id}). "
                f"{nobody_serves(trial)} It answers the request when it starts.")

    def heatmaps_view(trial: str | None, chain: str | None, flows: list,
                      picked: tuple[str, int] | None) -> tuple:
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

    def editable(trial: str | None, chain: Any) -> fe.StoredInput | None:
        """What an edit of ``chain`` must look like, from the stored chain (never from the
        browser): its first node's input for the sample, its origin, step and shape."""
        if trial is None or not isinstance(chain, str):
            return None
        return fe.stored_input(chain, chain_data(trial, chain))

    @app.callback(
        Output(EDIT, "data"),
        Output(EDITOR, "figure"),
        Output(EDIT_STATUS, "children"),
        Input(CHAIN, "value"),
        Input(EDITOR, "clickData"),
        Input(RESET, "n_clicks"),
        State(EDIT, "data"),
        State(Z_VALUE, "value"),
        State(MODE, "value"),
        State(ids.SELECTION, "data"),
    )
    def edit(chain: str | None, click: Any, _reset: Any, state: Any, z: Any,
             mode: str | None, selection: dict | None) -> tuple:
        trigger = dash.callback_context.triggered_id
        try:
            stored = editable(trial_of(selection), chain)
        except ComgraError as e:
            return None, empty_figure("No input to edit for this chain.", 200), str(e)
        if stored is None:
            return None, empty_figure("No input to edit for this chain.", 200), ""
        values = stored.values
        if trigger == EDITOR and isinstance(state, Mapping) and state.get("chain") == chain:
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

    @app.callback(
        Output(SAVED, "data"),
        Output(SAVE_STATUS, "children"),
        Output(ORIGIN, "value", allow_duplicate=True),
        Input(SAVE, "n_clicks"),
        State(EDIT, "data"),
        State(NOTE, "value"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def save(clicks: int | None, state: Any, note: Any, selection: dict | None) -> tuple:
        trial = trial_of(selection)
        chain = state.get("chain") if isinstance(state, Mapping) else None
        try:
            stored = editable(trial, chain) if clicks else None
            if stored is None:
                return (no_update, "Nothing to save: choose a chain with an input first.",
                        no_update)
            parts.refuse_writes("save edited inputs into the group")
            values = fe.edited_values(state, stored)
            batch, sample = edited_batch(trial, stored, values)
            # like=: submit_input checks the batch against the chain's recorded input
            probe_id = submit_input(data.path, trial, batch, training_step=stored.step,
                                    sample=sample, note=note or "", like=stored.record_id)
        except ComgraError as e:
            return no_update, f"Not saved: {e}", no_update
        # the request is on disk: the origin's options list it at once
        return ({"probe_id": probe_id, "clicks": clicks},
                f"Saved as {probe_id}; its flows appear when the serving process has run it.",
                probe_id)

    def edited_batch(trial: str, stored: fe.StoredInput,
                     values: np.ndarray) -> tuple[np.ndarray, int]:
        """The array handed to the served function: an edit's whole batch with this
        sample replaced, or (from the recorded run, which stores only the sample) a batch
        of this one sample. float32, as the chain's input is recorded."""
        group = data.group
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


PAGE = Page(PATH, NAME, layout, register_callbacks)
