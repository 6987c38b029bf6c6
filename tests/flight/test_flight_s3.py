"""The flight recorder's window on object storage (moto's S3 server on loopback, as in
tests/s3): written through the filesystem seam at the trigger, read back by the query
API and the finding."""

from __future__ import annotations

import pytest
import torch

from comgra_like import FlightRecorder
from comgra_like.analysis import find
from comgra_like.query import open_group
from tests.s3.conftest import start_moto, stop_moto, use_server

from .loops import train


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    proc, endpoint = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield endpoint
    finally:
        stop_moto(proc)


def test_window_on_s3(moto, monkeypatch):
    root = use_server(monkeypatch, moto)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fr = FlightRecorder(window=12, after=2)
        _, rec = train(root, "s3run", 40, flight=fr, nan_at=(30, "layer2"))
        rec.finalize()
    finally:
        torch.set_num_threads(threads)
    group = open_group(f"{root}/flight")
    (trigger,) = group.list_flight_triggers("s3run")
    assert (trigger.kind, trigger.step, trigger.node, trigger.window) == (
        "non_finite", 30, "layer2", (19, 30))
    rows = group.read_flight("s3run")
    assert sorted(rows["training_step"].unique()) == list(range(19, 31))
    assert group.read_flight_values("s3run", trigger.name)[(30, "layer2", "value")].shape == (
        16, 24)
    (finding,) = [f for f in find(group, "s3run") if f.kind == "flight_non_finite"]
    assert (finding.node, finding.steps) == ("layer2", (30,))
