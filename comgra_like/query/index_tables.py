"""The index's shard tables: the new rows of a trial's steps, KPIs and notes shards, and
the step ranges of its tensors shards (footers only), as ``query/index.py``'s contract
says (new names only; a compaction that merged rows never read makes its table read
again; repeated steps rows left out and reported; damage reported, never fatal; a folder
or shard that could not be read now is reported and read again at the next update, what
was read before kept).

:class:`ShardTables` is a part of :class:`~comgra_like.query.index.GroupIndex` (a mixin:
it uses the index's listing, files and its reports of damaged files).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..format.files import unreachable
from ..format.layout import LEGACY_NOTES_JSONL, NOTES_DIR, live_shards, shard_range, shard_rank
from ..format.notes import NOTES_SCHEMA
from ..format.schema import RANK, SCHEMAS
from .trial_index import (
    EMPTY_KPIS,
    EMPTY_STEPS,
    KPI_KEY,
    RANK_STEP_KEY,
    TensorFile,
    TrialIndex,
    Update,
    covered_by,
    overlaps_partly,
    reason_of,
    step_range,
    to_pandas,
)
from .types import Note, SkippedFile

log = logging.getLogger("comgra_like")

#: How many repeated (step, iteration) pairs a report names before "…".
_NAMED_DUPLICATES = 3


class ShardTables:
    """The shard tables of :class:`~comgra_like.query.index.GroupIndex` (a mixin)."""

    def _listed(self, folder: Path, skipped: list[SkippedFile]) -> list[str] | None:
        """The names this update listed in ``folder``; None when it could not be listed
        now (reported: what was read of it stays, the next update lists it again)."""
        names = self.listing.names(folder)
        return names if self.listed_now(folder, skipped) else None

    def listed_now(self, folder: Path, skipped: list[SkippedFile]) -> bool:
        """Whether this update's listing could list ``folder`` (asked after its names):
        if not, reported once as could not be read now, and the caller keeps what it
        knew; if so, such a report ends. The watch() and metrics tables' indexes ask it
        too (``Group.refresh``)."""
        if not self.listing.listed(folder):
            self._cannot_read_now(folder, self.listing.unlisted[str(folder)], skipped)
            return False
        self._reached(folder)
        return True

    def _live(self, folder: Path, skipped: list[SkippedFile]) -> list[str] | None:
        names = self._listed(folder, skipped)
        if not names:
            return None  # not there (yet): an object store has no empty folders
        return live_shards(names)

    def _new_frames(self, trial: TrialIndex, kind: str, schema: pa.Schema,
                    skipped: list[SkippedFile]) -> tuple[list[tuple[str, pd.DataFrame]], bool]:
        """The rows of a table's files not read before, by file in sequence order, and
        whether they are the whole table (a compaction merged rows read before with
        rows never read: everything live is read again)."""
        folder = trial.layout.table(kind)
        live = self._live(folder, skipped)
        again = self._recheck_damaged(trial, kind, live)
        if live is None:
            return [], False
        seen = trial.seen.setdefault(kind, {})
        for name in again:
            seen.pop(name, None)
        before = dict(seen)
        new = [n for n in live if n not in seen]
        if not new:
            return [], False
        whole = any(overlaps_partly(shard_range(n), seen.values()) for n in new)
        if whole:
            seen.clear()
            new = live
        frames = []
        for i, name in enumerate(new):
            rng = shard_range(name)
            covered = covered_by(rng, seen.values())
            seen[name] = rng
            if covered:
                continue  # a compaction of rows read already
            path = folder / name
            try:
                table = self.files.read_parquet(path, schema=schema)
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                if unreachable(e):
                    # not read now, not damaged: reported, and this file and the ones
                    # after it are read at the next update (a whole read again keeps
                    # the table as it was until then)
                    self._cannot_read_now(path, e, skipped)
                    if whole:
                        seen.clear()
                        seen.update(before)
                        return [], False
                    for rest in new[i:]:
                        seen.pop(rest, None)
                    break
                self._damaged(trial, f"{kind}/{name}", f"unreadable shard ({reason_of(e)})",
                              skipped)
                continue
            self._unskip(path)
            if "trial_id" in table.column_names:
                table = table.drop_columns(["trial_id"])  # cheaper than the frame's drop
            frame = to_pandas(table)
            frame[RANK] = shard_rank(name)
            frames.append((name, frame))
        return frames, whole

    def _update_steps(self, trial: TrialIndex, skipped: list[SkippedFile]) -> list[int]:
        """New rows of the steps table; the training steps that got new rows."""
        frames, whole = self._new_frames(trial, "steps", SCHEMAS["steps"], skipped)
        if not frames:
            if whole:
                trial.steps = EMPTY_STEPS
            return []
        before = EMPTY_STEPS if whole else trial.steps
        parts = [before] + [f for _, f in frames]
        source = np.repeat(np.arange(-1, len(frames)), [len(p) for p in parts])
        # one frame alone is not concatenated (the first read of most trials)
        filled = [p for p in parts if len(p)]
        combined = (filled[0].reset_index(drop=True) if len(filled) == 1
                    else pd.concat(parts, ignore_index=True))
        repeated = combined.duplicated(RANK_STEP_KEY, keep="first").to_numpy()
        if repeated.any():
            for i in np.unique(source[repeated]):
                name = frames[i][0]
                rows = combined[repeated & (source == i)]
                self._report_duplicates(trial, name, rows, skipped)
            combined = combined[~repeated]
            source = source[~repeated]
        if whole:
            old = trial.steps
            known = pd.MultiIndex.from_frame(old[RANK_STEP_KEY]) if len(old) else None
            fresh = combined if known is None else combined[
                ~pd.MultiIndex.from_frame(combined[RANK_STEP_KEY]).isin(known)]
        else:
            fresh = combined[source >= 0]
        trial.steps = combined.sort_values(RANK_STEP_KEY, kind="stable").reset_index(drop=True)
        return sorted({int(s) for s in fresh["training_step"]})

    def _report_duplicates(self, trial: TrialIndex, name: str, rows: pd.DataFrame,
                           skipped: list[SkippedFile]) -> None:
        pairs = list(zip(rows["training_step"].tolist(), rows["iteration"].tolist()))
        named = ", ".join(f"step {s} iteration {i}" for s, i in pairs[:_NAMED_DUPLICATES])
        if len(pairs) > _NAMED_DUPLICATES:
            named += f" and {len(pairs) - _NAMED_DUPLICATES} more"
        reason = (f"{len(pairs)} recorded step rows ({named}) repeat rows read from "
                  "another file and were left out, the first kept: two recorders wrote this "
                  "trial; record each run under its own trial id")
        path = trial.layout.table("steps") / name
        if self._skip(path, reason, skipped):
            log.warning("%s: %s", path, reason)

    def _update_kpis(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        frames, whole = self._new_frames(trial, "kpis", SCHEMAS["kpis"], skipped)
        if not frames:
            if whole and len(trial.kpis):
                trial.kpis = EMPTY_KPIS
                return True
            return False
        before = EMPTY_KPIS if whole else trial.kpis
        parts = [p for p in [before] + [f for _, f in frames] if len(p)]
        if not parts:
            changed = len(trial.kpis) > 0
            trial.kpis = EMPTY_KPIS
            return changed or bool(frames)
        combined = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        trial.kpis = (combined.drop_duplicates(subset=[*KPI_KEY, RANK])
                      .sort_values("timepoint", kind="stable").reset_index(drop=True))
        return True

    def _update_notes(self, trial: TrialIndex, skipped: list[SkippedFile]) -> bool:
        legacy = self._update_legacy_notes(trial)
        frames, whole = self._new_frames(trial, NOTES_DIR, NOTES_SCHEMA, skipped)
        if whole:
            trial.shard_notes = []
        for _, frame in frames:
            steps = frame["training_step"].tolist()
            trial.shard_notes.extend(
                (str(text), float(wall_time), None if pd.isna(step) else int(step), int(rank))
                for text, wall_time, step, rank in zip(frame["text"], frame["wall_time"], steps,
                                                       frame[RANK]))
        if not (legacy or frames or whole):
            return False
        notes = list(trial.legacy_notes)
        notes += [Note(len(notes) + i, text, wall_time, step, rank)
                  for i, (text, wall_time, step, rank) in enumerate(trial.shard_notes)]
        changed = tuple(notes) != trial.notes
        trial.notes = tuple(notes)
        return changed

    def _update_legacy_notes(self, trial: TrialIndex) -> bool:
        """Lines appended to notes.jsonl since the last update (complete lines only)."""
        path = trial.path / LEGACY_NOTES_JSONL
        if self.files.remote:
            return False  # written before notes were shards, never to object storage
        if self.files.refusal(path) is not None:
            return False  # a link (reported with the trial folder's links)
        try:
            size = path.stat().st_size
        except OSError:
            return False
        if size <= trial.legacy_offset:
            return False
        with open(path, "rb") as f:
            f.seek(trial.legacy_offset)
            data = f.read(size - trial.legacy_offset)
        end = data.rfind(b"\n")
        if end < 0:
            return False  # a line still being written
        trial.legacy_offset += end + 1
        notes = trial.legacy_notes
        for line in data[: end + 1].splitlines():
            try:
                obj = json.loads(line)
                step = obj.get("training_step")
                notes.append(Note(len(notes), str(obj.get("text", "")),
                                  float(obj.get("wall_time") or 0.0),
                                  None if step is None else int(step)))
            except (ValueError, TypeError, AttributeError):  # not a note object: show the line
                notes.append(Note(len(notes), line.decode("utf-8", "replace"), 0.0))
        return True

    # ----- tensors (footers only), graphs, modules ---------------------------------------

    def _update_tensor_files(self, trial: TrialIndex, skipped: list[SkippedFile],
                             update: Update) -> int:
        """Index new tensors shards by their step range; how many damaged ones were
        repaired since."""
        folder = trial.layout.table("tensors")
        live = self._live(folder, skipped)
        again = self._recheck_damaged(trial, "tensors", live)
        if live is None:
            return 0
        seen = trial.seen.setdefault("tensors", {})
        for name in again:
            seen.pop(name, None)
        files = trial.tensor_files
        gone = [n for n in files if n not in live]  # a compaction replaced them
        new = [n for n in live if n not in seen]
        if not (gone or new):
            return 0
        files = {n: f for n, f in files.items() if n in live}
        update.gone_files.extend((trial.trial_id, n) for n in gone)
        repaired = 0
        for i, name in enumerate(new):
            path = folder / name
            seen[name] = shard_range(name)
            try:
                lo, hi = step_range(self.files.parquet_metadata(path))
            except Exception as e:  # noqa: BLE001 - any damage is reported, never fatal
                if unreachable(e):
                    # not read now, not damaged: this footer and the ones after it are
                    # read at the next update; the steps they hold wait until then
                    self._cannot_read_now(path, e, skipped)
                    for rest in new[i:]:
                        seen.pop(rest, None)
                    break
                self._damaged(trial, f"tensors/{name}", f"unreadable shard ({reason_of(e)})",
                              skipped)
                files.pop(name, None)
                continue
            files[name] = TensorFile(path, lo, hi)
            if self._unskip(path):  # repaired: steps read without it read again
                repaired += 1
                update.repaired.append((trial.trial_id, lo, hi))
        trial.tensor_files = dict(sorted(files.items(), key=lambda kv: shard_range(kv[0])))
        return repaired
