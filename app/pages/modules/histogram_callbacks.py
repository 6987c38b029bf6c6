"""The histogram panels' callbacks: the rank selector, the panels of the picked modules
and each panel's figure."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import MATCH, Input, Output, State, html, no_update

from ... import ids, module_data, module_sharing
from ... import module_figures as mf
from ...controls.rank_selector import MERGED
from ...controls.shown import nothing, unchanged
from ...figures import empty_figure
from ...parts import AppParts
from ...plot_text import plot_text
from .grids import panel_grid, per_rank, rank_for
from .layout import (
    COMPARE,
    EXECUTION,
    LOG,
    MODE,
    NO_TRIAL,
    OVERLAID,
    PANELS,
    PICK,
    RANK,
    RANKS,
    panel,
    panel_id,
)
from .level_callbacks import current


def register_histogram_callbacks(app: dash.Dash, parts: AppParts) -> None:
    data = parts.data

    RANKS.register(app, lambda trial: data.ranks(trial) if trial in data.trial_ids() else [])

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
        if unchanged(key, shown) or trial is None:
            return nothing(7)
        frames = per_rank({t: module_data.histograms(data, t, module,
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
                grids.append((label, panel_grid(frame, what, role, execution, data.steps(t), group)))
        title = f"{module} · {role} · {mf.WHAT_LABELS.get(what, what)}"
        note = module_sharing.panel_note(next(iter(frames.values())), what, role)
        if note:  # a tied parameter: recorded once, shown under every holder
            title += f" · {note}"
        if rank == MERGED:
            merged = [f for f in frames.values() if "merge" in f]
            how = ("re-binned" if any((f["merge"] == "rebinned").any() for f in merged)
                   else "exact")
            title += f" · all ranks merged ({how})"
        figure = mf.typed_arrays(mf.histogram_figure(
            grids, log_color="log" in (log or []), height=300, overlay=mode == OVERLAID,
            title=plot_text(title),
        ))
        return figure, role_options, role, what_options, group_options, groups, key
