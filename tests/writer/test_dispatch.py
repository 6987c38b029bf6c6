"""The writer's dispatch: one handler per message type, every processor hook reached
through PROCESSORS (the per-module metrics among them), a message without a handler
refused with the writer's failure."""

from __future__ import annotations

import json
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from comgra_like import protocol
from comgra_like.format.layout import METRICS
from comgra_like.format.schema import KPIS_SCHEMA
from comgra_like.writer import processors
from comgra_like.writer.metrics import Metrics
from comgra_like.writer.step_processor import StepProcessor
from comgra_like.writer.worker import Worker

# every message the training process sends after Start
SENT = {protocol.Segment, protocol.Step, protocol.Kpis, protocol.Config, protocol.Flush,
        protocol.Close, protocol.Modules, protocol.Note, protocol.Graph, protocol.Watch,
        protocol.WatchStep, protocol.ModuleGraph, protocol.WatchReport, protocol.MetricData,
        protocol.FlightTrigger}


class _Hooks(StepProcessor):
    """Notes the hooks it is called with; metric data become KPI rows."""

    def __init__(self, start: protocol.Start):
        self.trial_id = start.trial_id
        self.calls: list[tuple] = []
        _Hooks.made.append(self)

    made: ClassVar[list[_Hooks]] = []

    def configure(self, msg):
        self.calls.append(("configure", msg.config["bins"]))

    def step_time(self, step, time):
        self.calls.append(("step_time", step, time))

    def metric_data(self, msg):
        self.calls.append(("metric_data", msg.step))
        return {"kpis": pa.table({"trial_id": [self.trial_id], "kpi_group": ["hooks"],
                                  "kpi_name": ["metric_step"], "type_of_execution": ["main"],
                                  "timepoint": [msg.step], "value": [1.0],
                                  "wall_time": [0.0]}).cast(KPIS_SCHEMA)}


def _worker(tmp_path) -> Worker:
    trial = tmp_path / "g/trials/t"
    start = protocol.Start(protocol.PROTOCOL_VERSION, str(trial), "t", False,
                           trial={"status": "running"})
    worker = Worker(start, background_writes=False)
    worker.open_trial()
    return worker


def _rows(folder) -> list[dict]:
    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_every_message_the_training_process_sends_has_a_handler(tmp_path):
    assert set(_worker(tmp_path).handlers) == SENT


def test_every_hook_reaches_the_processors_of_the_list(tmp_path, monkeypatch):
    monkeypatch.setattr(processors, "PROCESSORS", [*processors.PROCESSORS, _Hooks])
    _Hooks.made.clear()
    worker = _worker(tmp_path)
    assert [type(p) for p in worker.processors][-2:] == [Metrics, _Hooks]
    replies: list = []
    for msg in (protocol.Watch({"bins": 7, "log": []}),
                protocol.WatchStep(3, "main", 0, "a" * 64, 1.5),
                protocol.MetricData(4, "main", 2.0, [],
                                    [[4, "lin", "Linear", "user_metric", 0, 0.25, 2.0]]),
                protocol.Flush(1)):
        assert worker.handle(msg, replies.append) is True
    assert worker.failed is None
    [hooks] = _Hooks.made
    assert hooks.calls == [("configure", 7), ("step_time", 3, 1.5), ("metric_data", 4)]
    assert replies == [protocol.Flushed(1, None)]
    trial = tmp_path / "g/trials/t"
    # the per-module metrics are a processor of the list: their row is written
    [metric] = _rows(trial / METRICS)
    assert (metric["training_step"], metric["module"], metric["metric"], metric["value"]) == (
        4, "lin", "user_metric", 0.25)
    kpis = _rows(trial / "kpis")
    assert [(k["kpi_name"], k["timepoint"]) for k in kpis] == [("metric_step", 4)]
    assert worker.handle(protocol.Close(), replies.append) is False
    assert replies[-1] == protocol.Closed(None)


def test_a_message_without_a_handler_fails_the_trial_and_says_so_once(tmp_path):
    worker = _worker(tmp_path)
    replies: list = []
    assert worker.handle(protocol.Ready(), replies.append) is True
    assert replies == [protocol.Failed(worker.failed)]
    assert "does not take Ready messages" in worker.failed
    worker.handle(protocol.Kpis([]), replies.append)
    assert len(replies) == 1
    info = json.loads((tmp_path / "g/trials/t/trial.json").read_text())
    assert info["status"] == "aborted"


def test_a_processor_that_is_no_step_processor_is_refused(tmp_path, monkeypatch):
    class Plain:
        def __init__(self, start):
            pass

    monkeypatch.setattr(processors, "PROCESSORS", [*processors.PROCESSORS, Plain])
    with pytest.raises(protocol.ProtocolError, match="Plain is no subclass"):
        _worker(tmp_path)
