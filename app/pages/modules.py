"""Modules page (issue 15): what ``comgra_like.watch`` recorded, module by module.

Top: one level of the module graph (torchexplorer's explorer): the viewed module's
inputs and outputs, one node per child invocation, an edge where an autograd path leads
from one to the other. A click on a module picks it for the histograms and, when it has
modules inside, opens it; the breadcrumb goes back up. Below: one panel per picked
module, side by side, its histograms over time (io / io_grad / params / params_grad, the
role and the recording types chosen per panel: several gradient groups, e.g. a second
backward pass, together), optionally with the same module of a second trial; the
trials and groups of a panel side by side or overlaid in one plot (the first as
colours, the others as contour lines).

A module's outputs are nodes of the dependency graph (node = the invocation's id), so
"Tensors page" on a panel opens that node there; coming back, the page opens the level
of the node the Tensors page shows. Live: every view depends on the data status, and
the reads are cached per data version of the trial (``module_data``).

A distributed recording has a rank selector (hidden for one rank): the lowest rank by
default, any one rank, every rank side by side (one grid per rank in a panel, or
overlaid) or every rank merged (counts added; re-binned where the ranks' bin edges
differ, as each rank bins its own range: said in the panel's title).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import dash
from dash import ALL, MATCH, Input, Output, State, dcc, html, no_update

from comgra_like.vocabulary import ANY_TYPE

from .. import ids, module_data, module_sharing, other_trials
from .. import module_figures as mf
from .. import selection as sel
from ..figures import empty_figure
from ..parts import AppParts
from ..plot_text import plot_text
from .page import Page
from .tensors import PATH as TENSORS_PATH

PATH = "/modules"
NAME = "Modules"

# ids of this page
GRAPH = "modules-graph"
CRUMBS = "modules-breadcrumb"
INFO = "modules-info"
REPORT = "modules-report"
PICK = "modules-pick"
COMPARE = "modules-compare"
EXECUTION = "modules-execution"
MODE = "modules-mode"  # the trials and gradient groups of a panel: side by side or overlaid
LOG = "modules-log"
PANELS = "modules-panels"
VIEW = "modules-view"  # dcc.Store (session): {"trial", "parent", "picked", "from_node"}
KEY = "modules-key"
RANK = "modules-rank"  # one rank, every rank side by side, or merged
RANK_BOX = "modules-rank-box"
NO_TRIAL = "__none__"  # names starting with "__" are reserved: never a trial id
SIDE_BY_SIDE = "side"
OVERLAID = "overlay"

#: At most this many histogram panels side by side (a click adds one in front).
MAX_PANELS = 4


def crumb_id(module: Any) -> dict:
    return {"type": "modules-crumb", "module": module}


def panel_id(kind: str, module: Any) -> dict:
    """The ids of a histogram panel's parts: kind in what, role, graph, key, open."""
    return {"type": f"modules-{kind}", "module": module}


def layout() -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Nav(id=CRUMBS, className="modules-breadcrumb me-3"),
                    html.Span(id=INFO, className="text-muted small"),
                ],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            dcc.Graph(
                id=GRAPH,
                figure=empty_figure("Loading…", height=200),
                config={"displaylogo": False, "scrollZoom": True},
                className="modules-graph",
            ),
            html.Div(id=REPORT, className="small mb-2"),
            html.Div(
                [
                    html.Span("Histograms of", className="sel-label me-2"),
                    dcc.Dropdown(id=PICK, options=[], value=[], multi=True,
                                 placeholder="click a module above", className="sel-dropdown",
                                 style={"minWidth": "22rem"}),
                    html.Span("next to trial", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=COMPARE, options=[{"label": "none", "value": NO_TRIAL}],
                                 value=NO_TRIAL, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "12rem"},
                                 persistence=True, persistence_type="session"),
                    dcc.RadioItems(id=MODE, options=[
                        {"label": " side by side", "value": SIDE_BY_SIDE},
                        {"label": " overlaid", "value": OVERLAID}],
                        value=SIDE_BY_SIDE, inline=True, className="ms-2",
                        inputClassName="me-1", labelClassName="me-2",
                        persistence=True, persistence_type="session"),
                    html.Span("steps", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=EXECUTION, options=[], value=None, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "10rem"},
                                 persistence=True, persistence_type="session"),
                    dcc.Checklist(id=LOG, options=[{"label": " log colour", "value": "log"}],
                                  value=[], className="ms-3", inputClassName="me-1",
                                  persistence=True, persistence_type="session"),
                    html.Span(
                        [html.Span("ranks", className="sel-label ms-3 me-2"),
                         dcc.Dropdown(id=RANK, options=[], value=None, clearable=False,
                                      className="sel-dropdown", style={"minWidth": "13rem"})],
                        id=RANK_BOX, className="align-items-center",  # no d-flex
                        style={"display": "none"}),
                ],
                className="d-flex align-items-center flex-wrap mb-2 modules-controls",
            ),
            html.Div(id=PANELS, className="d-flex flex-wrap modules-panels",
                     style={"gap": "8px"}),
            dcc.Store(id=VIEW, storage_type="session"),
            dcc.Store(id=KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


# --- pure pieces ----------------------------------------------------------------------


def breadcrumb_bar(crumbs: Any) -> list:
    """The way up: every level but the last is a link-styled button."""
    parts: list = []
    for i, (label, module) in enumerate(crumbs):
        if i:
            parts.append(html.Span(" › ", className="text-muted"))
        if i == len(crumbs) - 1:
            parts.append(html.Strong(label, className="modules-crumb-current"))
        else:
            parts.append(html.Button(label, id=crumb_id(module), n_clicks=0,
                                     className="btn btn-link btn-sm p-0 modules-crumb"))
    return parts


def report_view(report: Mapping[str, Any] | None,
                shares: Mapping[str, Any] | None = None) -> Any:
    """'Why is this empty?': the modules watch skipped, and why (and, for a module that
    holds a shared parameter, where that parameter is shown)."""
    if not report:
        return None
    skipped = list(report.get("skipped") or ())
    hooked = list(report.get("hooked") or ())
    summary = f"{len(hooked)} module{'s' if len(hooked) != 1 else ''} hooked"
    if not skipped:
        return html.Span(summary, className="text-muted")
    return html.Details(
        [
            html.Summary(f"{summary}, {len(skipped)} skipped"),
            html.Ul([html.Li([html.Code(str(s.get("module"))), f": {s.get('reason')}",
                              html.Span(f" ({s['detail']})", className="text-muted")
                              if s.get("detail") else None,
                              _shared_note(str(s.get("module")), shares)])
                     for s in skipped[:200]], className="mb-0"),
        ],
        className="modules-skipped",
    )


def _shared_note(module: str, shares: Mapping[str, Any] | None) -> Any:
    note = module_sharing.skipped_note(module, shares or {})
    return html.Span(f"; {note}", className="modules-shared-note") if note else None


def panel(module: str) -> html.Div:
    """One histogram panel: what, role and recording types (gradient groups) to show, the
    figure, a way to the Tensors page."""
    return html.Div(
        [
            html.Div(
                [
                    html.Strong(module, className="me-2"),
                    dcc.RadioItems(
                        id=panel_id("what", module),
                        options=[{"label": f" {w}", "value": w} for w in mf.WHATS],
                        value="io", inline=True, inputClassName="me-1", labelClassName="me-2",
                        persistence=True, persistence_type="session",
                    ),
                    dcc.Dropdown(id=panel_id("role", module), options=[], value=None,
                                 clearable=False, className="sel-dropdown",
                                 style={"minWidth": "8rem"}),
                    # several backward passes or loss groups: pick any of them together
                    dcc.Dropdown(id=panel_id("groups", module), options=[], value=[],
                                 multi=True, clearable=False, className="sel-dropdown",
                                 placeholder="recording type", style={"minWidth": "12rem"}),
                    html.Button("Tensors page ↗", id=panel_id("open", module), n_clicks=0,
                                className="btn btn-link btn-sm ms-auto",
                                title="show this module's output on the Tensors page"),
                ],
                className="d-flex align-items-center flex-wrap small",
                style={"gap": "4px"},
            ),
            dcc.Graph(id=panel_id("graph", module), figure=empty_figure("Loading…", 300),
                      config={"displaylogo": False}),
            dcc.Store(id=panel_id("key", module), storage_type="memory"),
        ],
        className="modules-panel border rounded p-1",
        style={"flex": "1 1 560px", "minWidth": "420px"},
        **{"data-module": module},
    )


def navigate(
    view: Mapping[str, Any] | None,
    graph: Mapping[str, Any] | None,
    trial: str | None,
    *,
    clicked: list | None = None,
    crumb: str | None = None,
    picked: list | None = None,
    node: str | None = None,
) -> dict:
    """The page's next view: a click on a module picks it (and opens it when it has
    modules inside) and closes the panels of the modules that contain it, a breadcrumb
    opens its level, the dropdown sets the picked modules,
    and a node the Tensors page shows (``node``, new since the last time) opens its level."""
    new = {"trial": trial, "parent": None, "picked": [], "from_node": None, **(view or {})}
    if new["trial"] != trial:
        new.update(trial=trial, parent=None)
    chosen = list(new["picked"] or [])
    if clicked:
        key, kind, opens = clicked[0], clicked[1], clicked[2]
        if kind == "module":
            # down into a container: the panels of the modules around it close (only the
            # clicked module's and those of other branches, picked to compare, stay)
            chosen = [key] + [m for m in chosen if m != key and not _contains(m, key)]
            if opens:
                new["parent"] = key
    elif crumb is not None:
        new["parent"] = crumb
    elif picked is not None:
        chosen = list(picked)
    elif node is not None and node != new["from_node"]:
        new["from_node"] = node
        found = mf.find_invocation(graph, node)
        if found is not None:
            new["parent"] = mf.parent_of(graph, found)
            chosen = [found] + [m for m in chosen if m != found]
    new["picked"] = chosen[:MAX_PANELS]
    return new


def _contains(outer: str, inner: str) -> bool:
    """Whether the invocation ``outer`` holds ``inner`` (by name: ``model.block#1`` holds
    ``model.block.conv1#1``)."""
    base = str(outer).split("#", 1)[0]
    return str(inner).split("#", 1)[0].startswith(base + ".")


def rank_options(ranks: list[int]) -> list[dict]:
    """The rank selector's options: none for one rank, else each rank, every rank side
    by side and every rank merged."""
    if len(ranks) <= 1:
        return []
    return [*({"label": f"rank {r}", "value": int(r)} for r in ranks),
            {"label": "all ranks side by side", "value": module_data.SIDE_BY_SIDE},
            {"label": "all ranks merged", "value": module_data.MERGED}]


def rank_for(rank: Any, ranks: list[int]) -> Any:
    """What a trial's histograms are read with: the choice when the trial has it (a
    trial of one rank: its rank), else None (the lowest rank)."""
    if rank in (module_data.SIDE_BY_SIDE, module_data.MERGED):
        return rank if len(ranks) > 1 else None
    return rank if rank in ranks else None


def steps_of_execution(steps: Mapping[int, Any], execution: str | None) -> set[int] | None:
    """The steps of one type of execution (None: every step)."""
    if execution in (None, ANY_TYPE):
        return None
    return {s for s, info in steps.items() if info.type_of_execution == execution}


# --- callbacks ------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    def current(selection: Mapping | None) -> Mapping:
        return (selection or {}).get("current") or {}

    @app.callback(
        Output(VIEW, "data"),
        Output(PICK, "value"),
        Output(PICK, "options", allow_duplicate=True),
        Input(GRAPH, "clickData"),
        Input(crumb_id(ALL), "n_clicks"),
        Input(PICK, "value"),
        Input(ids.SELECTION, "data"),
        State(VIEW, "data"),
        State(PICK, "options"),
        prevent_initial_call="initial_duplicate",
    )
    def move(click: Any, _crumbs: list, picked: list | None, selection: dict | None,
             view: dict | None, options: list | None) -> tuple:
        ctx = dash.callback_context
        trigger = ctx.triggered_id
        shown = current(selection)
        trial = shown.get("trial")
        kwargs: dict[str, Any] = {}
        if trigger == GRAPH:
            points = (click or {}).get("points") or [{}]
            kwargs["clicked"] = points[0].get("customdata")
        elif isinstance(trigger, Mapping) and trigger.get("type") == "modules-crumb":
            if not any(t.get("value") for t in ctx.triggered):
                return no_update, no_update, no_update  # a breadcrumb that appears
            kwargs["crumb"] = trigger["module"]
        elif trigger == PICK:
            offered = {o.get("value") for o in options or ()}
            dropped = set((view or {}).get("picked") or ()) - set(picked or ())
            if dropped - offered:
                # the dropdown dropped values its options did not have yet: not the user
                return no_update, no_update, no_update
            kwargs["picked"] = picked or []
        elif shown.get("node") is not None:
            kwargs["node"] = shown.get("node")
        graph = None
        if "node" in kwargs and trial is not None:
            graph = module_data.module_graph(data, trial, shown.get("training_step"))[1]
        new = navigate(view, graph, trial, **kwargs)
        # the picked modules among the options as the value arrives: a dropdown drops
        # values its options do not have (a module picked by a link from another page
        # arrives before this level's options)
        offered = [o.get("value") for o in options or ()]
        missing = [{"label": m, "value": m} for m in new["picked"] if m not in offered]
        return (new if new != view else no_update,
                new["picked"] if new["picked"] != (picked or []) else no_update,
                list(options or []) + missing if missing else no_update)

    @app.callback(
        Output(GRAPH, "figure"),
        Output(CRUMBS, "children"),
        Output(INFO, "children"),
        Output(REPORT, "children"),
        Output(PICK, "options"),
        Output(COMPARE, "options"),
        Output(EXECUTION, "options"),
        Output(EXECUTION, "value"),
        Output(KEY, "data"),
        Input(VIEW, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        State(EXECUTION, "value"),
        State(KEY, "data"),
    )
    def show_level(view: dict | None, status: Any, selection: dict | None,
                   execution: str | None, shown: Any) -> tuple:
        started = time.perf_counter()
        result = level(view, selection, execution, shown)
        if result[0] is not no_update:
            parts.timings.record("modules.level", time.perf_counter() - started)
        return result

    def level(view: dict | None, selection: dict | None, execution: str | None,
              shown: Any) -> tuple:
        shown_fields = current(selection)
        trial = shown_fields.get("trial")
        trials = data.trial_ids()
        view = view or {}
        # lists, not tuples: the key comes back from the store as JSON
        key = [trial, list(module_data.data_version(data, trial)) if trial else None,
               view.get("parent"), view.get("picked"),
               shown_fields.get("training_step"), trials, execution]
        if key == shown:
            return (no_update,) * 9
        compare = [{"label": "none", "value": NO_TRIAL}] + [
            {"label": t, "value": t} for t in trials if t != trial]
        types = data.types_of_execution(trial) if trial else ()
        executions = [{"label": "every type", "value": ANY_TYPE}] + [
            {"label": t, "value": t} for t in types]
        if execution not in [o["value"] for o in executions]:
            execution = _most_common_type(data.steps(trial)) if trial else ANY_TYPE
        if trial is None:
            message = empty_figure("No trial selected.", 200)
            return message, [], "", None, [], compare, executions, execution, key
        step, graph = module_data.module_graph(data, trial, shown_fields.get("training_step"))
        if graph is None:
            message = empty_figure(
                "No module graph in this trial: record with comgra_like.watch(model)."
                + other_trials.hint(other_trials.with_module_graphs(data), trial,
                                    "module graphs"), 200)
            return message, [], "", None, [], compare, executions, execution, key
        level = mf.level_view(graph, view.get("parent"))
        figure = mf.module_graph_figure(level, selected=view.get("picked") or ())
        options = [{"label": i, "value": i} for i in mf.invocations(graph) if i != mf.root_id(graph)]
        for m in view.get("picked") or ():
            if m not in mf.invocations(graph):
                options.append({"label": f"{m} (not in step {step})", "value": m})
        count = sum(1 for n in level.nodes if n.kind == "module")
        info = (f"structure of step {step} · {count} module call{'s' if count != 1 else ''} "
                "at this level · click a module to show its histograms (▸ opens it)")
        return (figure, breadcrumb_bar(level.breadcrumb), info,
                report_view(module_data.watch_report(data, trial),
                            module_sharing.sharing(graph)), options, compare,
                executions, execution, key)

    @app.callback(
        Output(RANK, "options"),
        Output(RANK, "value"),
        Output(RANK_BOX, "style"),
        Input(ids.SELECTION, "data"),
        Input(ids.DATA_STATUS, "data"),
        State(RANK, "value"),
        State(RANK, "options"),
    )
    def rank_choices(selection: dict | None, _status: Any, value: Any,
                     shown: list | None) -> tuple:
        trial = current(selection).get("trial")
        ranks = data.ranks(trial) if trial in data.trial_ids() else []
        options = rank_options(ranks)
        values = [o["value"] for o in options]
        chosen = value if value in values else (values[0] if values else None)
        style = {"display": "flex" if options else "none"}
        return (options if options != (shown or []) else no_update,
                chosen if chosen != value else no_update, style)

    @app.callback(Output(PANELS, "children"), Input(PICK, "value"))
    def show_panels(picked: list | None) -> list:
        if not picked:
            return [html.P("Click a module in the graph to see its histograms over time.",
                           className="text-muted")]
        return [panel(m) for m in picked]

    @app.callback(
        Output(panel_id("graph", MATCH), "figure"),
        Output(panel_id("role", MATCH), "options"),
        Output(panel_id("role", MATCH), "value"),
        Output(panel_id("what", MATCH), "options"),
        Output(panel_id("groups", MATCH), "options"),
        Output(panel_id("groups", MATCH), "value"),
        Output(panel_id("key", MATCH), "data"),
        Input(panel_id("what", MATCH), "value"),
        Input(panel_id("role", MATCH), "value"),
        Input(panel_id("groups", MATCH), "value"),
        Input(COMPARE, "value"),
        Input(MODE, "value"),
        Input(EXECUTION, "value"),
        Input(LOG, "value"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(RANK, "value"),
        State(panel_id("key", MATCH), "data"),
    )
    def show_histograms(what: str | None, role: str | None, groups: list | None,
                        compare: str | None, mode: str | None, execution: str | None,
                        log: list | None, _status: Any, selection: dict | None,
                        rank: Any, shown: Any) -> tuple:
        module = dash.callback_context.outputs_list[0]["id"]["module"]
        started = time.perf_counter()
        result = histograms(module, what, role, groups, compare, mode, execution, log,
                            selection, rank, shown)
        if result[0] is not no_update:
            parts.timings.record("modules.histograms", time.perf_counter() - started)
        return result

    def histograms(module: str, what: str | None, role: str | None, groups: list | None,
                   compare: str | None, mode: str | None, execution: str | None,
                   log: list | None, selection: dict | None, rank: Any,
                   shown: Any) -> tuple:
        trial = current(selection).get("trial")
        trials = [trial] + ([compare] if compare not in (None, NO_TRIAL, trial) else [])
        key = [[[t, *module_data.data_version(data, t)] for t in trials if t], module, what,
               role, groups, mode, execution, log, rank]
        if key == shown or trial is None:
            return (no_update,) * 7
        frames = _per_rank({t: module_data.histograms(data, t, module,
                                                      rank_for(rank, data.ranks(t)))
                            for t in trials})
        choices = mf.histogram_choices(frames[(trial, None)] if (trial, None) in frames
                                       else next(iter(frames.values())))
        what_options = [{"label": f" {w}", "value": w, "disabled": w not in choices}
                        for w in mf.WHATS]
        if what not in choices and choices:
            what = next(iter(choices))
        roles = choices.get(what, [])
        if role not in roles:
            role = next((r for r in roles if r.startswith("output")), roles[0] if roles else None)
        role_options = [{"label": r, "value": r} for r in roles]
        if role is None:
            figure = empty_figure(f"No histograms of {module} in {trial} yet.", 300)
            return figure, role_options, role, what_options, [], [], key
        available = list(dict.fromkeys(
            g for f in frames.values() for g in mf.recording_types(f, what, role)))
        groups = [g for g in (groups or []) if g in available] or available[:1]
        group_options = [{"label": g, "value": g} for g in available]
        grids = []
        for (t, r), frame in frames.items():
            name = t if r is None else f"{t} · rank {r}"
            for group in groups:
                label = name if len(groups) == 1 else f"{name} · {group}"
                grids.append((label, _grid(frame, what, role, execution, data.steps(t), group)))
        title = f"{module} · {role} · {mf.WHAT_LABELS.get(what, what)}"
        note = module_sharing.panel_note(next(iter(frames.values())), what, role)
        if note:  # a tied parameter: recorded once, shown under every holder
            title += f" · {note}"
        if rank == module_data.MERGED:
            merged = [f for f in frames.values() if "merge" in f]
            how = ("re-binned" if any((f["merge"] == "rebinned").any() for f in merged)
                   else "exact")
            title += f" · all ranks merged ({how})"
        figure = mf.typed_arrays(mf.histogram_figure(
            grids, log_color="log" in (log or []), height=300, overlay=mode == OVERLAID,
            title=plot_text(title),
        ))
        return figure, role_options, role, what_options, group_options, groups, key

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.URL, "pathname", allow_duplicate=True),
        Input(panel_id("open", ALL), "n_clicks"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def open_in_tensors(_clicks: list, selection: dict | None) -> tuple:
        ctx = dash.callback_context
        trigger = ctx.triggered_id
        if not isinstance(trigger, Mapping) or not any(t.get("value") for t in ctx.triggered):
            return no_update, no_update  # a panel that appears, not a click
        module = trigger["module"]
        shown = current(selection)
        where = {"trial": shown.get("trial"), "node": module, "role": "output 0",
                 "training_step": shown.get("training_step")}
        return sel.open_where(selection, where, data.option_source()), TENSORS_PATH


def _per_rank(frames: Mapping[str, Any]) -> dict[tuple[str, int | None], Any]:
    """The frames by (trial, rank): a frame of every rank side by side (a ``rank``
    column) split into one per rank, the others under rank None; the selection's trial
    first."""
    out: dict[tuple[str, int | None], Any] = {}
    for t, frame in frames.items():
        if frame is not None and "rank" in frame and not frame.empty:
            for r, part in frame.groupby("rank", sort=True):
                out[(t, int(r))] = part
        else:
            out[(t, None)] = frame
    return out


def _grid(frame: Any, what: str, role: str, execution: str | None,
          steps: Mapping[int, Any], recording_type: str | None = None) -> mf.HistogramGrid | None:
    """The grid of one role and kind for the steps of one type of execution, of one
    recording type (None: the first one, forward, then the gradient groups)."""
    if frame is None or frame.empty:
        return None
    part = frame[(frame["what"] == what) & (frame["role"] == role)]
    if execution not in (None, ANY_TYPE):
        if "type_of_execution" in part:
            part = part[part["type_of_execution"] == execution]
        else:
            part = part[part["training_step"].isin(steps_of_execution(steps, execution))]
    if recording_type is not None and "recording_type" in part:
        part = part[part["recording_type"] == recording_type]
    elif "recording_type" in part and part["recording_type"].nunique() > 1:
        first = min(part["recording_type"].unique(), key=sel.recording_type_sort_key)
        part = part[part["recording_type"] == first]
    return mf.histogram_grid(part) if len(part) else None


def _most_common_type(steps: Mapping[int, Any]) -> str:
    """The type of execution most steps have (training, typically): the default columns."""
    counts: dict[str, int] = {}
    for info in steps.values():
        counts[info.type_of_execution] = counts.get(info.type_of_execution, 0) + 1
    return max(counts, key=counts.get) if counts else ANY_TYPE


PAGE = Page(PATH, NAME, layout, register_callbacks)
