"""What the Metrics page's views show, from its reads (``metric_data``, ``data``) and the
pure builders (``metric_figures``, ``metric_groups``): the cards and the filters'
options, a metric's figure, a vector metric's spectrum. The callbacks parse their
inputs, call one of these and return."""

from __future__ import annotations

import time
from typing import Any

from dash import html, no_update

from comgra_like.vocabulary import ANY_TYPE

from ... import metric_data, other_trials
from ... import metric_figures as mfig
from ... import metric_groups as mg
from ...controls.shown import nothing, unchanged
from ...data import AppData
from ...figures import empty_figure
from ...natural import natural_sorted
from .choices import rank_for, shown_modules, trials_of, view_of, window_of
from .data import frames_of
from .layout import BY_TYPE, FIGURE_HEIGHT, HEATMAP, MAX_FIGURES, card


def cards_view(data: AppData, timings: Any, started: float, selection: dict | None,
               overlay: list | None, chosen: list | None, rank: Any, search: str | None,
               picked_modules: list | None, execution: str | None, shown: Any) -> tuple:
    """The filters' options, the type of execution, the info line, a card per metric
    drawn and the key (8 values; the cards only when the key is not the one shown)."""
    known = data.trial_ids()
    trials = trials_of(selection, overlay, known)
    main = trials[0] if trials else None
    overlay_options = [{"label": t, "value": t} for t in known if t != main]
    listings = {t: metric_data.listing(data, t, rank_for(rank, data.ranks(t)))
                for t in trials}
    reason = mfig.empty_reason(trials, listings)
    if reason is not None:
        # the trials that have metrics: buttons that open them
        having = other_trials.with_metrics(data) if trials else []
        offer = other_trials.offer(having, main, "metrics")
        cards = [html.Div([reason, html.Div(offer, className="mt-1")]
                          if offer is not None else reason,
                          className="alert alert-secondary metrics-empty")]
        key = ["empty", reason, other_trials.others_of(having, main)]
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
    timings.record("metrics.cards", time.perf_counter() - started)
    return (overlay_options, [{"label": m, "value": m} for m in modules],
            [{"label": m, "value": m} for m in names], executions, execution, info, cards,
            key)


def metric_view(data: AppData, timings: Any, started: float, metric: str,
                overlay: list | None, modules: list | None, execution: str | None,
                window: Any, how: str | None, log: list | None, selection: dict | None,
                rank: Any, search: str | None, view: Any, module_options: list | None,
                shown: Any) -> tuple:
    """A metric's figure (one plot, by type or a heatmap), the key and whose each trace
    is (3 values; nothing when the key is the one shown)."""
    trials = trials_of(selection, overlay, data.trial_ids())
    window = window_of(window)
    key = [[[t, *metric_data.data_version(data, t)] for t in trials], modules,
           execution, window, how, log, rank, search, view]
    if unchanged(key, shown):
        return nothing(3)
    frames = frames_of(data, trials, metric, execution, rank)
    every = natural_sorted(o["value"] for o in module_options or [])
    drawn = shown_modules(module_options, modules, search)
    if not drawn:
        figure = empty_figure(f"No module matches {search!r}.", FIGURE_HEIGHT)
        return figure, key, []
    colours = mfig.module_colours(every)
    filtered = drawn if len(drawn) != len(every) else None
    chosen_view = view_of(view, len(drawn))
    if chosen_view == BY_TYPE:
        figure = mg.grouped_figure(frames, metric, modules=filtered,
                                   log_y="log" in (log or []))
    elif chosen_view == HEATMAP:
        figure = mg.heatmap_figure(next(iter(frames.values()), None), metric,
                                   modules=filtered, trial=trials[0] if trials else "")
    else:
        figure = mfig.metric_figure(
            frames, metric, modules=filtered, colours=colours, window=window,
            how=how if how in mfig.BAND_CHOICES else "std", log_y="log" in (log or []),
            height=FIGURE_HEIGHT)
    timings.record("metrics.figure", time.perf_counter() - started)
    return figure, key, mfig.trace_meta(figure)


def spectrum_view(data: AppData, metric: str, hover: dict | None, overlay: list | None,
                  modules: list | None, execution: str | None, selection: dict | None,
                  rank: Any, search: str | None, module_options: list | None,
                  traces: list | None) -> Any:
    """A vector metric's vector at the step hovered on its figure."""
    trials = trials_of(selection, overlay, data.trial_ids())
    point = mfig.point_of(hover, traces)
    colours = mfig.module_colours(natural_sorted(o["value"] for o in module_options or []))
    frames = frames_of(data, trials, metric, execution, rank)
    for t, frame in frames.items():
        # one rank's vectors: the hovered line's, else the lowest rank's
        if "rank" in frame.columns and not frame.empty:
            shown = point["rank"] if point and point["rank"] is not None else None
            frames[t] = frame[frame["rank"] == (shown if shown is not None
                                                else frame["rank"].min())]
    return mfig.spectrum_figure(
        frames, metric,
        point["training_step"] if point else None,
        modules=shown_modules(module_options, modules, search) or None,
        colours=colours, height=FIGURE_HEIGHT)
