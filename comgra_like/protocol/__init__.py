"""The messages between a training process and its writer, defined once, with a version.

The training process imports this module alone (no torch, numpy or pyarrow here, and
nothing else of the writer), so both sides encode and decode with the same code.

Wire format: one JSON object per line, ``{"op": <the message's OP>, <its fields>}``, in
both directions (the pipe of the process transport). The thread transport hands the
message objects over as they are. No pickle anywhere. Two exceptions, for speed:

* ``h`` (training -> writer, :data:`HURRY`): the training process waits for a free slot
  from now on; the step being reduced stops giving way (``writer/scheduling.py``).
* ``f<slot>`` (writer -> training, :func:`free_line`): the slot's shared memory has been
  read; the one reply of every recorded step, read without a JSON parse.

A recorded step (:class:`Step`) is the one message of the hot path: the training process
keeps the parts that repeat from step to step encoded (:func:`layout_part`,
:func:`samples_part`) and joins them with the numbers of the step (:func:`step_body`,
:func:`step_line`); the writer decodes it into a :class:`Step`.

Bump :data:`PROTOCOL_VERSION` whenever a message changes; the writer refuses to start
when the training process speaks another version (:class:`Start`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

PROTOCOL_VERSION = 3

HURRY = b"h"
_COMPACT = (",", ":")


class ProtocolError(ValueError):
    """A message of another shape than this module defines (a bug, or another version)."""


class CaptureSpec(NamedTuple):
    """One captured tensor of a step, as the training process describes it.

    A tuple (so the training process hashes a step's layout quickly) sent as a JSON list
    in this field order.
    """

    tensor_name: str
    node: str
    role: str
    kind: str
    iteration: int
    recording_type: str  # vocabulary: forward, update, gradient:<loss group>
    shape: tuple[int, ...]
    batch_dim: int | None  # None: no batch dimension (one row, no aggregations)
    per_sample: bool  # rows per recorded sample
    with_values: bool  # per-neuron values stored
    param_index: int  # index of the parameter (svd, update ratio), -1 for others

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @classmethod
    def decode(cls, x: list) -> CaptureSpec:
        return cls(x[0], x[1], x[2], x[3], int(x[4]), x[5], tuple(int(s) for s in x[6]),
                   None if x[7] is None else int(x[7]), bool(x[8]), bool(x[9]), int(x[10]))


# ----- training process -> writer -----------------------------------------------------


@dataclass
class Message:
    """Base of every message: ``OP`` names it on the wire."""

    OP: ClassVar[str] = ""

    def encode(self) -> str:
        """The message as one line of JSON (without the newline)."""
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps({"op": self.OP, **body}, separators=_COMPACT)

    @classmethod
    def from_json(cls, obj: dict) -> Message:
        return cls(**{f.name: obj[f.name] for f in fields(cls)})


@dataclass
class Start(Message):
    """The writer's configuration: the first message, answered with :class:`Ready` once
    the writer runs and has written ``trial`` (trial.json, status running) if given."""

    OP: ClassVar[str] = "start"
    protocol: int  # PROTOCOL_VERSION of the training process
    trial_dir: str
    trial_id: str
    calculate_svd: bool
    segment_prefix: str = ""  # shared-memory files of this prefix are the writer's to delete
    segment_dirs: list[str] = field(default_factory=list)
    flush_seconds: float = 1.0
    trial: dict | None = None  # the trial's trial.json
    # The torch.distributed rank this writer records (its shard names and rank column),
    # and whether it is the lead (the lowest recording rank), which alone writes the
    # files every rank has alike: trial.json, modules.json, watch.json.
    rank: int = 0
    lead: bool = True


@dataclass
class Segment(Message):
    """Map a shared-memory segment of a slot: a file (``path``, which the writer unlinks
    once mapped) or, in the thread transport, the ``buffer`` object itself."""

    OP: ClassVar[str] = "segment"
    slot: int
    index: int
    nelems: int
    path: str | None = None
    buffer: Any = None  # thread transport only; never encoded

    def encode(self) -> str:
        return json.dumps({"op": self.OP, "slot": self.slot, "index": self.index,
                           "nelems": self.nelems, "path": self.path}, separators=_COMPACT)

    @classmethod
    def from_json(cls, obj: dict) -> Segment:
        return cls(obj["slot"], obj["index"], obj["nelems"], obj.get("path"))


@dataclass(slots=True)
class Step(Message):
    """One recorded step: its tensors are in shared memory (``slot``), at ``refs``
    (segment, offset per capture of the layout). The writer frees the slot with ``f<slot>``
    once it has read them.

    ``layout`` comes with the first step of a layout id only (the writer keeps it);
    ``graphs`` is ``[[iteration, graph hash], ...]``.
    """

    OP: ClassVar[str] = "batch"
    slot: int
    layout_id: int
    refs: list[int]
    step: int
    toe: str  # type of execution
    samples: list[int]
    categories: list[str]
    batch_size: int
    wall: float
    graphs: list
    layout: list[CaptureSpec] | None = None

    def encode(self) -> str:
        body = step_body(layout_part(self.layout_id, self.refs, self.layout), self.step,
                         samples_part(self.toe, self.samples, self.categories),
                         self.batch_size, self.wall, graphs_part(dict(self.graphs)))
        return step_line(self.slot, body)

    @classmethod
    def from_json(cls, obj: dict) -> Step:
        layout = obj.get("layout")
        return cls(obj["slot"], obj["layout_id"], obj["refs"], obj["step"], obj["toe"],
                   obj["samples"], obj["categories"], obj["batch_size"], obj["wall"],
                   obj["graphs"],
                   None if layout is None else [CaptureSpec.decode(x) for x in layout])


def layout_part(layout_id: int, refs: list[int], layout: list | None = None) -> str:
    """The encoded layout fields of a :class:`Step` (``layout`` only when new)."""
    part = f'"layout_id":{layout_id},"refs":{json.dumps(refs, separators=_COMPACT)}'
    if layout is not None:
        part += ',"layout":' + json.dumps(layout, separators=_COMPACT)
    return part


def samples_part(toe: str, samples: list[int], categories: list[str]) -> str:
    """The encoded type of execution and samples of a :class:`Step`."""
    return (f'"toe":{json.dumps(toe)},"samples":{json.dumps(samples)},'
            f'"categories":{json.dumps(categories)}')


def graphs_part(graphs: dict[int, str]) -> str:
    """The encoded ``graphs`` list of a :class:`Step`, from {iteration: graph hash}."""
    return ",".join([f'[{i},"{h}"]' for i, h in sorted(graphs.items())])


def step_body(layout: str, step: int, samples: str, batch_size: int, wall: float,
              graphs: str) -> str:
    """A :class:`Step` without its slot, from its encoded parts."""
    return (f'{layout},"step":{step},{samples},'
            f'"batch_size":{batch_size},"wall":{wall!r},"graphs":[{graphs}]')


def step_line(slot: int, body: str) -> str:
    """The line of a :class:`Step` sent in ``slot``."""
    return f'{{"op":"batch","slot":{slot},{body}}}'


@dataclass
class Kpis(Message):
    """Points of KPI curves: ``[kpi_group, kpi_name, type_of_execution, timepoint, value,
    wall_time]`` each (value None for NaN, which JSON cannot carry)."""

    OP: ClassVar[str] = "kpis"
    rows: list


@dataclass
class Config(Message):
    """A changed option (for now the seconds after which buffered rows are written)."""

    OP: ClassVar[str] = "config"
    flush_seconds: float


@dataclass
class Flush(Message):
    """Write everything received; answered with :class:`Flushed` of the same ``id``."""

    OP: ClassVar[str] = "flush"
    id: int


@dataclass
class Close(Message):
    """Write everything and exit; answered with :class:`Closed`. ``finish``: the recording
    is complete (``finalize()``): compact the trial, then set its status to finished."""

    OP: ClassVar[str] = "close"
    finish: bool = False


@dataclass
class Modules(Message):
    """The module and parameter tree (modules.json), all of it each time it grows."""

    OP: ClassVar[str] = "modules"
    modules: list


@dataclass
class Note(Message):
    """A note for the Notes page (a row of the notes table)."""

    OP: ClassVar[str] = "note"
    text: str
    wall_time: float
    training_step: int | None


@dataclass
class Graph(Message):
    """A dependency-graph structure seen for the first time, named by ``digest``
    (``format.graphs.canonical_hash``); the writer stores it once."""

    OP: ClassVar[str] = "graph"
    digest: str
    structure: dict


@dataclass
class Watch(Message):
    """What ``comgra_like.watch`` records histograms of, and how (the histogram
    processor's configuration; sent again when it grows): ``bins``, ``sample_n``,
    ``reject_outlier_proportion``, ``log`` (io, io_grad, params, params_grad),
    ``io_nodes`` (watched module names: their ``input *`` / ``output *`` roles),
    ``no_io_grad`` (modules of ``ignore_io_grad_classes``), ``params`` ({parameter full name: [module name, parameter name]}), ``seed``."""

    OP: ClassVar[str] = "watch"
    config: dict


@dataclass
class WatchStep(Message):
    """A recorded step x iteration of a watched module: its module graph (by ``digest``,
    sent before as :class:`ModuleGraph`) and the ``time_log`` value of the step."""

    OP: ClassVar[str] = "watch_step"
    step: int
    toe: str
    iteration: int
    digest: str
    time: float


@dataclass
class ModuleGraph(Message):
    """A module-graph structure seen for the first time (``module_graphs/<digest>.json``)."""

    OP: ClassVar[str] = "module_graph"
    digest: str
    structure: dict


@dataclass
class WatchReport(Message):
    """The watch report (watch.json), whole, each time it changes."""

    OP: ClassVar[str] = "watch_report"
    report: dict


@dataclass
class MetricData(Message):
    """What the per-module metrics (``comgra_like.metrics``) of one step need, sent on the
    steps their schedules name (independent of recorded steps): ``modules`` is
    ``[[module, module_class, [built-in metric names], {need: array}], ...]`` with an
    array as ``[dtype, shape, data]`` (``data`` bytes, base64 on the wire) and
    ``output_grad`` a list of arrays, one per backward pass; ``values`` are numbers the
    training process computed (user metrics, the loss), each with its own step: ``[step,
    module, module_class, metric, backward_pass, value, wall time]`` (value None for NaN).
    ``step`` is -1 in a message of ``values`` only.

    With ``path`` (the process transport) the arrays' bytes are in that shared-memory
    file (in a segment folder, named with the segment prefix) and ``data`` is their
    offset; the writer reads the file once and unlinks it. Megabytes of arrays as JSON
    text cost the training thread ~30 ms per megabyte; the file costs a copy."""

    OP: ClassVar[str] = "metrics"
    step: int
    toe: str
    time: float
    modules: list
    values: list
    path: str | None = None

    def encode(self) -> str:
        body = {"op": self.OP, "step": self.step, "toe": self.toe, "time": self.time,
                "modules": self.modules, "values": self.values, "path": self.path}
        return json.dumps(body, separators=_COMPACT, default=_base64)

    @classmethod
    def from_json(cls, obj: dict) -> MetricData:
        return cls(obj["step"], obj["toe"], obj["time"], obj["modules"], obj["values"],
                   obj.get("path"))


@dataclass
class FlightTrigger(Message):
    """The flight recorder fired: the writer names it in trial.json (``flight_triggers``,
    ``format/trial.py``). ``kind`` (non_finite, loss_spike, ...), the ``training_step``
    it fired at, the ``tensor`` it names (None: none), the ``value`` that fired it (None:
    none; NaN and infinities as JSON's NaN/Infinity on the wire), ``window_steps`` (the
    training steps of the window written for it), ``detail`` (free-form JSON values),
    ``wall_time``, and the ``rank`` it fired on."""

    OP: ClassVar[str] = "flight_trigger"
    kind: str
    training_step: int
    tensor: str | None
    value: float | None
    window_steps: list[int]
    detail: dict
    wall_time: float
    rank: int = 0


def _base64(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} cannot be sent to the writer")


# ----- writer -> training process -----------------------------------------------------


@dataclass
class Ready(Message):
    """The writer runs (after :class:`Start`)."""

    OP: ClassVar[str] = "ready"


@dataclass
class Free(Message):
    """A slot's shared memory has been read (sent as :func:`free_line`)."""

    OP: ClassVar[str] = "free"
    slot: int

    def encode(self) -> str:
        return free_line(self.slot).decode()


def free_line(slot: int) -> bytes:
    return b"f%d" % slot


@dataclass
class Flushed(Message):
    OP: ClassVar[str] = "flushed"
    id: int
    error: str | None = None


@dataclass
class Failed(Message):
    """The writer failed (sent once): ``message`` says what and what became of the data."""

    OP: ClassVar[str] = "error"
    message: str


@dataclass
class Closed(Message):
    OP: ClassVar[str] = "closed"
    error: str | None = None


_MESSAGES: dict[str, type[Message]] = {
    m.OP: m for m in (Start, Segment, Step, Kpis, Config, Flush, Close, Modules, Note, Graph,
                      Watch, WatchStep, ModuleGraph, WatchReport, MetricData, FlightTrigger,
                      Ready, Free,
                      Flushed, Failed, Closed)
}


def decode(line: bytes | str) -> Message:
    """The message of one line (JSON, or the ``f<slot>`` reply)."""
    if line[:1] in (b"f", "f"):
        return Free(int(line[1:]))
    obj = json.loads(line)
    try:
        kind = _MESSAGES[obj["op"]]
        return kind.from_json(obj)
    except (KeyError, TypeError) as e:
        raise ProtocolError(f"not a message of protocol {PROTOCOL_VERSION}: {line[:200]!r} "
                            f"({type(e).__name__}: {e})") from None
