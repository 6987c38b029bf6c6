"""The Metrics page's cards callback (which metrics have a card, the filters' options)
and its rank selector."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, State, html, no_update

from comgra_like.vocabulary import ANY_TYPE

from ... import ids, metric_data, other_trials
from ... import metric_figures as mfig
from ...controls.shown import unchanged
from ...natural import natural_sorted
from ...parts import AppParts
from .choices import rank_for, shown_modules, trials_of
from .layout import (
    CARDS,
    EXECUTION,
    INFO,
    MAX_FIGURES,
    METRICS,
    MODULES,
    OVERLAY,
    RANK,
    RANKS,
    SEARCH,
    SHOWN,
    card,
)


def register_card_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    @app.callback(
        Output(OVERLAY, "options"),
        Output(MODULES, "options"),
        Output(METRICS, "options"),
        Output(EXECUTION, "options"),
        Output(EXECUTION, "value"),
        Output(INFO, "children"),
        Output(CARDS, "children"),
        Output(SHOWN, "data"),
        Input(ids.DATA_STATUS, "data"),
        Input(ids.SELECTION, "data"),
        Input(OVERLAY, "value"),
        Input(METRICS, "value"),
        Input(RANK, "value"),
        Input(SEARCH, "value"),
        Input(MODULES, "value"),
        State(EXECUTION, "value"),
        State(SHOWN, "data"),
    )
    def show_cards(_status: Any, selection: dict | None, overlay: list | None,
                   chosen: list | None, rank: Any, search: str | None,
                   picked_modules: list | None, execution: str | None,
                   shown: Any) -> tuple:
        started = time.perf_counter()
        known = data.trial_ids()
        trials = trials_of(selection, overlay, known)
        main = trials[0] if trials else None
        overlay_options = [{"label": t, "value": t} for t in known if t != main]
        listings = {t: metric_data.listing(data, t, rank_for(rank, data.ranks(t)))
                    for t in trials}
        reason = mfig.empty_reason(trials, listings)
        if reason is not None and trials:
            reason += other_trials.hint(other_trials.with_metrics(data), trials[0], "metrics")
        if reason is not None:
            cards = [html.Div(reason, className="alert alert-secondary metrics-empty")]
            key = ["empty", reason]
            return (overlay_options, [], [], [], no_update, "",
                    no_update if unchanged(key, shown) else cards, key)
        every = [f for f in listings.values() if f is not None and not f.empty]
        names: list[str] = []
        modules: list[str] = []
        points = 0
        for frame in every:
            names += [m for m in mfig.metric_order(frame) if m not in names]
            modules += [m for m in dict.fromkeys(str(x) for x in frame["module"])
                        if m not in modules]
            points += int(frame["n_points"].sum())
        types = sorted({t for trial in trials for t in data.types_of_execution(trial)})
        executions = [{"label": "every type", "value": ANY_TYPE}] + [
            {"label": t, "value": t} for t in types]
        if execution not in [o["value"] for o in executions]:
            execution = ANY_TYPE
        modules = natural_sorted(modules)
        matching = shown_modules([{"value": m} for m in modules], picked_modules, search)
        wanted = [m for m in (chosen or []) if m in names] or names
        drawn = wanted[:MAX_FIGURES]
        vectors = {m: mfig.is_vector(metric_data.rows(
            data, main, m, rank_for(rank, data.ranks(main))) if main else None, m)
            for m in drawn}
        key = [[m, vectors[m]] for m in drawn]
        info = (f"{len(names)} metric{'s' if len(names) != 1 else ''} of "
                f"{len(modules)} module{'s' if len(modules) != 1 else ''}, {points} points"
                + (f" · {len(matching)} module{'s' if len(matching) != 1 else ''} shown"
                   if len(matching) != len(modules) else "")
                + (f" · the first {MAX_FIGURES} shown (pick others above)"
                   if len(wanted) > MAX_FIGURES else "")
                + " · markers: the steps each metric was computed at · click a point to open "
                  "that step and module · a spectrum shows the step hovered on its left")
        cards = no_update if unchanged(key, shown) else [card(m, vectors[m]) for m in drawn]
        parts.timings.record("metrics.cards", time.perf_counter() - started)
        return (overlay_options, [{"label": m, "value": m} for m in modules],
                [{"label": m, "value": m} for m in names], executions, execution, info, cards,
                key)

    RANKS.register(app, lambda trial: data.ranks(trial) if trial in data.trial_ids() else [])
