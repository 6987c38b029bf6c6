"""The writer process: turns the tensors a training process recorded into parquet shards.

Why a process: on a CPU-only machine the statistics of a recorded step cost several
times the step itself, and a thread in the training process competes with training for
the GIL (measured: a writer *thread* made each recorded step cost as much as if it ran
inline). The training process only copies the recorded tensors into shared memory
(``Slot`` in ``transport/shm.py``) and sends one JSON line per recorded step; this
process reduces them with numpy, builds Arrow tables and writes the shards while
training goes on. It imports no torch.

The messages (``protocol.py``) come one per line on stdin, the replies go to the original
stdout. The first line is the configuration (``Start``: trial folder, trial id, options,
the protocol version, which must be this module's); ``Ready`` answers it once the writer
runs and has written trial.json. The trial folder may be an ``s3://`` location: the
worker then writes through an object store built from this process's environment (the
AWS_* variables it inherited; ``format/files.py``), whole objects under final names. Then: ``Segment`` (map a slot's shared memory), ``Step``
(one recorded step, answered with ``f<slot>`` once its shared memory has been read),
``Kpis``, ``Note``, ``Modules``, ``Graph``, watch()'s and the metrics' messages,
``FlightTrigger`` (named in trial.json), ``Config``, ``Flush`` (answered with
``Flushed``), ``Close`` (write everything, with ``finish`` compact the trial and mark it
finished, answer ``Closed``, exit): ``Worker.handlers`` maps each message type to its
handler (``worker.py``). And the plain line ``h`` (the training process waits
for a free slot from now on: the step being reduced stops giving way to other threads,
``scheduling.py``). This process is the only writer of the trial folder.

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

import os
import select
import signal
import sys
from collections import deque

from .. import protocol
from .scheduling import Courtesy
from .worker import Worker, warm_up

# How often an idle writer checks that its training process is still there.
PARENT_CHECK_SECONDS = 0.5


class _NotStarted(Exception):
    """The trial could not be opened (``Worker.failed`` says why)."""


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
            if line == protocol.HURRY:
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


def main() -> int:
    """Entry point of the writer process; its configuration is the first line of its input
    (``protocol.Start``)."""
    parent = os.getppid()
    # Ctrl-C in the terminal, or a scheduler's SIGTERM, reaches the whole process group:
    # the training process decides what happens (it may still call finalize()); this one
    # writes what it got once that process is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints must not corrupt the replies
    sys.stdout = sys.stderr
    listening = [True]

    def reply(msg: protocol.Message) -> None:
        if not listening[0]:
            return
        data = (msg.encode() + "\n").encode()
        try:
            while data:
                data = data[os.write(out_fd, data):]
        except OSError:  # BrokenPipeError: the training process is gone; write on
            listening[0] = False

    source = _Input(0)
    while not source.lines:
        if not source.read():
            return 1  # the training process went away before it said what to write
    start = protocol.decode(source.lines.popleft())
    if not isinstance(start, protocol.Start) or start.protocol != protocol.PROTOCOL_VERSION:
        theirs = getattr(start, "protocol", None)
        reply(protocol.Failed(
            f"the writer speaks protocol {protocol.PROTOCOL_VERSION}, the training process "
            f"{theirs if theirs is not None else type(start).__name__}: they come from "
            "different installations of comgra_like; reinstall it so that both are the same"))
        return 1
    worker = Worker(start)
    ended = "the training process ended without finalize() (it crashed or was killed)"
    try:
        worker.open_trial()
        if worker.failed is not None:
            raise _NotStarted
        warm_up()
        courtesy = Courtesy(source.hurried)
        reply(protocol.Ready())
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
                            running = worker.handle(protocol.decode(source.lines.popleft()),
                                                    reply)
                        break
                    worker.tick()
                    worker.report_failure(reply)
                    continue
                if not source.read():  # the end of the input without "close"
                    break
            while source.lines and running:
                line = source.lines.popleft()
                running = worker.handle(protocol.decode(line), reply, courtesy.start())
        if not running:
            ended = ""  # "close" was handled: everything is written
    except _NotStarted:  # trial.json could not be written: the reason is all there is
        worker.report_failure(reply)
        ended = ""
    except Exception as e:  # noqa: BLE001 - reported, and what was received is written
        worker.fail(e)
        worker.report_failure(reply)
        ended = ""
    if ended:
        worker.end_abnormally(ended)
    # After a store outage: the steps kept and the mark aborted get their last retries.
    worker.settle()
    # A training process killed between creating a segment and announcing it leaves the
    # file behind; nothing uses the prefix any more.
    for folder in start.segment_dirs:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if start.segment_prefix and name.startswith(start.segment_prefix):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
    return 1 if worker.failed is not None else 0


if __name__ == "__main__":  # pragma: no cover - started by transport/client.py
    sys.exit(main())
