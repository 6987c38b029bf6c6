"""The Modules page's layout: its ids and the pure builders of the page, a histogram
panel, the breadcrumb and the watch report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import dcc, html

from ... import module_figures as mf
from ... import module_sharing
from ...controls.rank_selector import EACH_RANK, EVERY_RANK, MERGED, RankSelector
from ...figures import empty_figure

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
#: The rank selector: the lowest rank by default, one rank, every rank side by side
#: (``EVERY_RANK``) or merged (``MERGED``).
RANKS = RankSelector(RANK, RANK_BOX, choices=(EACH_RANK, EVERY_RANK, MERGED))
NO_TRIAL = "__none__"  # names starting with "__" are reserved: never a trial id
#: The trials and gradient groups of a panel (MODE): side by side, or overlaid in one plot.
PANELS_SIDE_BY_SIDE = "side"
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
                        {"label": " side by side", "value": PANELS_SIDE_BY_SIDE},
                        {"label": " overlaid", "value": OVERLAID}],
                        value=PANELS_SIDE_BY_SIDE, inline=True, className="ms-2",
                        inputClassName="me-1", labelClassName="me-2",
                        persistence=True, persistence_type="session"),
                    html.Span("steps", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(id=EXECUTION, options=[], value=None, clearable=False,
                                 className="sel-dropdown", style={"minWidth": "10rem"},
                                 persistence=True, persistence_type="session"),
                    dcc.Checklist(id=LOG, options=[{"label": " log colour", "value": "log"}],
                                  value=[], className="ms-3", inputClassName="me-1",
                                  persistence=True, persistence_type="session"),
                    RANKS.layout(),
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
            # the optimizer's state of its parameters (watch(optimizer=); shown with data)
            dcc.Graph(id=panel_id("optimizer", module), figure={}, style={"display": "none"},
                      config={"displaylogo": False}),
        ],
        className="modules-panel border rounded p-1",
        style={"flex": "1 1 560px", "minWidth": "420px"},
        **{"data-module": module},
    )

