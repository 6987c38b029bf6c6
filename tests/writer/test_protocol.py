"""The recorder->writer protocol: one module encodes and decodes every message, the writer
refuses another version, and per-step computations plug in as processors."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from comgra_like import protocol
from comgra_like.errors import StorageError
from comgra_like.format.schema import KPIS_SCHEMA
from comgra_like.query import open_group
from comgra_like.writer import processors
from comgra_like.writer.step_processor import StepProcessor

from .helpers import new_recorder, record_steps

SPEC = protocol.CaptureSpec("x", "x", "x", "input", 0, "forward", (4, 3), 0, True, True, -1)


@pytest.mark.parametrize("message", [
    protocol.Start(protocol.PROTOCOL_VERSION, "some/trial", "t", True, "prefix-", ["a", "b"],
                   0.5),
    protocol.Segment(1, 2, 4096, path="shm-file"),
    protocol.Step(1, 7, [0, 0], 12, "train", [0, 2], ["", ""], 4, 1.25, [[0, "a" * 64]],
                  [SPEC]),
    protocol.Step(1, 7, [0, 0], 13, "train", [0, 2], ["", ""], 4, 1.5, [[0, "a" * 64]]),
    protocol.Kpis([["g", "loss", "train", 3, 0.5, 1.0]]),
    protocol.Config(0.25),
    protocol.FlightTrigger("loss_spike", 12, "loss", 3.5, [10, 11, 12], {"median": 1.0},
                           2.0, 1),
    protocol.Flush(9),
    protocol.Close(),
    protocol.Ready(),
    protocol.Free(3),
    protocol.Flushed(9, None),
    protocol.Failed("what went wrong"),
    protocol.Closed("what went wrong"),
])
def test_every_message_decodes_to_what_was_encoded(message):
    line = message.encode()
    assert "\n" not in line
    assert protocol.decode(line) == message
    assert protocol.decode(line.encode()) == message


def test_the_step_line_of_cached_parts_is_the_step():
    """What the training process joins from cached parts decodes to the full message."""
    body = protocol.step_body(protocol.layout_part(7, [0, 16], [SPEC]), 12,
                              protocol.samples_part("train", [1], ["cat"]), 4, 0.125,
                              protocol.graphs_part({1: "b" * 64, 0: "a" * 64}))
    step = protocol.decode(protocol.step_line(5, body))
    assert step == protocol.Step(5, 7, [0, 16], 12, "train", [1], ["cat"], 4, 0.125,
                                 [[0, "a" * 64], [1, "b" * 64]], [SPEC])
    assert isinstance(step.layout[0], protocol.CaptureSpec) and step.layout[0].numel == 12


def test_an_unknown_message_is_a_protocol_error():
    with pytest.raises(protocol.ProtocolError, match="not a message of protocol"):
        protocol.decode('{"op": "teleport"}')
    with pytest.raises(protocol.ProtocolError, match="not a message of protocol"):
        protocol.decode('{"op": "flush"}')  # its id is missing


def test_the_writer_process_refuses_another_protocol_version(tmp_path):
    """A real writer process, given the configuration of a newer training process."""
    code = "import sys; from comgra_like.writer.process import main; sys.exit(main())"
    start = protocol.Start(protocol.PROTOCOL_VERSION + 1, str(tmp_path / "t"), "t", False)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          input=(start.encode() + "\n").encode(), timeout=120)
    assert done.returncode == 1
    reply = protocol.decode(done.stdout.strip())
    assert isinstance(reply, protocol.Failed)
    assert (f"speaks protocol {protocol.PROTOCOL_VERSION}, the training process "
            f"{protocol.PROTOCOL_VERSION + 1}") in reply.message
    assert "reinstall" in reply.message
    assert not os.path.exists(tmp_path / "t")  # nothing written


def test_a_recorder_of_another_protocol_version_fails_with_the_writers_reason(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", "process")
    monkeypatch.setattr(protocol, "PROTOCOL_VERSION", protocol.PROTOCOL_VERSION + 1)
    with pytest.raises(StorageError, match="different installations of comgra_like"):
        new_recorder(tmp_path)


class _StepCount(StepProcessor):
    """A processor of the test: one KPI point per step, the sum of the step's first array."""

    def __init__(self, start: protocol.Start):
        self.trial_id = start.trial_id

    def reduce(self, step, pause):
        x = next(a for s, a in zip(step.specs, step.arrays) if s.node == "x")
        return step.message.step, float(x.sum())

    def tables(self, reduced, pause):
        step, total = reduced
        return {"kpis": pa.table({"trial_id": [self.trial_id], "kpi_group": ["test"],
                                  "kpi_name": ["sum_x"], "type_of_execution": ["main"],
                                  "timepoint": [step], "value": [total],
                                  "wall_time": [0.0]}).cast(KPIS_SCHEMA)}


def test_a_processor_added_to_the_list_gets_every_step_and_its_rows_are_written(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", "thread")  # the patched list is this process's
    monkeypatch.setattr(processors, "PROCESSORS", [*processors.PROCESSORS, _StepCount])
    rec, net = new_recorder(tmp_path)
    inputs = record_steps(rec, net, range(3))
    rec.finalize()
    g = open_group(tmp_path / "g")
    points = g.read_kpis("t").query("kpi_name == 'sum_x'")
    assert points["timepoint"].tolist() == [0, 1, 2]
    expected = [float(inputs[s].detach().sum()) for s in range(3)]
    assert points["value"].tolist() == pytest.approx(expected, rel=1e-5)
    # the statistics, the first processor, are there as always
    assert g.read_tensor("t", 2, 0, "x", "x", "forward", "batch_mean").values.shape == (3,)
