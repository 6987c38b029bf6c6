"""Reads of what ``comgra_like.watch`` records: the histograms table, the module graph of
a step and the watch report (docs/FORMAT.md, "watch()").

The shard names of both tables come from the refresh's listing (``WatchIndex.update``
asks the index's :class:`~comgra_like.query.listing.GroupListing`: each folder listed once
per refresh), so that reads between two refreshes answer from the same snapshot, like the
other reads of the query API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError, StorageError
from ..format.files import StoreUnreachable, files_for
from ..format.graphs import is_graph_digest
from ..format.layout import (
    HISTOGRAMS,
    MODULE_STEPS,
    TrialLayout,
    shard_rank,
)
from ..format.schema import RANK, SCHEMAS, conform, current_names
from .listing import GroupListing, live_now

#: what a histogram is of (the ``what`` column)
WHATS = ("io", "io_grad", "params", "params_grad")

#: The columns of ``Group.read_histograms``: the files' words (docs/FORMAT.md,
#: "Vocabulary"): ``module`` the module invocation (older files' and reads' ``node``),
#: ``time`` the time_log value (no wall time).
HISTOGRAM_COLUMNS = ["training_step", "type_of_execution", "iteration", "module", "role",
                     "recording_type", "what", "time", "lo", "hi", "counts", "n", "vmin",
                     "vmax", "shared_with", "recorded_as"]
#: The columns of the reads that come from the histograms table (the last two are added
#: by the reads).
STORED_COLUMNS = HISTOGRAM_COLUMNS[:-2]
_PARAM_WHATS = ("params", "params_grad")


@dataclass
class _TrialWatch:
    shards: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> live names
    report_signature: tuple | None = None
    tables: dict[str, tuple[tuple[str, ...], pa.Table]] = field(default_factory=dict)
    report: tuple[tuple | None, dict | None] | None = None
    shared: tuple[str | None, list[dict]] | None = None  # graph hash -> its shared params


class WatchIndex:
    """The shard names of the watch tables per trial, as of the last ``update``. The rows
    read carry a ``rank`` column (the rank that wrote the shard, from its name)."""

    def __init__(self, group: Path):
        self.group = Path(group)
        self.files = files_for(group)  # the local disk or an object store
        self._trials: dict[str, _TrialWatch] = {}

    def update(self, listing: GroupListing | None = None,
               listed_now: Callable[[Path], bool] | None = None) -> bool:
        """The watch tables' shards of every trial, from ``listing`` (the refresh's; a
        listing of its own without one); True if anything changed. A folder the listing
        could not list now (``listed_now`` says, and reports it; by default the listing's
        ``listed``) and a report that could not be looked at now keep what was known:
        the tables are not shown empty while the store is away."""
        listing = listing or GroupListing(self.group, self.files)
        listed_now = listed_now or listing.listed
        changed = False
        names = listing.visible_trial_folders()
        for trial_id in names:
            layout = TrialLayout.of(self.group, trial_id)
            state = self._trials.setdefault(trial_id, _TrialWatch())
            for table in (HISTOGRAMS, MODULE_STEPS):
                folder = layout.table(table)
                live = tuple(listing.live(folder))
                if not listed_now(folder):
                    continue
                if state.shards.get(table, ()) != live:
                    state.shards[table] = live
                    changed = True
            try:
                sig = self.files.signature_now(layout.watch_json)
            except StoreUnreachable:
                continue  # read again at the next refresh; the report read before stays
            if sig != state.report_signature:
                state.report_signature = sig
                changed = True
        for gone in set(self._trials) - set(names):
            del self._trials[gone]
        return changed

    def _state(self, trial_id: str) -> _TrialWatch:
        return self._trials.get(trial_id) or _TrialWatch()

    def ranks(self, trial_id: str) -> set[int]:
        """The ranks that wrote shards of a trial's watch tables."""
        return {r for names in self._state(trial_id).shards.values() for n in names
                if (r := shard_rank(n)) is not None}

    def table(self, trial_id: str, table: str) -> pa.Table:
        """The rows of one watch table of a trial (read once per set of shard names), with
        a ``rank`` column last."""
        state = self._state(trial_id)
        names = state.shards.get(table, ())
        cached = state.tables.get(table)
        if cached is not None and cached[0] == names:
            return cached[1]
        folder = TrialLayout.of(self.group, trial_id).table(table)
        parts = []
        for name in names:
            try:
                # older files' column names read as the current ones
                part = conform(current_names(self.files.read_parquet(folder / name), table),
                               SCHEMAS[table])
            except FileNotFoundError:
                # compacted since the refresh: the compacted file holds the same rows
                return self._reread(trial_id, table, tuple(live_now(self.files, folder)))
            except (OSError, pa.ArrowException) as e:
                raise StorageError(f"cannot read {folder / name}: {e}") from None
            # the name says whose rows they are, also for files written before the column
            parts.append(part.append_column(RANK, pa.array(
                np.full(part.num_rows, shard_rank(name) or 0, np.int32))))
        result = (pa.concat_tables(parts).unify_dictionaries() if parts
                  else SCHEMAS[table].empty_table().append_column(RANK, pa.array([], pa.int32())))
        state.tables[table] = (names, result)
        return result

    def _reread(self, trial_id: str, table: str, names: tuple[str, ...]) -> pa.Table:
        state = self._trials.setdefault(trial_id, _TrialWatch())
        state.shards[table] = names
        state.tables.pop(table, None)
        return self.table(trial_id, table)

    def shared_parameters(self, trial_id: str) -> list[dict]:
        """The trial's parameters held by several modules (tied weights), from its latest
        module graph: ``[{"recorded": (module, name), "holders": [(module, name), ...]}]``;
        empty for a trial without any (or recorded before the graph named them)."""
        table = self.table(trial_id, MODULE_STEPS)
        if not table.num_rows:
            return []
        last = pc.sort_indices(table, sort_keys=[("training_step", "descending")])[0].as_py()
        digest = str(table.column("graph_hash").cast(pa.string())[last].as_py())
        state = self._state(trial_id)
        if state.shared is not None and state.shared[0] == digest:
            return state.shared[1]
        try:
            graph = read_module_graph_file(self.group, trial_id, digest)
        except StorageError:  # the histograms still read, shown under their recorded holder
            graph = None
        value = shared_of_graph(graph)
        if trial_id in self._trials:
            state.shared = (digest, value)
        return value

    def report(self, trial_id: str) -> dict | None:
        state = self._state(trial_id)
        if state.report is not None and state.report[0] == state.report_signature:
            return state.report[1]
        path = TrialLayout.of(self.group, trial_id).watch_json
        try:
            value = self.files.read_json(path)
        except FileNotFoundError:
            value = None
        except (OSError, ValueError) as e:
            raise StorageError(f"cannot read the watch report {path}: {e}") from None
        if value is not None and not isinstance(value, dict):
            raise StorageError(f"the watch report {path} is not a JSON object")
        if trial_id in self._trials:
            state.report = (state.report_signature, value)
        return value


def _as_list(value: Any) -> list | None:
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


def _of_ranks(table: pa.Table, ranks: list[int]) -> pa.Table:
    return table.filter(pc.is_in(table.column(RANK), value_set=pa.array(ranks, pa.int32())))


def shared_of_graph(graph: Any) -> list[dict]:
    """A module graph's ``shared_parameters`` as tuples (an old graph, or a model without
    tied weights: none); malformed entries are left out."""
    out: list[dict] = []
    entries = graph.get("shared_parameters") if isinstance(graph, dict) else None
    for entry in entries or ():
        try:
            recorded = (str(entry["recorded"][0]), str(entry["recorded"][1]))
            holders = [(str(m), str(p)) for m, p in entry["holders"]]
        except (KeyError, TypeError, IndexError, ValueError):
            continue
        if recorded in holders and len(holders) > 1:
            out.append({"recorded": recorded, "holders": holders})
    return out


def modules_argument(modules: Any, nodes: Any) -> Any:
    """The modules a histograms read filters by: ``modules``, or ``nodes``, its older name
    (the column was ``node`` before the vocabulary was settled), which still works; a
    ConfigurationError when both are given."""
    if nodes is None:
        return modules
    if modules is not None:
        raise ConfigurationError("pass modules= (or nodes=, its older name), not both")
    return nodes


def read_histograms(index: WatchIndex, trial_id: str, *, ranks: list[int],
                    with_rank: bool = False, modules: Any = None, roles: Any = None,
                    what: Any = None, steps: Any = None, recording_types: Any = None,
                    types_of_execution: Any = None) -> pd.DataFrame:
    """The histograms of a trial's ``ranks`` as one row each (see
    ``Group.read_histograms``); ``with_rank`` adds a ``rank`` column.

    A parameter held by several modules (tied weights) is recorded once, under its first
    holder; its rows are shown under every holder: the recorded rows with ``shared_with``
    naming the other holders' parameters (``model.lm_head.weight``), and one copy per
    other holder (``module`` and ``role`` that holder's) with ``recorded_as`` naming the
    recorded one. Every other row has both empty."""
    shared = index.shared_parameters(trial_id)
    wanted_modules, wanted_roles = _as_list(modules), _as_list(roles)
    read_modules, read_roles = wanted_modules, wanted_roles
    if shared and (wanted_modules is not None or wanted_roles is not None):
        # the recorded rows of a holder asked for are read, copied below
        extra = [e["recorded"] for e in shared if any(
            (wanted_modules is None or m in wanted_modules) and (wanted_roles is None or p in
                                                                 wanted_roles)
            for m, p in e["holders"])]
        if wanted_modules is not None:
            read_modules = list(wanted_modules) + [m for m, _p in extra]
        if wanted_roles is not None:
            read_roles = list(wanted_roles) + [p for _m, p in extra]
    table = _of_ranks(index.table(trial_id, HISTOGRAMS), ranks)
    mask = None
    for column, wanted in (("module", read_modules), ("role", read_roles), ("what", what),
                           ("training_step", steps), ("recording_type", recording_types),
                           ("type_of_execution", types_of_execution)):
        values = _as_list(wanted)
        if values is None:
            continue
        col = table.column(column)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
            values = [str(v) for v in values]
        else:
            values = [int(v) for v in values]
        m = pc.is_in(col, value_set=pa.array(values, type=col.type))
        mask = m if mask is None else pc.and_(mask, m)
    if mask is not None:
        table = table.filter(mask)
    names = STORED_COLUMNS + ([RANK] if with_rank else [])
    columns = {}
    for name in names:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        if name == "counts":
            columns[name] = [np.asarray(x, dtype=np.int64) for x in col.to_pylist()]
        else:
            columns[name] = col.to_numpy()
    frame = pd.DataFrame(columns, columns=names)
    frame.insert(len(STORED_COLUMNS), "shared_with", "")
    frame.insert(len(STORED_COLUMNS) + 1, "recorded_as", "")
    if shared and not frame.empty:
        frame = _with_holders(frame, shared)
        if wanted_modules is not None:
            frame = frame[frame["module"].isin([str(m) for m in wanted_modules])]
        if wanted_roles is not None:
            frame = frame[frame["role"].isin([str(r) for r in wanted_roles])]
    order = ["training_step", "iteration", "what", "module", "role", "recording_type"]
    return frame.sort_values(order + ([RANK] if with_rank else []),
                             kind="stable").reset_index(drop=True)


def _with_holders(frame: pd.DataFrame, shared: list[dict]) -> pd.DataFrame:
    """``frame`` with the rows of each shared parameter copied to its other holders and
    ``shared_with``/``recorded_as`` filled in (see ``read_histograms``)."""
    is_param = frame["what"].isin(_PARAM_WHATS)
    parts = [frame]
    for entry in shared:
        (module, name), holders = entry["recorded"], entry["holders"]
        rows = is_param & (frame["module"] == module) & (frame["role"] == name)
        if not rows.any():
            continue
        full = [f"{m}.{p}" for m, p in holders]
        recorded = f"{module}.{name}"
        frame.loc[rows, "shared_with"] = ", ".join(f for f in full if f != recorded)
        original = frame[rows]
        for (m, p), f in zip(holders, full):
            if (m, p) == (module, name):
                continue
            copy = original.copy()
            copy["module"], copy["role"] = m, p
            copy["shared_with"] = ", ".join(x for x in full if x != f)
            copy["recorded_as"] = recorded
            parts.append(copy)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else frame


#: What identifies one histogram apart from the rank that recorded it.
HISTOGRAM_KEY = ["training_step", "type_of_execution", "iteration", "module", "role",
                 "recording_type", "what"]
EXACT, REBINNED = "exact", "rebinned"


def merge_histograms(frame: pd.DataFrame, rebin: bool = False) -> pd.DataFrame:
    """``read_histograms(ranks=...)``'s rows merged over the ranks, one row per histogram
    key: the histogram of all the ranks' counted values together.

    Where every rank's bins have the same edges (same ``lo``, ``hi`` and number of bins:
    parameters and their gradients under DDP, whose values are the same on every rank)
    the counts add, exactly (``merge`` = ``exact``). Each rank bins its own values over
    their own range, so the edges of activations differ between ranks; such a row is
    refused (ConfigurationError) unless ``rebin``: then the common edges span the union
    of the ranges with the largest number of bins, and each rank's bin count is spread
    over the bins it overlaps in proportion to the overlap, which assumes values spread
    evenly inside a bin (``merge`` = ``rebinned``; float counts whose sum is exact, the
    shape approximate). ``n`` adds, ``vmin``/``vmax`` are the smallest and largest,
    ``time`` the first rank's, ``ranks`` counts the ranks that had the row.
    """
    columns = [*HISTOGRAM_COLUMNS, "ranks", "merge"]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=frame[c].dtype if c in frame else "object")
                             for c in columns})
    out = []
    for _, rows in frame.groupby(HISTOGRAM_KEY, sort=False, dropna=False):
        first = rows.iloc[0]
        counts = list(rows["counts"])
        lo, hi = rows["lo"].to_numpy(np.float64), rows["hi"].to_numpy(np.float64)
        bins = {len(c) for c in counts}
        if len(bins) == 1 and np.all(lo == lo[0]) and np.all(hi == hi[0]):
            merged, how = np.sum(counts, axis=0).astype(np.int64), EXACT
            new_lo, new_hi = float(lo[0]), float(hi[0])
        elif not rebin:
            raise ConfigurationError(
                f"the histograms of {first['module']} {first['role']} ({first['what']}, "
                f"{first['recording_type']}) at step {first['training_step']} have different "
                f"bin edges on ranks {rows[RANK].tolist()} (ranges "
                f"{', '.join(f'[{a:.4g}, {b:.4g}]' for a, b in zip(lo, hi))}): their counts "
                "cannot be added exactly; pass rebin=True to spread them over common edges "
                "(approximate), or read the ranks side by side with ranks='all'")
        else:
            new_lo, new_hi = float(lo.min()), float(hi.max())
            merged, how = _rebin(counts, lo, hi, new_lo, new_hi, max(bins)), REBINNED
        row = {c: first[c] for c in HISTOGRAM_KEY}
        row.update(shared_with=first.get("shared_with", ""),
                   recorded_as=first.get("recorded_as", ""))
        row.update(time=first["time"], lo=new_lo, hi=new_hi, counts=merged,
                   n=int(rows["n"].sum()), vmin=float(rows["vmin"].min()),
                   vmax=float(rows["vmax"].max()), ranks=len(rows), merge=how)
        out.append(row)
    return pd.DataFrame(out, columns=columns)


def _rebin(counts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray, new_lo: float,
           new_hi: float, bins: int) -> np.ndarray:
    """Every rank's counts spread over ``bins`` equal bins from ``new_lo`` to ``new_hi``
    in proportion to the overlap of its bins with them (a bin of zero width, a range of
    one value, goes whole into the bin that holds it)."""
    edges = np.linspace(new_lo, new_hi, bins + 1)
    out = np.zeros(bins, np.float64)
    for c, a, b in zip(counts, lo, hi):
        own = np.linspace(a, b, len(c) + 1)
        left, right = own[:-1], own[1:]
        width = right - left
        overlap = (np.minimum(right[:, None], edges[None, 1:])
                   - np.maximum(left[:, None], edges[None, :-1])).clip(min=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(width[:, None] > 0, overlap / width[:, None], 0.0)
        point = width <= 0
        if point.any():
            at = np.clip(np.searchsorted(edges, left[point], side="right") - 1, 0, bins - 1)
            share[np.flatnonzero(point), at] = 1.0
        out += np.asarray(c, np.float64) @ share
    return out


def module_graph_hash(index: WatchIndex, trial_id: str, training_step: int,
                      iteration: int | None = None, rank: int = 0) -> str | None:
    """The graph hash of a step's module graph on ``rank`` (the first iteration's unless
    given)."""
    table = _of_ranks(index.table(trial_id, MODULE_STEPS), [rank])
    mask = pc.equal(table.column("training_step"), pa.scalar(int(training_step), pa.int64()))
    if iteration is not None:
        mask = pc.and_(mask, pc.equal(table.column("iteration"),
                                      pa.scalar(int(iteration), pa.int32())))
    rows = table.filter(mask)
    if not rows.num_rows:
        return None
    order = pc.sort_indices(rows.column("iteration"))
    return str(rows.column("graph_hash").cast(pa.string())[order[0].as_py()].as_py())


def read_module_graph_file(group: Path, trial_id: str, digest: str) -> dict:
    if not is_graph_digest(digest):
        raise StorageError(f"{digest[:80]!r} names no graph file (64 hex digits expected)")
    path = TrialLayout.of(group, trial_id).module_graph(digest)
    try:
        value = files_for(path).read_json(path)
    except (OSError, ValueError) as e:
        raise StorageError(f"cannot read the module graph {path}: {e}") from None
    if not isinstance(value, dict) or "invocations" not in value:
        raise StorageError(f"{path} is no module graph (no 'invocations')")
    return value


def module_graph_steps(index: WatchIndex, trial_id: str, ranks: list[int],
                       with_rank: bool = False) -> pd.DataFrame:
    """training_step, type_of_execution, iteration, graph_hash (and ``rank`` with
    ``with_rank``) of every step of ``ranks`` with a module graph."""
    table = _of_ranks(index.table(trial_id, MODULE_STEPS), ranks)
    names = ["training_step", "type_of_execution", "iteration", "graph_hash"]
    names += [RANK] if with_rank else []
    frame = pd.DataFrame({
        name: (table.column(name).cast(pa.string()) if pa.types.is_dictionary(
            table.column(name).type) else table.column(name)).to_numpy()
        for name in names})
    return frame.sort_values(["training_step", "iteration"] + ([RANK] if with_rank else [])
                             ).reset_index(drop=True)
