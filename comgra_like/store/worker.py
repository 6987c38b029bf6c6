"""The writer process: turns the tensors a training process recorded into parquet shards.

Why a process: on a CPU-only machine the statistics of a recorded step cost several
times the step itself, and a thread in the training process competes with training for
the GIL (measured: a writer *thread* made each recorded step cost as much as if it ran
inline). The training process only copies the recorded tensors into shared memory
(``SharedSlots`` in ``client.py``) and sends one JSON line per recorded step; this process
reduces them with numpy, builds Arrow tables and writes the shards while training goes
on. It imports no torch.

Protocol (one JSON object per line; replies on the original stdout):

* ``segment`` {slot, index, path, nelems}: map a shared-memory file (then unlink it)
* ``batch`` {slot, layout_id, [layout], refs, step, toe, samples, categories, batch_size,
  wall, graphs}: one recorded step; replied with ``free`` {slot} once the shared memory
  has been read (sent as the line ``f<slot>``, not as JSON: it is the common reply)
* ``kpis`` {rows}: rows of the KPI table
* ``config`` {flush_seconds}
* ``flush`` {id}: write everything buffered, reply ``flushed`` {id}
* ``close``: write everything, reply ``closed``, exit.
* the plain line ``h`` (not JSON): the training process waits for a free slot from now
  on; the step being reduced stops giving way to other threads (``scheduling.py``)

When the input ends without ``close``, or the training process is gone (its pid is no
longer this process's parent: children it forked, e.g. DataLoader workers, may keep the
pipe open, so the end of input may never come), the writer handles every message still
in the pipe, writes everything, marks the trial ``aborted`` in ``trial.json`` and exits.
Replies to a training process that is gone are dropped; they never stop the writing.
SIGINT and SIGTERM, which a terminal or a job scheduler sends to the whole process
group, are ignored for the same reason: the training process decides, and this process
ends after it.

On exit it deletes every shared-memory file that carries its training process's segment
prefix (one created but never announced when that process was killed in between).

After a failure the process writes what it had received, marks the trial ``aborted``,
replies ``error`` {message} once and then only answers ``free``/``flushed``/``closed``
so that the training process never hangs on it. An exception outside a message's
handling (a line that is no JSON, ...) is handled the same way, then the process exits.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import select
import signal
import sys
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .._rows import CaptureMeta, build_tensor_table, row_layout
from .._stats import (
    CHUNK_VALUES,
    NUM_STATS,
    batch_aggregates,
    block_statistics,
    group_by_size,
    top_singular_value,
)
from .files import mark_trial_aborted
from .scheduling import Courtesy
from .schema import KPIS_SCHEMA, STEPS_SCHEMA
from .writer import ShardBuffer

_FORWARD = "forward"
_UPDATE = "update"
_NORM_COLUMN = 6
# How often an idle writer checks that its training process is still there.
PARENT_CHECK_SECONDS = 0.5


@dataclass(frozen=True)
class CaptureSpec:
    """One captured tensor as the training process describes it."""

    tensor_name: str
    node: str
    role: str
    kind: str
    iteration: int
    recording_type: str
    shape: tuple[int, ...]
    batch_dim: int | None
    per_sample: bool
    with_values: bool
    param_index: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @classmethod
    def from_list(cls, x: list) -> CaptureSpec:
        return cls(x[0], x[1], x[2], x[3], int(x[4]), x[5], tuple(int(s) for s in x[6]),
                   None if x[7] is None else int(x[7]), bool(x[8]), bool(x[9]), int(x[10]))


# (layout key, grouping, samples) -> (batch metas, flat metas, row layout); see below
_LAYOUT_CACHE: dict[tuple, tuple] = {}


def _describe_captures(specs, batch_i, flat_i, batch_groups, flat_groups, value_shapes):
    """The CaptureMeta of every capture, in the order the statistics come out."""
    batch_meta: list[CaptureMeta] = []
    seg, value_offset = 0, 0
    for group in batch_groups:
        g, n = group.block.shape[0], group.block.shape[2]
        for j, m in enumerate(group.members):
            s = specs[batch_i[m]]
            batch_meta.append(CaptureMeta(
                s.tensor_name, s.node, s.role, s.kind, s.iteration, s.recording_type,
                value_shapes[m], s.per_sample, s.with_values, seg, value_offset + j * n, n,
                s.param_index))
            seg += 1
        value_offset += g * n
    flat_meta: list[CaptureMeta] = []
    seg, value_offset = 0, 0
    for group in flat_groups:
        for m in group.members:
            s = specs[flat_i[m]]
            off = -1
            if s.with_values:
                off = value_offset
                value_offset += s.numel
            flat_meta.append(CaptureMeta(
                s.tensor_name, s.node, s.role, s.kind, s.iteration, s.recording_type,
                s.shape, False, s.with_values, seg, off, s.numel, s.param_index, "flat"))
            seg += 1
    return batch_meta, flat_meta


@dataclass
class _StepPlan:
    """How the arrays of a recorded step are reduced: everything but the numbers.

    It holds views of the arrays (the writer's shared memory), so it serves only steps
    whose arrays are the same memory (``arrays_key``); updates go to a buffer of its own.
    """

    forward_param: dict  # parameter index -> (spec, values before the optimizer step)
    updates: list  # (after, before, out) per update capture: out = after - before
    vecs: list  # a [1, n] view per capture without batch dimension
    flat_i: list  # the index in specs of each of those
    batch_groups: list
    flat_groups: list
    batch_meta: list
    flat_meta: list
    rows: object  # the _RowLayout
    owned_bytes: int = 0  # the update buffer and stacked copies it keeps


# (layout key, arrays key, samples) -> _StepPlan; emptied when shared memory changes.
# Plans keep buffers of their own; beyond this many bytes in all, a plan is used for its
# step only (a model that large spends its time in the numbers, not in planning).
_PLAN_CACHE: dict[tuple, _StepPlan] = {}
PLAN_CACHE_BYTES = 64 * 2**20


def _plan_step(samples, specs, arrays, layout_key) -> _StepPlan:
    """The plan of a step, with the step's updates computed into its buffer."""
    # parameter index -> (spec, values) of the parameter before the optimizer step
    forward_param = {s.param_index: (s, a) for s, a in zip(specs, arrays)
                     if s.recording_type == _FORWARD and s.param_index >= 0}
    # The updates (after - before) go into one buffer, back to back, so that those of
    # one size form one block below.
    update_i = [i for i, s in enumerate(specs) if s.recording_type == _UPDATE]
    values = list(arrays)
    updates = []
    if update_i:
        buffer = np.empty(sum(specs[i].numel for i in update_i), np.float32)
        pos = 0
        for i in update_i:
            n = specs[i].numel
            before = forward_param[specs[i].param_index][1]
            out = values[i] = np.subtract(arrays[i], before, out=buffer[pos:pos + n])
            updates.append((arrays[i], before, out))
            pos += n
    batch_i = [i for i, s in enumerate(specs) if s.batch_dim is not None]
    flat_i = [i for i, s in enumerate(specs) if s.batch_dim is None]
    mats: list[np.ndarray] = []
    value_shapes = []
    for i in batch_i:
        s = specs[i]
        a = values[i].reshape(s.shape)
        if s.batch_dim:
            a = np.moveaxis(a, s.batch_dim, 0)
        value_shapes.append(a.shape[1:])
        mats.append(a.reshape(a.shape[0], -1))
    vecs = [values[i].reshape(1, -1) for i in flat_i]
    batch_groups = group_by_size(mats) if mats else []
    flat_groups = group_by_size(vecs) if vecs else []
    # The captures' descriptions and the rows' layout depend on the layout, the grouping
    # and the samples only: steps of a training loop repeat them, so they are made once.
    key = None
    if layout_key is not None:
        key = (layout_key, tuple(tuple(g.members) for g in batch_groups),
               tuple(tuple(g.members) for g in flat_groups), tuple(samples))
    cached = _LAYOUT_CACHE.get(key) if key is not None else None
    if cached is None:
        batch_meta, flat_meta = _describe_captures(specs, batch_i, flat_i, batch_groups,
                                                   flat_groups, value_shapes)
        n_batch_values = sum(g.block.shape[0] * g.block.shape[2] for g in batch_groups)
        cached = (batch_meta, flat_meta,
                  row_layout(tuple(batch_meta), tuple(flat_meta), tuple(samples), n_batch_values))
        if key is not None:
            if len(_LAYOUT_CACHE) >= 64:
                _LAYOUT_CACHE.clear()
            _LAYOUT_CACHE[key] = cached
    batch_meta, flat_meta, rows = cached
    owned = sum(out.nbytes for _, _, out in updates) + sum(
        g.block.nbytes for g in batch_groups + flat_groups if g.stacked_from is not None)
    return _StepPlan(forward_param, updates, vecs, flat_i, batch_groups, flat_groups,
                     batch_meta, flat_meta, rows, owned)


def compute_tensor_table(trial_id: str, step: int, toe: str, samples: list[int],
                         specs: list[CaptureSpec], arrays: list[np.ndarray],
                         svd_vectors: dict[int, np.ndarray] | None, release=None,
                         layout_key: object = None, pause=None,
                         arrays_key: object = None) -> pa.Table | None:
    """Statistics, values and rows of one recorded step.

    ``arrays[i]`` holds the values of ``specs[i]`` (flat float32; for an ``update``
    capture the parameter *after* the optimizer step, the update is computed here).
    ``svd_vectors`` carries the warm starts of the power iterations from step to step
    (None: no singular values). ``release`` is called once ``arrays`` are no longer needed.
    ``layout_key``: a hashable that stands for ``specs`` (the same object for the same
    specs); with it, what depends only on the layout is computed once and cached.
    ``arrays_key`` (with ``layout_key``): a hashable that stands for the memory of
    ``arrays`` (the same key: the same buffers, with new numbers in them); with it, the
    views, groups and update buffer are made once per layout and memory, not per step.
    ``pause``: called between units of work of ~50-100 us (the writer process gives
    way to training threads there, see ``scheduling.Courtesy``).
    """
    if pause is None:
        pause = _no_pause
    if not specs:
        if release is not None:
            release()
        return None
    plan = None
    plan_key = None
    if layout_key is not None and arrays_key is not None:
        plan_key = (layout_key, arrays_key, tuple(samples))
        plan = _PLAN_CACHE.get(plan_key)
    if plan is None:
        plan = _plan_step(samples, specs, arrays, layout_key)
        if plan_key is not None:
            held = sum(p.owned_bytes for p in _PLAN_CACHE.values())
            if len(_PLAN_CACHE) >= 64 or held + plan.owned_bytes > PLAN_CACHE_BYTES:
                _PLAN_CACHE.clear()
            if plan.owned_bytes <= PLAN_CACHE_BYTES:
                _PLAN_CACHE[plan_key] = plan
    else:  # the same memory with new numbers in it
        for after, before, out in plan.updates:
            np.subtract(after, before, out=out)
        for group in plan.batch_groups:
            group.restack()
        for group in plan.flat_groups:
            group.restack()
    k = len(samples)
    forward_param, vecs, flat_i = plan.forward_param, plan.vecs, plan.flat_i
    batch_groups, flat_groups = plan.batch_groups, plan.flat_groups
    batch_meta, flat_meta, rows = plan.batch_meta, plan.flat_meta, plan.rows
    agg_stats = np.zeros((3, 0, NUM_STATS), np.float32)
    sample_stats = np.zeros((k, 0, NUM_STATS), np.float32)
    agg_vals, sample_vals = np.zeros((3, 0), np.float32), np.zeros((k, 0), np.float32)
    if batch_groups:
        idx = np.asarray(samples, np.int64)
        parts_ps, parts_av, parts_sv = [], [], []
        for group in batch_groups:
            block = group.block  # [g, B, n]
            g, b, n = block.shape
            # Both reductions of a few tensors at a time, while they are in cache.
            per = max(1, CHUNK_VALUES // max(1, b * n))
            for a in range(0, g, per):
                pause()
                sub = block[a:a + per]
                parts_ps.append(block_statistics(sub).transpose(1, 0, 2))  # [B, g', STATS]
                parts_av.append(batch_aggregates(sub, axis=1).reshape(3, -1))
            parts_sv.append(block[:, idx].transpose(1, 0, 2).reshape(k, g * n))
        per_sample = np.concatenate(parts_ps, axis=1)  # [B, S, NUM_STATS]
        agg_stats = batch_aggregates(per_sample)
        sample_stats = per_sample[idx]
        agg_vals = np.concatenate(parts_av, axis=1)
        sample_vals = np.concatenate(parts_sv, axis=1)
    flat_stats = np.zeros((0, NUM_STATS), np.float32)
    flat_vals = np.zeros(0, np.float32)
    if flat_groups:
        stats, value_vecs = [], []
        for group in flat_groups:
            block = group.block  # [g, 1, n]
            # One call per group (it reduces a chunk at a time and pauses in between):
            # a call per chunk cost ~15 us more each, to finish the statistics of one row.
            pause()
            stats.append(block_statistics(block, pause)[:, 0])  # [g, NUM_STATS]
            for m in group.members:
                if specs[flat_i[m]].with_values:
                    value_vecs.append(vecs[m][0].copy())
        flat_stats = np.concatenate(stats, axis=0)
        if value_vecs:
            flat_vals = np.concatenate(value_vecs)
    svd = {}
    if svd_vectors is not None:
        for p, (spec, w) in forward_param.items():
            if len(spec.shape) == 2:
                pause()
                svd[p], svd_vectors[p] = top_singular_value(w.reshape(spec.shape),
                                                            svd_vectors.get(p))
    del forward_param, vecs, plan
    if release is not None:
        release()
    # Update ratio: norm of the update over the norm of the weight before it.
    forward_norm = {m.param_index: flat_stats[m.segment, _NORM_COLUMN] for m in flat_meta
                    if m.recording_type == _FORWARD and m.param_index >= 0}
    ratio = {}
    for m in flat_meta:
        if m.recording_type == _UPDATE:
            w = forward_norm.get(m.param_index)
            u = flat_stats[m.segment, _NORM_COLUMN]
            ratio[m.param_index] = float(u / w) if w else float("nan")
    pause()
    return build_tensor_table(
        trial_id=trial_id, training_step=step, type_of_execution=toe, sample_indices=samples,
        batch_meta=batch_meta, batch_agg_stats=agg_stats, batch_sample_stats=sample_stats,
        batch_agg_values=agg_vals, batch_sample_values=sample_vals, flat_meta=flat_meta,
        flat_stats=flat_stats, flat_values=flat_vals, svd_top=svd, update_ratio=ratio,
        layout=rows,
    )


def _no_pause() -> None:
    pass


_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


def _meaning(e: BaseException) -> str:
    """What an exception of the writer means for the user, and what to do."""
    if isinstance(e, OSError) and e.errno is not None:
        path = e.filename2 or e.filename  # of a rename: where it was to go
        where = f" ({path})" if path else ""
        if e.errno in _DISK_FULL:
            return "the disk is full or over quota: free space, then record again"
        if e.errno == errno.EROFS:
            return f"the file system is read-only{where}: record to a writable folder"
        if e.errno in (errno.EACCES, errno.EPERM):
            return f"no permission to write{where}: record to a folder this user can write to"
        if e.errno in _NOT_A_FOLDER:
            return (f"something else stands where the writer needs a folder or a file"
                    f"{where}: the trial folder was changed while recording; remove what "
                    "does not belong there")
        if e.errno == errno.EIO:
            return "the disk reported an input/output error: check the disk"
        return f"the writer could not write to the disk{where}"
    if isinstance(e, MemoryError):
        return "the writer process ran out of memory: record fewer tensors or fewer samples"
    return ("a bug in comgra_like's writer; please report it with the traceback the writer "
            "printed to stderr")


class Worker:
    """Handles the messages of one trial's training process (used by both transports)."""

    def __init__(self, trial_dir: Path, trial_id: str, calculate_svd: bool,
                 background_writes: bool = True):
        self.trial_id = trial_id
        self.trial_dir = Path(trial_dir)
        self.shards = ShardBuffer(Path(trial_dir), background=background_writes)
        self.svd_vectors: dict[int, np.ndarray] | None = {} if calculate_svd else None
        self.segments: dict[tuple[int, int], np.ndarray] = {}
        self._maps: dict[tuple[int, int], mmap.mmap] = {}
        self.layouts: dict[int, list[CaptureSpec]] = {}
        self.layout_keys: dict[int, object] = {}
        self.failed: str | None = None
        self._reported = False  # the failure was sent to the training process
        self._steps_received = 0
        # Rows of the steps table, column by column, made into one table when shards are
        # written: a table per recorded step cost ~0.4 ms of this process's CPU.
        self._step_rows: dict[str, list] = {name: [] for name in STEPS_SCHEMA.names}

    # ----- segments -----------------------------------------------------------------

    def add_segment(self, slot: int, index: int, buffer, nelems: int) -> None:
        self.segments[(slot, index)] = np.frombuffer(buffer, np.float32, count=nelems)
        # A slot's segments are only ever appended, so (slot, refs) names the memory of a
        # step plan; a slot that grew moves its steps to new refs, and the old plans
        # (views and update buffers) would only hold memory.
        _PLAN_CACHE.clear()

    def map_segment(self, slot: int, index: int, path: str, nelems: int) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, nelems * 4, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
            try:
                os.unlink(path)  # both processes hold the mapping; nothing can leak now
            except OSError:
                pass
        self._maps[(slot, index)] = mm
        self.add_segment(slot, index, mm, nelems)

    # ----- messages -----------------------------------------------------------------

    def handle(self, msg: dict, reply, pause=None) -> bool:
        """Handle one message; ``reply(dict)`` answers. False: the worker should exit.

        ``pause`` is called between units of a recorded step's work (see
        ``scheduling.Courtesy``).
        """
        op = msg["op"]
        if op == "close":
            self._guard(self._write_and_wait)
            reply({"op": "closed", "error": self.failed})
            return False
        if op == "flush":
            self._guard(self._write_and_wait)
            reply({"op": "flushed", "id": msg["id"], "error": self.failed})
            return True
        if op == "batch":
            freed = []

            def release():
                if not freed:
                    freed.append(True)
                    reply({"op": "free", "slot": msg["slot"]})

            self._guard(lambda: self._batch(msg, release, pause))
            release()
        elif op == "segment":
            if "buffer" in msg:
                self.add_segment(msg["slot"], msg["index"], msg["buffer"], msg["nelems"])
            else:
                self._guard(lambda: self.map_segment(msg["slot"], msg["index"], msg["path"],
                                                     msg["nelems"]))
        elif op == "kpis":
            self._guard(lambda: self._kpis(msg["rows"]))
        elif op == "config":
            self.shards.flush_seconds = float(msg["flush_seconds"])
        if self.failed is None and self.shards.must_flush():
            self._guard(self._write)
        self.report_failure(reply)
        return True

    def report_failure(self, reply) -> None:
        """Send the failure, once, if there is one."""
        if self.failed is not None and not self._reported:
            self._reported = True
            reply({"op": "error", "message": self.failed})

    def _buffer_step_rows(self) -> None:
        rows = self._step_rows
        if rows["training_step"]:
            self._step_rows = {name: [] for name in STEPS_SCHEMA.names}
            self.shards.add({"steps": pa.table(rows).cast(STEPS_SCHEMA)})

    def _write(self) -> None:
        """Hand everything buffered to the shard writer, the steps rows as one table."""
        self._buffer_step_rows()
        self.shards.write()

    def _write_and_wait(self) -> None:
        self._write()
        self.shards.wait()

    def tick(self) -> None:
        """Called when ``seconds_to_flush`` has passed without a message."""
        if self.failed is None and self.shards.must_flush():
            self._guard(self._write)

    def seconds_to_flush(self) -> float | None:
        return None if self.failed is not None else self.shards.seconds_to_flush()

    def _guard(self, fn) -> None:
        if self.failed is not None:
            return
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported to the training process, which raises it
            self.fail(e)

    def fail(self, e: BaseException) -> None:
        """After an error: write what was received before it, mark the trial aborted.

        ``failed`` (sent to the training process, which raises it) names the exception,
        what it means and what became of the steps received before.
        """
        if self.failed is not None:
            return
        traceback.print_exception(e, file=sys.stderr)
        self.failed = f"{type(e).__name__}: {e} ({_meaning(e)})"
        kept = self._salvage(e)
        self.failed += "; " + kept
        self.end_abnormally(f"the writer failed: {self.failed}")

    def _salvage(self, failure: BaseException) -> str:
        """Write everything buffered after ``failure``; says what became of it."""
        rows = self._step_rows
        # A step that failed half-way through its rows leaves columns of unequal length.
        n = min(len(column) for column in rows.values())
        for column in rows.values():
            del column[n:]
        try:
            self._write_and_wait()
        except Exception as e:  # noqa: BLE001 - the first error is the one reported
            lost = ("the steps of the shard that failed to be written (and any received "
                    "after it) are lost")
            if e is not failure:
                traceback.print_exc(file=sys.stderr)
                lost = (f"the steps not written yet could not be written either "
                        f"({type(e).__name__}: {e})")
            return f"{lost}; the shards written before are intact"
        return ("every other step received is written "
                f"({self._steps_received} recorded steps received in all)")

    def end_abnormally(self, reason: str) -> None:
        """Write everything received (unless that failed already) and mark the trial
        ``aborted`` in its trial.json."""
        if self.failed is None:
            self._guard(self._write_and_wait)
        mark_trial_aborted(self.trial_dir, reason)

    def _batch(self, msg: dict, release, pause=None) -> None:
        self._steps_received += 1
        if "layout" in msg:
            self.layouts[msg["layout_id"]] = [CaptureSpec.from_list(x) for x in msg["layout"]]
            self.layout_keys[msg["layout_id"]] = object()  # stands for this layout in caches
        specs = self.layouts[msg["layout_id"]]
        refs = msg["refs"]
        slot = msg["slot"]
        arrays = []
        for i, s in enumerate(specs):
            seg, off = refs[2 * i], refs[2 * i + 1]
            arrays.append(self.segments[(slot, seg)][off:off + s.numel])
        samples = msg["samples"]
        tensors = compute_tensor_table(self.trial_id, msg["step"], msg["toe"], samples, specs,
                                       arrays, self.svd_vectors, release,
                                       layout_key=self.layout_keys[msg["layout_id"]],
                                       pause=pause,
                                       arrays_key=(slot, tuple(refs)))
        del arrays
        rows = self._step_rows
        for iteration, graph_hash in msg["graphs"]:
            rows["trial_id"].append(self.trial_id)
            rows["training_step"].append(msg["step"])
            rows["type_of_execution"].append(msg["toe"])
            rows["iteration"].append(int(iteration))
            rows["graph_hash"].append(graph_hash)
            rows["batch_size"].append(msg["batch_size"])
            rows["sample_indices"].append(samples)
            rows["sample_categories"].append(msg["categories"])
            rows["wall_time"].append(msg["wall"])
        # Steps strictly increase (the recorder checks it) and each step's tensor rows
        # come sorted: the tensor shard needs no sort.
        self.shards.add({"tensors": tensors}, presorted=("tensors",))
        if tensors is None:  # nothing else starts the clock of the next shard
            self._buffer_step_rows()

    def _kpis(self, rows: list) -> None:
        if not rows:
            return
        g, n, t, tp, v, w = zip(*rows)
        table = pa.table(
            {"trial_id": [self.trial_id] * len(rows), "kpi_group": list(g), "kpi_name": list(n),
             "type_of_execution": list(t), "timepoint": list(tp),
             "value": [float("nan") if x is None else x for x in v], "wall_time": list(w)}
        ).cast(KPIS_SCHEMA)
        self.shards.add({"kpis": table})


def warm_up() -> None:
    """Run one tiny step through every stage in a throwaway folder.

    The first use of pyarrow's conversions imports more modules (pandas among them) and
    took ~0.15 s; done here, before the writer reports ready, no recorded step of the
    training loop waits for it.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="comgra_like-warm-up-") as tmp:
        worker = Worker(Path(tmp), "warm-up", calculate_svd=True, background_writes=False)
        buffer = bytearray(4 * 64)
        worker.add_segment(0, 0, buffer, 64)
        layout = [["x", "x", "x", "input", 0, _FORWARD, [2, 3], 0, True, True, -1],
                  ["w", "w", "w", "parameter", -1, _FORWARD, [2, 2], None, False, False, 0],
                  ["w", "w", "w", "parameter", -1, _UPDATE, [2, 2], None, False, False, 0]]
        replies = []
        for msg in (
            {"op": "batch", "slot": 0, "layout_id": 0, "layout": layout, "refs": [0, 0, 0, 16, 0, 32],
             "step": 0, "toe": "warm_up", "samples": [0], "categories": [""], "batch_size": 2,
             "wall": 0.0, "graphs": [[0, "0" * 64]]},
            {"op": "kpis", "rows": [["g", "k", "warm_up", 0, 1.0, 0.0]]},
            {"op": "flush", "id": 1},
        ):
            worker.handle(msg, replies.append)
        if worker.failed is not None:
            raise RuntimeError(f"the writer's self-test failed: {worker.failed}")


class _Input:
    """The lines the training process sent, read as they come.

    The line ``h`` (hurry) is not a message: the training process sends it when it
    starts to wait for a free slot, and the step being reduced stops giving way
    (``scheduling.Courtesy``).
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.lines: deque[bytes] = deque()
        self._pending = b""
        self._hurry = False
        self.ended = False

    def read_rest(self) -> None:
        """Read everything already in the pipe, without waiting for more."""
        while not self.ended and select.select([self.fd], [], [], 0)[0]:
            self.read()

    def read(self) -> bool:
        """Read what is there (blocks if nothing is); False at the end of the input."""
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            self.ended = True
            return False
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line == b"h":
                self._hurry = True
            elif line:
                self.lines.append(line)
        return True

    def hurried(self) -> bool:
        """Whether the training process has said since the last call that it waits."""
        if select.select([self.fd], [], [], 0)[0]:
            self.read()  # an end of input shows up again in the main loop's read()
        hurry, self._hurry = self._hurry, False
        return hurry


def main(argv: list[str] | None = None) -> int:
    """Entry point of the writer process:
    ``worker.py TRIAL_DIR TRIAL_ID SVD(0|1) SEGMENT_PREFIX SEGMENT_DIR...``."""
    argv = sys.argv[1:] if argv is None else argv
    trial_dir, trial_id, svd = argv[0], argv[1], argv[2] == "1"
    segment_prefix, segment_dirs = argv[3], argv[4:]
    parent = os.getppid()
    # Ctrl-C in the terminal, or a scheduler's SIGTERM, reaches the whole process group:
    # the training process decides what happens (it may still call finalize()); this one
    # writes what it got once that process is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    sys.stdout = sys.stderr
    worker = Worker(Path(trial_dir), trial_id, svd)
    listening = [True]

    def reply(obj: dict) -> None:
        if not listening[0]:
            return
        if obj["op"] == "free" and len(obj) == 2:
            # The one reply of every recorded step, in a form the training process reads
            # without a JSON parse (see WriterClient._receive).
            data = b"f%d\n" % obj["slot"]
        else:
            data = (json.dumps(obj) + "\n").encode()
        try:
            while data:
                data = data[os.write(out_fd, data):]
        except OSError:  # BrokenPipeError: the training process is gone; write on
            listening[0] = False

    source = _Input(0)
    ended = "the training process ended without finalize() (it crashed or was killed)"
    try:
        warm_up()
        courtesy = Courtesy(source.hurried)
        reply({"op": "ready"})
        running = True
        while running:
            if not source.lines:
                # Waiting in select() means the training process's write of a message
                # wakes this process, which costs that write ~25-40 us here instead of
                # ~14 us. Polling the pipe every millisecond instead was measured too and
                # rejected: ~50 us of CPU per poll in this virtual machine, i.e. 4 % of a
                # core taken all the time from a training process that uses every core.
                wait = worker.seconds_to_flush()
                wait = PARENT_CHECK_SECONDS if wait is None else min(wait, PARENT_CHECK_SECONDS)
                ready, _, _ = select.select([0], [], [], wait)
                if not ready:
                    if os.getppid() != parent:
                        # Gone, though children it forked may hold the pipe open: what it
                        # sent before it died is still in the pipe.
                        source.read_rest()
                        listening[0] = False
                        while source.lines and running:
                            running = worker.handle(json.loads(source.lines.popleft()), reply)
                        break
                    worker.tick()
                    worker.report_failure(reply)
                    continue
                if not source.read():  # the end of the input without "close"
                    break
            while source.lines and running:
                line = source.lines.popleft()
                running = worker.handle(json.loads(line), reply, courtesy.start())
        if not running:
            ended = ""  # "close" was handled: everything is written
    except Exception as e:  # noqa: BLE001 - reported, and what was received is written
        worker.fail(e)
        worker.report_failure(reply)
        ended = ""
    if ended:
        worker.end_abnormally(ended)
    # A training process killed between creating a segment and announcing it leaves the
    # file behind; nothing uses the prefix any more.
    for folder in segment_dirs:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.startswith(segment_prefix):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
    return 1 if worker.failed is not None else 0


if __name__ == "__main__":  # pragma: no cover - started by client.py
    sys.exit(main())
