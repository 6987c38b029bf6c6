"""Findings page: what the detectors of ``comgra_like.analysis`` found in the recordings.

The list covers every trial of the group (or one), most severe first, filterable by
severity, kind and trial, and follows new data: each trial's findings are computed once
per data version (``AppData.findings``), so a refresh that finds new steps scans that
trial again. A large group is scanned in the background (app/findings_scan.py): the
page lists the findings of the trials scanned so far and says how many are left. A
click on a finding opens the Tensors page at the place it names (trial,
step, iteration, node, role, recording type, batch aggregation and the statistic of the
series): ``selection.open_where`` makes the selection, the URL switches the page. A
flight recorder finding (kind ``flight_...``) opens the Flight page at its trigger
instead (``/flight?trial=...&trigger=...``), and its row links there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import dash
from dash import ALL, Input, Output, State, dcc, html, no_update

from comgra_like.analysis import SEVERITIES, severity_rank

from .. import ids
from .. import selection as sel
from ..controls.shown import nothing, unchanged
from ..parts import AppParts
from .flight import PATH as FLIGHT_PATH
from .flight import link as flight_link
from .page import Page
from .tensors import PATH as TENSORS_PATH

PATH = "/findings"
NAME = "Findings"

# ids of this page
SEVERITY_FILTER = "findings-severity"
KIND_FILTER = "findings-kind"
TRIAL_FILTER = "findings-trial"
SUMMARY = "findings-summary"
LIST = "findings-list"
SHOWN = "findings-shown"  # dcc.Store: the places of the listed findings, in row order
KEY = "findings-key"
ALL_TRIALS = "__all__"  # names starting with "__" are reserved: never a trial id

#: How each severity looks (bootstrap classes) and sorts (most severe first).
SEVERITY_CLASSES = {"error": "bg-danger", "warning": "bg-warning text-dark", "info": "bg-info"}
#: At most this many findings are listed (the summary says how many there are).
MAX_LISTED = 500
#: A callback waits at most this many seconds for trials not scanned yet; the rest are
#: scanned in the background and listed at the next ticks (app/findings_scan.py).
SCAN_WAIT = 1.0


def finding_id(index: int | Any) -> dict:
    """The id of the row of the ``index``-th listed finding (or ALL)."""
    return {"type": "finding", "index": index}


def layout() -> html.Div:
    severities = list(reversed(SEVERITIES))  # error first
    return html.Div(
        [
            html.Div(
                [
                    html.Span("Severity", className="sel-label me-2"),
                    dcc.Checklist(
                        id=SEVERITY_FILTER,
                        options=[{"label": f" {s}", "value": s} for s in severities],
                        value=severities,
                        inline=True,
                        inputClassName="me-1",
                        labelClassName="me-3",
                        persistence=True,
                        persistence_type="session",
                    ),
                    html.Span("Kind", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(
                        id=KIND_FILTER,
                        options=[],
                        value=[],
                        multi=True,
                        placeholder="every kind",
                        className="sel-dropdown findings-kind",
                        style={"minWidth": "16rem"},
                        persistence=True,
                        persistence_type="session",
                    ),
                    html.Span("Trial", className="sel-label ms-3 me-2"),
                    dcc.Dropdown(
                        id=TRIAL_FILTER,
                        options=[{"label": "all trials", "value": ALL_TRIALS}],
                        value=ALL_TRIALS,
                        clearable=False,
                        className="sel-dropdown findings-trial",
                        style={"minWidth": "14rem"},
                        persistence=True,
                        persistence_type="session",
                    ),
                ],
                className="d-flex align-items-center flex-wrap mb-2 findings-filters",
            ),
            html.Div(id=SUMMARY, className="text-muted small mb-1"),
            dcc.Loading(html.Div(id=LIST, className="findings-list"), delay_show=300),
            dcc.Store(id=SHOWN, storage_type="memory"),
            dcc.Store(id=KEY, storage_type="memory"),
        ],
        className="page-padded",
    )


# --- pure pieces ----------------------------------------------------------------------


def filter_findings(
    findings: Iterable[Mapping[str, Any]],
    severities: Sequence[str] | None,
    kinds: Sequence[str] | None,
    trial: str | None,
) -> list[Mapping[str, Any]]:
    """The findings of the chosen severities, kinds (none chosen: all) and trial
    (``ALL_TRIALS`` or None: every trial)."""
    chosen_severities = set(severities or ())
    chosen_kinds = set(kinds or ())
    return [
        f
        for f in findings
        if f["severity"] in chosen_severities
        and (not chosen_kinds or f["kind"] in chosen_kinds)
        and (trial in (None, ALL_TRIALS) or f["trial_id"] == trial)
    ]


def sort_findings(findings: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Most severe first, then by trial, first step and kind (as ``analysis.sort_findings``
    for the dicts of several trials)."""
    return sorted(findings, key=lambda f: (-severity_rank(f["severity"]), f["trial_id"],
                                           (f.get("steps") or [-1])[0], f["kind"]))


def steps_text(steps: Sequence[int]) -> str:
    """'7', '15–19', '3, 8, 12' or '' (a finding about the whole run)."""
    steps = [int(s) for s in steps]
    if not steps:
        return ""
    if len(steps) > 2 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}–{steps[-1]}"
    if len(steps) > 5:
        return ", ".join(map(str, steps[:4])) + f", … {steps[-1]}"
    return ", ".join(map(str, steps))


def place_text(finding: Mapping[str, Any]) -> str:
    """Node, role (when it differs) and recording type of a finding."""
    node, role = finding.get("node"), finding.get("role")
    parts = [node] if node else []
    if role and role != node:
        parts.append(f"role {role}")
    if finding.get("recording_type"):
        parts.append(sel.option_label("recording_type", finding["recording_type"]))
    return " · ".join(parts)


def summary_text(total: Sequence[Mapping[str, Any]], shown: int, trials: int) -> str:
    counts = {s: sum(1 for f in total if f["severity"] == s) for s in SEVERITIES}
    parts = [f"{counts[s]} {s}{'s' if s != 'info' and counts[s] != 1 else ''}"
             for s in reversed(SEVERITIES)]
    listed = "" if shown == len(total) else f"{shown} listed of "
    return (f"{listed}{len(total)} finding{'s' if len(total) != 1 else ''} "
            f"({', '.join(parts)}) in {trials} trial{'s' if trials != 1 else ''}")


def flight_window(finding: Mapping[str, Any]) -> str | None:
    """The flight window a flight recorder finding is about (None: another finding)."""
    if not str(finding.get("kind", "")).startswith("flight_"):
        return None
    name = (finding.get("numbers") or {}).get("flight_window")
    return str(name) if name else None


def place_of(finding: Mapping[str, Any]) -> dict[str, Any]:
    """What a click on the finding opens: its ``where`` (the Tensors page), plus the
    flight window for a flight finding (the Flight page at its trigger)."""
    place = dict(finding.get("where") or {})
    window = flight_window(finding)
    if window is not None:
        place["flight_window"] = window
        place.setdefault("trial", finding["trial_id"])
    return place


def findings_table(findings: Sequence[Mapping[str, Any]]) -> html.Div:
    """The list: one clickable row per finding (``finding_id(i)``, i in list order)."""
    if not findings:
        return html.P("Nothing found.", className="text-muted")
    rows = []
    for i, f in enumerate(findings[:MAX_LISTED]):
        severity = f["severity"]
        window = flight_window(f)
        what: Any = f["explanation"]
        if window is not None:
            what = [f["explanation"], " ", dcc.Link(
                "open the flight window ▸", href=flight_link(f["trial_id"], window),
                className="finding-flight-link")]
        rows.append(
            html.Tr(
                [
                    html.Td(html.Span(severity, className=f"badge {SEVERITY_CLASSES.get(severity, 'bg-secondary')}")),
                    html.Td(f["kind"].replace("_", " "), className="finding-kind"),
                    html.Td(f["trial_id"], className="finding-trial"),
                    html.Td(steps_text(f.get("steps") or ()), className="finding-steps"),
                    html.Td(place_text(f), className="finding-place"),
                    html.Td(what, className="finding-explanation small"),
                ],
                id=finding_id(i),
                n_clicks=0,
                className="finding-row",
                title="show it on the Flight page" if window else "show it on the Tensors page",
                style={"cursor": "pointer"},
                **{"data-kind": f["kind"], "data-severity": severity},
            )
        )
    head = html.Thead(
        html.Tr([html.Th(h) for h in ("", "kind", "trial", "steps", "where", "what")])
    )
    return html.Div(
        html.Table([head, html.Tbody(rows)], className="table table-sm table-hover findings"),
    )


# --- callbacks ------------------------------------------------------------------------


def register_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(LIST, "children"),
        Output(SUMMARY, "children"),
        Output(SHOWN, "data"),
        Output(KIND_FILTER, "options"),
        Output(TRIAL_FILTER, "options"),
        Output(KEY, "data"),
        Input(ids.DATA_STATUS, "data"),
        # a running trial's new data is scanned when the last scan has paused long enough
        Input(ids.TICK, "n_intervals"),
        Input(SEVERITY_FILTER, "value"),
        Input(KIND_FILTER, "value"),
        Input(TRIAL_FILTER, "value"),
        Input(KEY, "data"),  # inside the page: fires when the page is shown
    )
    def show_findings(
        _status: Any,
        _tick: Any,
        severities: list | None,
        kinds: list | None,
        trial: str | None,
        shown: Any,
    ) -> tuple:
        trials = data.trial_ids()
        if trial not in (None, ALL_TRIALS) and trial not in trials:
            trial = ALL_TRIALS
        scanned = trials if trial in (None, ALL_TRIALS) else [trial]
        # cached findings (a lookup) unless new data is due to be scanned: in a thread of
        # its own, waited for at most SCAN_WAIT; the trials not scanned yet come at the
        # next ticks (a group of 2,000 trials took two minutes to scan)
        by_trial, waiting = data.gather_findings(scanned, SCAN_WAIT)
        found = sort_findings([f for t in scanned for f in by_trial.get(t, ())])
        key = [[(t, data.findings_version(t)) for t in scanned], trials, severities, kinds,
               trial, len(waiting)]
        if unchanged(key, shown):
            return nothing(6)
        listed = filter_findings(found, severities, kinds, trial)
        kind_options = [{"label": k.replace("_", " "), "value": k}
                        for k in sorted({f["kind"] for f in found} | set(kinds or ()))]
        trial_options = [{"label": "all trials", "value": ALL_TRIALS}] + [
            {"label": t, "value": t} for t in trials
        ]
        if not trials:
            message = html.P("No trials yet.", className="text-muted")
            return message, "", [], kind_options, trial_options, key
        summary = summary_text(found, len(listed), len(scanned) - len(waiting))
        if waiting:
            summary = html.Span([summary, html.Span(
                f"; scanning: {len(scanned) - len(waiting)} of {len(scanned)} trials "
                "scanned so far, the list grows", className="findings-scanning ms-1")])
        return (
            findings_table(listed),
            summary,
            [place_of(f) for f in listed[:MAX_LISTED]],
            kind_options,
            trial_options,
            key,
        )

    @app.callback(
        Output(ids.SELECTION, "data", allow_duplicate=True),
        Output(ids.URL, "pathname", allow_duplicate=True),
        Output(ids.URL, "search", allow_duplicate=True),
        Input(finding_id(ALL), "n_clicks"),
        State(SHOWN, "data"),
        State(ids.SELECTION, "data"),
        prevent_initial_call=True,
    )
    def open_finding(clicks: list, places: list | None, selection: dict | None) -> tuple:
        ctx = dash.callback_context
        index = ctx.triggered_id.get("index") if isinstance(ctx.triggered_id, Mapping) else None
        # rows that appear fire this with n_clicks 0: only a real click opens a finding
        if index is None or not places or index >= len(places) or not any(
            t.get("value") for t in ctx.triggered
        ):
            return no_update, no_update, no_update
        place = places[index]
        new = sel.open_where(selection, place, data.option_source())
        window = place.get("flight_window")
        if window:  # the Flight page at the trigger (the selection: its trial)
            return new, FLIGHT_PATH, "?" + flight_link(place["trial"], window).split("?", 1)[1]
        return new, TENSORS_PATH, ""


PAGE = Page(PATH, NAME, layout, register_callbacks)
