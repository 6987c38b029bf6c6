"""The Flow page's layout: its ids and the pure layout builder."""

from __future__ import annotations

from dash import dcc, html

from ... import flow_figures as ff
from ...figures import empty_figure

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

