"""What the Modules page's views show, from its reads (``module_data``) and the pure
builders (``module_figures``): one level of the module graph with its breadcrumb and
report, and a histogram panel. The callbacks parse their inputs, call one of these and
return."""

from __future__ import annotations

from typing import Any

from comgra_like.vocabulary import ANY_TYPE

from ... import module_data, module_sharing, other_trials
from ... import module_figures as mf
from ...controls.rank_selector import MERGED
from ...controls.shown import nothing, unchanged
from ...data import AppData
from ...figures import empty_figure
from ...plot_text import plot_text
from .grids import most_common_type, panel_grid, per_rank, rank_for
from .layout import NO_TRIAL, OVERLAID, breadcrumb_bar, report_view
from .navigation import current


def level_view(data: AppData, view: dict | None, selection: dict | None,
               execution: str | None, shown: Any) -> tuple:
    """The module graph's level, breadcrumb, info line, watch report, the dropdowns'
    options and the key (9 values; nothing when the key is the one shown)."""
    shown_fields = current(selection)
    trial = shown_fields.get("trial")
    trials = data.trial_ids()
    view = view or {}
    # lists, not tuples: the key comes back from the store as JSON
    key = [trial, list(module_data.data_version(data, trial)) if trial else None,
           view.get("parent"), view.get("picked"),
           shown_fields.get("training_step"), trials, execution]
    if unchanged(key, shown):
        return nothing(9)
    compare = [{"label": "none", "value": NO_TRIAL}] + [
        {"label": t, "value": t} for t in trials if t != trial]
    types = data.types_of_execution(trial) if trial else ()
    executions = [{"label": "every type", "value": ANY_TYPE}] + [
        {"label": t, "value": t} for t in types]
    if execution not in [o["value"] for o in executions]:
        execution = most_common_type(data.steps(trial)) if trial else ANY_TYPE
    if trial is None:
        message = empty_figure("No trial selected.", 200)
        return message, [], "", None, [], compare, executions, execution, key
    step, graph = module_data.module_graph(data, trial, shown_fields.get("training_step"))
    if graph is None:
        # the trials that have one: buttons above the graph that open them
        offer = other_trials.offer(other_trials.with_module_graphs(data), trial,
                                   "module graphs")
        message = empty_figure(
            "No module graph in this trial: record with comgra_like.watch(model)."
            + (" Open a trial that has one (above)." if offer is not None else ""), 200)
        return message, [], offer if offer is not None else "", None, [], compare, executions, execution, key
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


def histograms_view(data: AppData, module: str, what: str | None, role: str | None,
                    groups: list | None, compare: str | None, mode: str | None,
                    execution: str | None, log: list | None, selection: dict | None,
                    rank: Any, shown: Any) -> tuple:
    """A panel's figure, its role, what and group choices, and the key (7 values;
    nothing when the key is the one shown)."""
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
