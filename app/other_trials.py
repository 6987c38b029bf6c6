"""Which other trials have what a page shows, so that a page with nothing to show for the
selected trial says where to look (the committed example: the tutorial's trials have no
watch() data, trial_watched_classifier has module graphs, metrics and flows)."""

from __future__ import annotations

from collections.abc import Callable

from comgra_like.errors import ComgraError

from . import metric_data, module_data
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


def hint(trials: list[str], selected: str | None, what: str) -> str:
    """' Trials with <what>: a, b (pick one in the trial selector).' or ''."""
    others = [t for t in trials if t != selected]
    if not others:
        return ""
    named = ", ".join(others[:MAX_NAMED]) + (" …" if len(others) > MAX_NAMED else "")
    return f" Trials with {what}: {named} (pick one in the trial selector)."


def _trials_with(data: AppData, has: Callable[[str], bool]) -> list[str]:
    return [t for t in data.trial_ids() if has(t)]
