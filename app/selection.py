"""What the Tensors page shows, and how the selection relaxes when a choice becomes invalid.

Pure logic: no Dash, no file access. The selection is a small JSON-able dict kept in
the browser session (a ``dcc.Store``)::

    {"wanted": {field: value}, "current": {field: value}, "statistic": "mean"}

``current`` is what is shown. ``wanted`` is what the user last chose for each field;
it survives detours. If a user looks at "Sample 10", clicks a parameter (which has no
batch dimension, so the aggregation relaxes to "none") and then clicks an activation
again, "Sample 10" comes back.

The fields form a chain: the options of a field depend only on the fields before it
(:data:`CHAIN`). :func:`relax` finds the valid combination nearest to ``wanted`` by a
depth-first search over the chain, trying each field's options nearest-first, so that
fields early in the chain change least. The field the user just chose is kept fixed.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from comgra_like import vocabulary as vocab
from comgra_like.vocabulary import ANY_TYPE

#: Selector fields in dependency order: each field's options depend on the ones before.
CHAIN: tuple[str, ...] = (
    "trial",
    "type_of_execution",
    "training_step",
    "iteration",
    "node",
    "role",
    "recording_type",
    "aggregation",
)

#: Statistics offered for the series across steps: every statistic column but the number
#: of values, which does not change from step to step.
SERIES_STATISTICS: tuple[str, ...] = tuple(s for s in vocab.ALL_STATISTICS if s != "numel")

#: How the aggregation selector labels each aggregation (samples: "Sample <index>").
AGGREGATION_LABELS = {
    vocab.BATCH_MEAN: "mean over batch",
    vocab.BATCH_ABS_MAX: "abs max over batch",
    vocab.BATCH_STD: "std over batch",
    vocab.NO_BATCH: "no batch dimension",
}

_SAMPLE_KEY = re.compile(r"^sample:(\d+)$")

#: The whole selection: {"wanted": Fields, "current": Fields, "statistic": str}.
Selection = dict[str, Any]
#: A value for each field of CHAIN.
Fields = dict[str, Any]


class OptionSource(Protocol):
    """Where the valid values of each field come from (the recordings)."""

    def options(self, field: str, upstream: Mapping[str, Any]) -> Sequence[Any]:
        """Valid values of ``field`` given the values of the fields before it in CHAIN."""
        ...


# --- aggregation keys -----------------------------------------------------------------


def aggregation_key(aggregation: str, sample_index: int = -1) -> str:
    """One selector value for an (aggregation, sample_index) pair: 'batch_mean', 'sample:3'."""
    if aggregation == vocab.SAMPLE:
        return f"{vocab.SAMPLE}:{int(sample_index)}"
    return aggregation


def parse_aggregation(key: str) -> tuple[str, int]:
    """Inverse of :func:`aggregation_key`: 'sample:3' -> ('sample', 3), 'none' -> ('none', -1)."""
    match = _SAMPLE_KEY.match(key)
    if match:
        return vocab.SAMPLE, int(match.group(1))
    return key, -1


def aggregation_sort_key(key: str) -> tuple[int, int, str]:
    """Batch aggregations first, then samples in natural order (2 before 10), then 'none'."""
    aggregation, sample_index = parse_aggregation(key)
    if aggregation in vocab.BATCH_AGGREGATIONS:
        return (0, vocab.BATCH_AGGREGATIONS.index(aggregation), "")
    if aggregation == vocab.SAMPLE:
        return (1, sample_index, "")
    if aggregation == vocab.NO_BATCH:
        return (2, 0, "")
    return (3, 0, aggregation)


def recording_type_sort_key(recording_type: str) -> tuple[int, str]:
    """forward, then the gradient groups by name, then update."""
    if recording_type == vocab.FORWARD:
        return (0, "")
    if vocab.is_gradient(recording_type):
        return (1, recording_type)
    if recording_type == vocab.UPDATE:
        return (2, "")
    return (3, recording_type)


def option_label(field: str, value: Any) -> str:
    """The text a selector shows for ``value``."""
    if field == "aggregation":
        aggregation, sample_index = parse_aggregation(str(value))
        if aggregation == vocab.SAMPLE:
            return f"Sample {sample_index}"
        return AGGREGATION_LABELS.get(aggregation, str(value))
    if field == "recording_type" and vocab.is_gradient(str(value)):
        return f"gradient ({vocab.loss_group_of(str(value))})"
    if field == "type_of_execution" and value == ANY_TYPE:
        return "any"
    return str(value)


# --- ranking: which option is "nearest" to what the user wanted ------------------------


def rank_options(field: str, options: Sequence[Any], wanted: Any) -> list[Any]:
    """``options`` ordered nearest-first to ``wanted`` (the natural order if nothing is wanted)."""
    if field in ("training_step", "iteration"):
        return list(nearest_first(options, wanted))
    options = list(options)
    if field == "aggregation":
        return sorted(options, key=lambda v: _aggregation_distance(v, wanted))
    if field == "recording_type":
        return sorted(options, key=lambda v: (v != wanted, recording_type_sort_key(v)))
    if field == "type_of_execution":
        return sorted(options, key=lambda v: (v != wanted, v != ANY_TYPE))
    # trial, node, role: the wanted one, else the natural order of the options
    return sorted(options, key=lambda v: v != wanted)


def nearest_first(options: Sequence[Any], wanted: Any) -> Iterator[Any]:
    """Numbers ``options`` nearest-first to ``wanted`` (the smaller one first on a tie;
    ascending if nothing is wanted), one at a time: the search usually takes the first,
    and sorting 100,000 steps by distance cost more than the rest of a selector change."""
    ordered = options if _ascending(options) else sorted(options)
    if wanted is None:
        yield from ordered
        return
    above = bisect.bisect_left(ordered, wanted)
    below = above - 1
    while below >= 0 or above < len(ordered):
        if above >= len(ordered) or (
            below >= 0 and wanted - ordered[below] <= ordered[above] - wanted
        ):
            yield ordered[below]
            below -= 1
        else:
            yield ordered[above]
            above += 1


def _ascending(values: Sequence[Any]) -> bool:
    return all(a < b for a, b in zip(values, itertools.islice(values, 1, None)))


def _aggregation_distance(key: str, wanted: str | None) -> tuple:
    if key == wanted:
        return (0,)
    aggregation, sample_index = parse_aggregation(key)
    if wanted is not None:
        wanted_aggregation, wanted_sample = parse_aggregation(wanted)
        if aggregation == wanted_aggregation == vocab.SAMPLE:
            return (1, abs(sample_index - wanted_sample), sample_index)
    # batch_mean is the most common view; then the other batch views, samples, 'none'
    return (2, *aggregation_sort_key(key))


# --- relaxation -----------------------------------------------------------------------


def relax(
    wanted: Mapping[str, Any],
    source: OptionSource,
    keep: str | None = None,
    max_visits: int = 20_000,
) -> Fields:
    """The valid fields nearest to ``wanted``, keeping the field ``keep`` as wanted.

    Depth-first over CHAIN, each field's options nearest-first: an earlier field only
    changes when no value of the later fields fits, but the trial stays the wanted one
    (the same step of another trial is not what was asked for). If ``wanted[keep]`` is
    impossible there (say a step whose data is damaged), ``keep`` is ignored: the
    nearest valid selection is returned. If no complete combination exists (a trial
    without recorded steps yet), the deepest partial one is returned with the rest set
    to None.
    """
    kept = set()
    if keep is not None:
        kept = {keep} if keep == CHAIN[0] or wanted.get(CHAIN[0]) is None else {CHAIN[0], keep}
    visits = 0
    deepest: dict[str, Any] = {}

    def search(depth: int, assigned: dict[str, Any], keep_fields: set[str]) -> dict | None:
        nonlocal visits, deepest
        if depth == len(CHAIN):
            return assigned
        field = CHAIN[depth]
        options = list(source.options(field, assigned))
        if field in keep_fields:
            candidates = [wanted.get(field)] if wanted.get(field) in options else []
        else:
            candidates = (
                nearest_first(options, wanted.get(field))
                if field in ("training_step", "iteration")
                else rank_options(field, options, wanted.get(field))
            )
        for value in candidates:
            visits += 1
            if visits > max_visits:
                return None
            extended = {**assigned, field: value}
            if len(extended) > len(deepest):
                deepest = extended
            found = search(depth + 1, extended, keep_fields)
            if found is not None:
                return found
        return None

    result = search(0, {}, kept) if kept else None
    if result is None:
        visits = 0
        result = search(0, {}, set())
    if result is None:
        result = deepest
    return {field: result.get(field) for field in CHAIN}


def initial_selection() -> Selection:
    """The selection of a new browser session: nothing chosen yet."""
    return {
        "wanted": {field: None for field in CHAIN} | {"type_of_execution": ANY_TYPE},
        "current": {field: None for field in CHAIN},
        "statistic": "mean",
    }


def _normalized(selection: Mapping[str, Any] | None) -> Selection:
    base = initial_selection()
    if not selection:
        return base
    return {
        "wanted": {**base["wanted"], **dict(selection.get("wanted") or {})},
        "current": {**base["current"], **dict(selection.get("current") or {})},
        "statistic": selection.get("statistic") or base["statistic"],
    }


def refresh(selection: Mapping[str, Any] | None, source: OptionSource) -> Selection:
    """Re-validate ``selection`` against the data (new trials, steps, graphs), no user choice."""
    new = _normalized(selection)
    new["current"] = relax(new["wanted"], source)
    return new


def choose(
    selection: Mapping[str, Any] | None, field: str, value: Any, source: OptionSource
) -> Selection:
    """The user chose ``value`` for ``field``: keep it and relax the other fields."""
    new = _normalized(selection)
    if field == "statistic":
        new["statistic"] = value
        return new
    if field not in CHAIN:
        raise ValueError(f"unknown selector field {field!r}; expected one of {CHAIN}")
    # The fields the user did not touch now want what they currently show, except that
    # downstream fields keep their older wishes (so a detour through a parameter node
    # does not forget "Sample 10").
    index = CHAIN.index(field)
    for earlier in CHAIN[:index]:
        if new["current"].get(earlier) is not None:
            new["wanted"][earlier] = new["current"][earlier]
    new["wanted"][field] = value
    new["current"] = relax(new["wanted"], source, keep=field)
    return new


#: ◀ ▶ step over at most this many options that show nothing before they give up.
MAX_NUDGE_SKIPS = 20


def nudge(
    selection: Mapping[str, Any] | None, field: str, delta: int, source: OptionSource
) -> Selection:
    """◀ / ▶: move ``field`` to the previous/next of its current options (clamped).

    An option with nothing to show (its data is in a damaged file, or not written yet)
    would relax back to where the selection was, or into another trial; it is stepped
    over (up to :data:`MAX_NUDGE_SKIPS` of them), so that ◀ ▶ never get stuck in front of
    it. The fields before ``field`` never change; with no option left in that direction
    the selection stays.
    """
    new = _normalized(selection)
    options = field_options(new["current"], field, source)
    if not options:
        return new
    current = new["current"].get(field)
    if current in options:
        position = options.index(current) + delta
    else:
        position = 0 if delta > 0 else len(options) - 1
    position = max(0, min(len(options) - 1, position))
    upstream = CHAIN[: CHAIN.index(field)]
    for _ in range(MAX_NUDGE_SKIPS + 1):
        result = choose(new, field, options[position], source)
        shown = result["current"]
        if shown.get(field) == options[position] and all(
            shown.get(f) == new["current"].get(f) for f in upstream
        ):
            return result
        position += delta
        if not 0 <= position < len(options):
            break
    return refresh(new, source)


def field_options(current: Mapping[str, Any], field: str, source: OptionSource) -> list[Any]:
    """The options a selector lists: valid given the current values of the fields before it."""
    index = CHAIN.index(field)
    upstream = {f: current.get(f) for f in CHAIN[:index]}
    if any(v is None for v in upstream.values()):
        return []
    return list(source.options(field, upstream))


def all_options(current: Mapping[str, Any], source: OptionSource) -> dict[str, list[Any]]:
    """Options of every field for the current selection."""
    return {field: field_options(current, field, source) for field in CHAIN}


def open_where(
    selection: Mapping[str, Any] | None, where: Mapping[str, Any], source: OptionSource
) -> Selection:
    """The selection that shows ``where`` (a finding's place: fields of CHAIN plus
    ``statistic``), nearest valid to it.

    The fields ``where`` names become wanted (a type of execution it does not name is
    "any", so that its step is among the options); the rest keep the user's wishes. The
    trial and node stay fixed when they exist; the step, iteration and the rest relax to
    the nearest recorded ones (a parameter's step-level iteration -1 becomes the graph's).
    """
    new = _normalized(selection)
    fields = {f: where[f] for f in CHAIN if where.get(f) is not None}
    if "training_step" in fields and "type_of_execution" not in fields:
        fields["type_of_execution"] = ANY_TYPE
    new["wanted"].update(fields)
    statistic = where.get("statistic")
    if statistic in SERIES_STATISTICS:
        new["statistic"] = statistic
    new["current"] = relax(new["wanted"], source, keep="node" if "node" in fields else None)
    return new
