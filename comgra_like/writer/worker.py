"""The writer's message handling, the same for both transports (a process of its own, or a
thread of the training process): one ``Worker`` per recorded trial.

It reduces each recorded step (``statistics.py``), buffers the rows and writes them as
shards (``shards.py``); after a failure it writes what it had received, marks the trial
``aborted`` and reports the failure once. The messages are ``protocol.py``'s.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import protocol
from ..format.files import Files, files_for
from ..format.graphs import is_graph_digest
from ..format.layout import KPIS, MODULE_STEPS, NOTES_DIR, STEPS, TrialLayout
from ..format.notes import NOTES_SCHEMA
from ..format.schema import KPIS_SCHEMA, MODULE_STEPS_SCHEMA, STEPS_SCHEMA
from ..format.trial import mark_trial_aborted
from ..protocol import CaptureSpec, Start
from ..vocabulary import FINISHED, FORWARD, INPUT, PARAMETER, RUNNING, UPDATE
from .compaction import compact_trial
from .flight_triggers import FlightTriggers
from .processors import make_processors
from .shards import ShardBuffer
from .statistics import clear_plan_cache
from .step_processor import StepInput
from .uploads import RETRY_SECONDS_ENV, StoreOutage, Uploader

#: A message's handler: (message, reply, pause) -> None, or what ``Worker.handle`` returns
Handler = Callable[[Any, Callable[[protocol.Message], None], Callable[[], None]], "bool | None"]

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


def _meaning(e: BaseException, files: Files | None = None) -> str:
    """What an exception of the writer means for the user, and what to do."""
    if isinstance(e, StoreOutage):
        return ("the object store, or the network to it, was down for longer than the writer "
                f"waits: check the store, or allow a longer outage with {RETRY_SECONDS_ENV}")
    if files is not None and files.remote and isinstance(e, (OSError, pa.ArrowException)):
        return ("the object store refused the write: check the bucket, its permissions and "
                "the AWS_* environment variables")
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
    """Handles the messages of one trial's training process (used by both transports).

    Every file of the trial is written here, through ``files`` (the filesystem seam):
    trial.json, modules.json, graphs, the shards of every table, compaction.
    """

    def __init__(self, start: Start, background_writes: bool = True,
                 files: Files | None = None):
        self.trial_id = start.trial_id
        self.trial_dir = Path(start.trial_dir)
        self.trial = TrialLayout(self.trial_dir)
        # an s3:// trial folder gets its object store (from the environment), else the disk
        self.files = files = files or files_for(start.trial_dir)
        self._trial_json = start.trial
        self._graphs_written: set[str] = set()
        # The rank's own shard names; the lead alone writes the files every rank has
        # alike (docs/FORMAT.md, "Recording ranks").
        self.rank = start.rank
        self.lead = start.lead
        # Every later write goes through this queue, in order, retried while an object
        # store is away (uploads.py).
        self.uploads = Uploader(files, files.display(self.trial_dir),
                                background=background_writes)
        self.shards = ShardBuffer(self.trial_dir, background=background_writes,
                                  flush_seconds=start.flush_seconds, files=files,
                                  rank=start.rank, uploads=self.uploads)
        self._salvaging = False  # after a store outage: uploads.salvage() runs
        # the computations: tensor statistics, histograms, per-module metrics, ...
        self.processors = make_processors(start)
        # the flight recorder's triggers, named in trial.json
        self.flight_triggers = FlightTriggers(self.trial_dir, self._trial_json, files,
                                              self.uploads.submit, rank=start.rank)
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
        # watch()'s module-graph rows, one per watched forward: buffered like the steps
        # rows (a one-row Arrow table per message cost ~2 ms)
        self._module_step_rows: dict[str, list] = {
            name: [] for name in _MODULE_STEPS_PLAIN.names}
        #: the handler of each message type (``handle``)
        self.handlers: dict[type, Handler] = self._handlers()

    def open_trial(self) -> None:
        """Write trial.json (status running) before the first message is handled; on
        failure ``failed`` says why (the training process raises it at once)."""
        if self._trial_json is not None:
            self._guard(lambda: self.files.write_json(self.trial.trial_json, self._trial_json))

    # ----- segments -----------------------------------------------------------------

    def add_segment(self, slot: int, index: int, buffer, nelems: int) -> None:
        self.segments[(slot, index)] = np.frombuffer(buffer, np.float32, count=nelems)
        # A slot's segments are only ever appended, so (slot, refs) names the memory of a
        # step plan; a slot that grew moves its steps to new refs, and the old plans
        # (views and update buffers) would only hold memory.
        clear_plan_cache()

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

    def handle(self, msg: protocol.Message, reply: Callable[[protocol.Message], None],
               pause: Callable[[], None] | None = None) -> bool:
        """Handle one message; ``reply`` answers. False: the worker should exit.

        ``pause`` is called between units of a recorded step's work (see
        ``scheduling.Courtesy``). The handler of each message type is in
        :attr:`handlers`; a type without one is refused (the trial fails).
        """
        handler = self.handlers.get(type(msg))
        if handler is None:
            self._guard(lambda: _refuse(msg))
        else:
            done = handler(msg, reply, pause or _no_pause)
            if done is not None:  # answered: nothing else is due
                return done
        if self.failed is None and self.shards.must_flush():
            self._guard(self._write)
        self.report_failure(reply)
        return True

    def _handlers(self) -> dict[type, Handler]:
        """The handler of each message type the training process sends. A handler returns
        None (then a write that is due runs and a failure is reported) or what ``handle``
        returns at once (Close and Flush, which answer themselves)."""
        return {
            protocol.Step: self._on_step,
            protocol.Close: self._on_close,
            protocol.Flush: self._on_flush,
            protocol.Segment: self._on_segment,
            protocol.Kpis: lambda msg, reply, pause: self._guard(lambda: self._kpis(msg.rows)),
            protocol.Graph: lambda msg, reply, pause: self._guard(
                lambda: self._graph(msg.digest, msg.structure)),
            protocol.ModuleGraph: lambda msg, reply, pause: self._guard(
                lambda: self._graph(msg.digest, msg.structure, module=True)),
            protocol.Note: lambda msg, reply, pause: self._guard(lambda: self._note(msg)),
            protocol.Modules: lambda msg, reply, pause: self._lead_json(
                self.trial.modules_json, {"modules": msg.modules}),
            protocol.WatchReport: lambda msg, reply, pause: self._lead_json(
                self.trial.watch_json, msg.report),
            protocol.Watch: self._on_watch,
            protocol.WatchStep: lambda msg, reply, pause: self._guard(
                lambda: self._watch_step(msg)),
            protocol.MetricData: self._on_metric_data,
            protocol.FlightTrigger: lambda msg, reply, pause: self._guard(
                lambda: self.flight_triggers.add(msg)),
            protocol.Config: self._on_config,
        }

    def _on_step(self, msg: protocol.Step, reply, pause) -> None:
        freed = []

        def release():
            if not freed:
                freed.append(True)
                reply(protocol.Free(msg.slot))

        self._guard(lambda: self._step(msg, release, pause))
        release()

    def _on_close(self, msg: protocol.Close, reply, pause) -> bool:
        self._guard(self._write_and_wait)
        if msg.finish:
            self._guard(self._finish)
        self.settle()
        reply(protocol.Closed(self.failed))
        return False

    def _on_flush(self, msg: protocol.Flush, reply, pause) -> bool:
        self._guard(self._write_and_wait)
        reply(protocol.Flushed(msg.id, self.failed))
        return True

    def _on_segment(self, msg: protocol.Segment, reply, pause) -> None:
        if msg.buffer is not None:
            self.add_segment(msg.slot, msg.index, msg.buffer, msg.nelems)
        else:
            self._guard(lambda: self.map_segment(msg.slot, msg.index, msg.path, msg.nelems))

    def _lead_json(self, path: Path, obj) -> None:
        """A file every rank has alike: the lead alone writes it."""
        if self.lead:
            self._guard(lambda: self._write_json(path, obj))

    def _on_watch(self, msg: protocol.Watch, reply, pause) -> None:
        for p in self.processors:
            self._guard(lambda p=p: p.configure(msg))

    def _on_metric_data(self, msg: protocol.MetricData, reply, pause) -> None:
        for p in self.processors:
            self._guard(lambda p=p: self.shards.add(p.metric_data(msg), presorted=p.presorted))

    def _on_config(self, msg: protocol.Config, reply, pause) -> None:
        self.shards.flush_seconds = float(msg.flush_seconds)

    def report_failure(self, reply) -> None:
        """Send the failure, once, if there is one."""
        if self.failed is not None and not self._reported:
            self._reported = True
            reply(protocol.Failed(self.failed))

    def _buffer_step_rows(self) -> None:
        rows = self._step_rows
        if rows["training_step"]:
            self._step_rows = {name: [] for name in STEPS_SCHEMA.names}
            self.shards.add({STEPS: pa.table(rows).cast(STEPS_SCHEMA)})
        module_rows = self._module_step_rows
        if module_rows["training_step"]:
            self._module_step_rows = {name: [] for name in _MODULE_STEPS_PLAIN.names}
            self.shards.add({MODULE_STEPS: pa.table(module_rows, schema=_MODULE_STEPS_PLAIN)
                             .cast(MODULE_STEPS_SCHEMA)})

    def _write(self) -> None:
        """Hand everything buffered to the shard writer, the steps rows as one table."""
        self._buffer_step_rows()
        self.shards.write()

    def _write_and_wait(self) -> None:
        self._write()
        self.shards.wait()

    def tick(self) -> None:
        """Called when ``seconds_to_flush`` has passed without a message (and at least
        every half second): a write that failed in the background is reported now, not
        at the next step."""
        self._guard(self.uploads.raise_error)
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
        if not isinstance(e, StoreOutage):  # its message says all there is
            traceback.print_exception(e, file=sys.stderr)
        self.failed = f"{type(e).__name__}: {e} ({_meaning(e, self.files)})"
        if isinstance(e, StoreOutage):
            self.failed += "; " + self._salvage_later()
            return
        kept = self._salvage(e)
        self.failed += "; " + kept
        self.end_abnormally(f"the writer failed: {self.failed}")

    def _salvage_later(self) -> str:
        """After a store outage: what was received and the mark ``aborted`` wait for the
        store for another retry period, in the background; says so."""
        self._trim_step_rows()
        self._buffer_step_rows()
        tasks, nbytes = self.shards.take_tasks()
        steps = self._steps_received
        if self.lead:
            reason = f"the writer failed: {self.failed}"
            tasks.append((lambda: self._mark_aborted(reason),
                          f"marking {self.files.display(self.trial.trial_json)} aborted"))
        self._salvaging = True
        self.uploads.salvage(tasks, nbytes)
        seconds = self.uploads.retry_seconds
        if self.uploads.salvage_result is None:  # without a thread it is done already
            return ("the store answered again: every recorded step received is written "
                    f"({steps} in all) and the trial is marked aborted")
        return (f"the trial is still marked running on the store: the writer keeps the "
                f"recorded steps not written yet ({steps} received in all) and tries for "
                f"another {seconds:g} s to write them and to mark the trial aborted; when "
                "the recorder is closed or this process ends it says whether that worked")

    def _mark_aborted(self, reason: str) -> None:
        """The mark ``aborted``, raising if the store cannot be reached (to be retried)."""
        self.files.read_json(self.trial.trial_json)  # raises while the store is away
        mark_trial_aborted(self.trial_dir, reason, self.files)
        info = self.files.read_json(self.trial.trial_json)
        if isinstance(info, dict) and info.get("status") == RUNNING:
            raise OSError(f"{self.files.display(self.trial.trial_json)} is still running")

    def settle(self) -> str | None:
        """After a store outage: wait for the salvage's end (bounded by its retry time)
        and add its outcome to ``failed``; returns the outcome (None: none runs)."""
        if not self._salvaging:
            return None
        self._salvaging = False
        result = self.uploads.settle()
        where = self.files.display(self.trial.trial_json)
        if result is None:
            outcome = (f"afterwards the store answered again: the steps kept were written "
                       f"and {where} is marked aborted")
        else:
            detail = result if isinstance(result, BaseException) else "it did not end"
            outcome = (f"afterwards the store could not be reached either: {where} could "
                       f"NOT be marked aborted, it still says running, and the recorded "
                       f"steps kept since the last shard are lost ({detail})")
        self.failed = f"{self.failed}; {outcome}"
        print(f"comgra_like: {outcome}", file=sys.stderr, flush=True)
        return outcome

    def _trim_step_rows(self) -> None:
        rows = self._step_rows
        # A step that failed half-way through its rows leaves columns of unequal length.
        n = min(len(column) for column in rows.values())
        for column in rows.values():
            del column[n:]

    def _salvage(self, failure: BaseException) -> str:
        """Write everything buffered after ``failure``; says what became of it."""
        self._trim_step_rows()
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
        if self._salvaging:  # the mark waits for the store with what was received
            return
        if self.lead:  # another rank's end is seen in its own files, not in trial.json
            mark_trial_aborted(self.trial_dir, reason, self.files)

    def _step(self, msg: protocol.Step, release, pause) -> None:
        self._steps_received += 1
        if msg.layout is not None:
            self.layouts[msg.layout_id] = msg.layout
            self.layout_keys[msg.layout_id] = object()  # stands for this layout in caches
        specs = self.layouts[msg.layout_id]
        refs = msg.refs
        slot = msg.slot
        arrays = []
        for i, s in enumerate(specs):
            seg, off = refs[2 * i], refs[2 * i + 1]
            arrays.append(self.segments[(slot, seg)][off:off + s.numel])
        step = StepInput(self.trial_id, msg, specs, arrays, self.layout_keys[msg.layout_id],
                         (slot, tuple(refs)))
        reduced = [p.reduce(step, pause) for p in self.processors]
        del arrays, step
        release()
        tables = [p.tables(r, pause) for p, r in zip(self.processors, reduced)]
        del reduced
        rows = self._step_rows
        samples = msg.samples
        for iteration, graph_hash in msg.graphs:
            rows["trial_id"].append(self.trial_id)
            rows["training_step"].append(msg.step)
            rows["type_of_execution"].append(msg.toe)
            rows["iteration"].append(int(iteration))
            rows["graph_hash"].append(graph_hash)
            rows["batch_size"].append(msg.batch_size)
            rows["sample_indices"].append(samples)
            rows["sample_categories"].append(msg.categories)
            rows["wall_time"].append(msg.wall)
        # Steps strictly increase (the recorder checks it) and each step's tensor rows
        # come sorted: the tensor shard needs no sort.
        added = False
        for p, t in zip(self.processors, tables):
            self.shards.add(t, presorted=p.presorted)
            added = added or any(x is not None and x.num_rows for x in t.values())
        if not added:  # nothing else starts the clock of the next shard
            self._buffer_step_rows()

    def _graph(self, digest: str, structure: dict, module: bool = False) -> None:
        """Written at once, so before any step row that names it is on disk; once per
        name (the name is a hash of the content). ``module``: a watch() module graph."""
        key = ("module:" if module else "") + digest
        if key in self._graphs_written:
            return
        if not is_graph_digest(digest):
            raise protocol.ProtocolError(f"{digest[:80]!r} is no graph name (64 hex digits)")
        path = self.trial.module_graph(digest) if module else self.trial.graph(digest)
        files = self.files

        def write() -> None:
            if not files.exists(path):
                files.write_json(path, structure)

        # queued before any shard of a step that names it
        self.uploads.submit([(write, f"writing {files.display(path)}")])
        self._graphs_written.add(key)

    def _write_json(self, path: Path, obj) -> None:
        """A JSON file written in order with the shards (retried while a store is away)."""
        self.uploads.submit([(lambda: self.files.write_json(path, obj),
                              f"writing {self.files.display(path)}")])

    def _watch_step(self, msg: protocol.WatchStep) -> None:
        """A module-graph row of a watched step; the step's time for its histograms."""
        for p in self.processors:
            p.step_time(msg.step, msg.time)
        rows = self._module_step_rows
        for name, value in (("trial_id", self.trial_id), ("training_step", int(msg.step)),
                            ("type_of_execution", msg.toe), ("iteration", int(msg.iteration)),
                            ("graph_hash", msg.digest)):
            rows[name].append(value)
        if self.shards.seconds_to_flush() is None:  # nothing else starts the shard clock
            self._buffer_step_rows()

    def _note(self, note: protocol.Note) -> None:
        table = pa.table({"trial_id": [self.trial_id], "text": [note.text],
                          "wall_time": [note.wall_time],
                          "training_step": [note.training_step]}, schema=_NOTES_PLAIN)
        # in the order taken: appended after every note before it
        self.shards.add({NOTES_DIR: table.cast(NOTES_SCHEMA)}, presorted=(NOTES_DIR,))

    def _finish(self) -> None:
        """The recording is complete: compact it, then mark it finished."""
        files, where = self.files, self.files.display(self.trial_dir)
        tasks = []
        if files.remote:  # compaction takes a store it cannot list for an empty trial
            tasks.append((lambda: files.list_folders(self.trial_dir), f"listing {where}"))
        tasks.append((lambda: compact_trial(self.trial_dir, files, ranks=[self.rank]),
                      f"compacting {where}"))
        if self._trial_json is not None:
            finished = {**self._trial_json, "status": FINISHED}
            tasks.append((lambda: files.write_json(self.trial.trial_json, finished),
                          f"marking {files.display(self.trial.trial_json)} finished"))
        self.uploads.submit(tasks)
        self.uploads.wait()

    def _kpis(self, rows: list) -> None:
        if not rows:
            return
        g, n, t, tp, v, w = zip(*rows)
        table = pa.table(
            {"trial_id": [self.trial_id] * len(rows), "kpi_group": list(g), "kpi_name": list(n),
             "type_of_execution": list(t), "timepoint": list(tp),
             "value": [float("nan") if x is None else x for x in v], "wall_time": list(w)}
        ).cast(KPIS_SCHEMA)
        self.shards.add({KPIS: table})


def warm_up() -> None:
    """Run one tiny step through every stage in a throwaway folder.

    The first use of pyarrow's conversions imports more modules (pandas among them) and
    took ~0.15 s; done here, before the writer reports ready, no recorded step of the
    training loop waits for it.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="comgra_like-warm-up-") as tmp:
        worker = Worker(protocol.Start(protocol.PROTOCOL_VERSION, tmp, "warm-up", True),
                        background_writes=False)
        buffer = bytearray(4 * 64)
        spec = protocol.CaptureSpec
        layout = [spec("x", "x", "x", INPUT, 0, FORWARD, (2, 3), 0, True, True, -1),
                  spec("w", "w", "w", PARAMETER, -1, FORWARD, (2, 2), None, False, False, 0),
                  spec("w", "w", "w", PARAMETER, -1, UPDATE, (2, 2), None, False, False, 0)]
        replies: list = []
        for msg in (
            protocol.Segment(0, 0, 64, buffer=buffer),
            protocol.Step(0, 0, [0, 0, 0, 16, 0, 32], 0, "warm_up", [0], [""], 2, 0.0,
                          [[0, "0" * 64]], layout),
            protocol.Kpis([["g", "k", "warm_up", 0, 1.0, 0.0]]),
            protocol.Flush(1),
        ):
            worker.handle(msg, replies.append)
        if worker.failed is not None:
            raise RuntimeError(f"the writer's self-test failed: {worker.failed}")


# The notes table with plain strings, cast to the dictionary-encoded schema once made.
_NOTES_PLAIN = pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                          for f in NOTES_SCHEMA])


_MODULE_STEPS_PLAIN = pa.schema([
    (f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
    for f in MODULE_STEPS_SCHEMA])


def _refuse(msg: protocol.Message) -> None:
    raise protocol.ProtocolError(f"the writer does not take {type(msg).__name__} messages here")


def _no_pause() -> None:
    pass
