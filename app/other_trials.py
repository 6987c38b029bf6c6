"""Which other trials have what a page shows, so that a page with nothing to show for the
selected trial says where to look (the committed example: the tutorial's trials have no
watch() data, trial_watched_classifier has module graphs, metrics and flows).

The Modules, Metrics and Flow pages show :func:`offer` in their empty state: a button per
trial (pattern-matching id :func:`button_id`) whose click sets the top bar's trial
selector, so that the selection (and every page) moves to that trial as if the user had
picked it there. Its one callback is registered once per app by :func:`register_callbacks`,
whichever page calls it first."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dash
from dash import ALL, Input, Output, html, no_update

from comgra_like.errors import ComgraError

from . import ids, metric_data, module_data
from .data import AppData

#: At most this many trials are named.
MAX_NAMED = 5


def with_module_graphs(data: AppData) -> list[str]:
    return _trials_with(data, lambda t: bool(module_data.module_graph_steps(data, t)))


def with_metrics(data: AppData) -> list[str]:
    return _trials_with(data, lambda t: not metric_data.listing(data, t).empty)


def with_flows(data: AppData) -> list[str]:
    group = data.group
    if group is None:
        return []

    def has(trial: str) -> bool:
        def read() -> bool:
            try:
                return bool(group.read_flows(trial))
            except ComgraError:
                return False  # a damaged flow: the banner names it
        return data.cached(("has_flows", trial, data.trial_version(trial)), read)

    return _trials_with(data, has)


#: The ``type`` of a trial button's pattern-matching id.
BUTTON_TYPE = "other-trial"
BUTTON_CLASS = "btn btn-outline-primary btn-sm py-0 px-2 ms-1 other-trial"

_REGISTERED: weakref.WeakSet = weakref.WeakSet()


def others_of(trials: Sequence[str], selected: str | None) -> list[str]:
    """The trials to name: all but the selected one, at most MAX_NAMED."""
    return [t for t in trials if t != selected][:MAX_NAMED]


def button_id(trial: Any) -> dict:
    """The id of the button that opens ``trial`` (or ALL)."""
    return {"type": BUTTON_TYPE, "trial": trial}


def offer(trials: Sequence[str], selected: str | None, what: str) -> html.Span | None:
    """'Trials with <what>: [a] [b] …' with a button per trial that opens it; None when
    no trial but the selected one has it."""
    others = [t for t in trials if t != selected]
    if not others:
        return None
    buttons: list[Any] = [
        html.Button(t, id=button_id(t), n_clicks=0, className=BUTTON_CLASS,
                    title=f"open {t}", **{"data-trial": t})
        for t in others[:MAX_NAMED]]
    more = [" …"] if len(others) > MAX_NAMED else []
    return html.Span([f"Trials with {what}:", *buttons, *more,
                      html.Span(" (click one to open it)", className="text-muted")],
                     className="other-trials")


def clicked_trial(triggered_id: Any, triggered: Sequence[Mapping[str, Any]],
                  known: Sequence[str]) -> Any:
    """The trial a button click opens, or no_update: buttons that appear fire with
    n_clicks 0 (only a real click opens), and only a trial of the group is opened."""
    if not isinstance(triggered_id, Mapping) or triggered_id.get("type") != BUTTON_TYPE:
        return no_update
    if not any(t.get("value") for t in triggered):
        return no_update
    trial = triggered_id.get("trial")
    return trial if isinstance(trial, str) and trial in known else no_update


def register_callbacks(app: dash.Dash, data: AppData) -> None:
    """The buttons' callback: a click sets the trial selector's value, whose own callback
    (selectors.py) makes the selection. Each page that shows the buttons calls this; the
    callback is registered once per app."""
    if app in _REGISTERED:
        return
    _REGISTERED.add(app)

    @app.callback(
        Output(ids.selector("trial"), "value", allow_duplicate=True),
        Input(button_id(ALL), "n_clicks"),
        prevent_initial_call=True,
    )
    def open_trial(_clicks: list) -> Any:
        ctx = dash.callback_context
        return clicked_trial(ctx.triggered_id, ctx.triggered, data.trial_ids())


def _trials_with(data: AppData, has: Callable[[str], bool]) -> list[str]:
    return [t for t in data.trial_ids() if has(t)]
