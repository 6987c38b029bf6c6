"""``watch(model, standalone_dir="s3://bucket/prefix")`` (issue 19): a real training
loop watched into the S3 server of conftest.py records what the same loop (same seed)
records into a local folder -- histograms, module graphs, the watch report, the tensors'
statistics and per-module metrics -- the GUI's data layer and the ``comgra`` command
watch prints show it, and a bad location is refused at watch() time, before training."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pytest
import torch
from torch import nn

import comgra_like
from comgra_like.errors import ConfigurationError, StorageError
from comgra_like.format.files import files_for, s3_options
from comgra_like.query import open_group
from tests.s3.test_object_storage import _free_port, _read_steps, _wait
from tests.watch.models import all_hooks

STEPS = 6
METRICS = {"net.0": [["WeightNorm", "linear(2, 0)"], ["OutputGradSndNorm", "linear(2, 1)"]]}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.ReLU(),
                                 nn.Linear(12, 3))

    def forward(self, x):
        return self.net(x)


def _train(standalone_dir: str, trial: str = "run") -> comgra_like.WatchHandle:
    """STEPS steps of SGD on a fixed data stream, watched every second step."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    handle = comgra_like.watch(model, standalone_dir=standalone_dir, trial_id=trial,
                               log_freq=2, sample_n=40, metrics=METRICS)
    with handle:
        for step in range(STEPS):
            x = torch.randn(8, 6, generator=gen)
            y = torch.randint(0, 3, (8,), generator=gen)
            loss = nn.functional.cross_entropy(model(x), y)
            handle.log_loss(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return handle


def _no_time(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c == "wall_time"])


@pytest.fixture(scope="module")
def watched(s3_server, tmp_path_factory):
    """The same loop watched into s3:// and into a local folder; (remote, local, log)."""
    mp = pytest.MonkeyPatch()
    from tests.s3.conftest import use_server

    root = use_server(mp, s3_server)
    local = tmp_path_factory.mktemp("watch") / "watched"
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("comgra_like")
    logger.addHandler(handler)
    try:
        remote = _train(f"{root}/watched")
        _train(str(local))
    finally:
        logger.removeHandler(handler)
    yield root, remote, local, [r.getMessage() for r in records]
    mp.undo()


def test_a_loop_watched_to_s3_reads_back_like_the_same_loop_watched_locally(watched):
    root, handle, local, _ = watched
    assert handle.location == f"{root}/watched"
    assert repr(handle).endswith(f"group '{root}/watched', trial 'run')")
    remote_group, local_group = open_group(f"{root}/watched"), open_group(local)
    assert [(t.trial_id, t.status) for t in remote_group.list_trials()] == [("run", "finished")]
    h = remote_group.read_histograms("run")
    assert sorted(set(h.training_step)) == [0, 2, 4]
    assert {"io", "io_grad", "params", "params_grad"} <= set(h.what)
    pd.testing.assert_frame_equal(h, local_group.read_histograms("run"))
    for step in (0, 2, 4):
        assert remote_group.read_module_graph("run", step) == local_group.read_module_graph(
            "run", step)
    assert remote_group.read_watch_report("run") == local_group.read_watch_report("run")
    pd.testing.assert_frame_equal(_no_time(remote_group.read_statistics("run")),
                                  _no_time(local_group.read_statistics("run")))
    metrics = remote_group.read_metrics("run")
    assert {"WeightNorm", "OutputGradSndNorm", "loss"} <= set(metrics.metric)
    pd.testing.assert_frame_equal(_no_time(metrics), _no_time(local_group.read_metrics("run")))
    # the objects are on the store (compacted at unwatch), nothing under a local "s3:"
    files = files_for(root)
    names = files.list(Path(f"{root}/watched/trials/run"))
    assert {"trial.json", "watch.json", "histograms", "metrics"} <= set(names), names
    assert not Path("s3:").exists()


def test_watch_prints_the_comgra_command_that_opens_the_s3_group(watched):
    root, _, local, messages = watched
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    wanted = f"comgra --path {root}/watched --s3-endpoint {endpoint} --port 8080"
    assert any(m.endswith(wanted) for m in messages), messages
    # a local recording's command has no endpoint
    assert any(m.endswith(f"comgra --path {local} --port 8080") for m in messages), messages


def test_the_gui_data_layer_and_the_printed_command_show_the_watched_trial(watched):
    from comgra_like.app.data import AppData
    from comgra_like.app.module_data import histograms, module_graph_steps, watch_report

    root, _, _, messages = watched
    data = AppData(f"{root}/watched")
    data.refresh()
    assert data.trial_ids() == ["run"]
    assert module_graph_steps(data, "run") == [0, 2, 4]
    assert set(histograms(data, "run", "model.net.0").training_step) == {0, 2, 4}
    assert watch_report(data, "run") is not None
    # the command as watch printed it, run in a shell without the endpoint variable
    command = next(m for m in messages if "comgra --path s3://" in m).split("open it with: ")[1]
    args = shlex.split(command)[1:]
    port = _free_port()
    args[args.index("--port") + 1] = str(port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    gui = subprocess.Popen([sys.executable, "-m", "comgra_like.app.cli", *args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    _read_steps(gui, out)
    try:
        _wait(lambda: any("open http" in line for line in out), "the GUI to start", 60)
        assert any(f"showing {root}/watched" in line for line in out), out
        pages: list[bytes] = []

        def served() -> bool:  # the line comes just before the server listens
            try:
                pages.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/",
                                                    timeout=30).read())
            except OSError:
                return False
            return True

        _wait(served, "the GUI to serve its page", 60)
        assert b"dash" in pages[0].lower()
    finally:
        gui.kill()
        gui.wait()


def _step(model: nn.Module) -> None:
    loss = model(torch.randn(4, 6)).pow(2).mean()
    loss.backward()


def _refused(standalone_dir: str, error: type, match: str) -> None:
    """watch() raises before it hooks anything; the model trains and can be watched."""
    model = Net()
    with pytest.raises(error, match=match):
        comgra_like.watch(model, standalone_dir=standalone_dir, trial_id="t", verbose=False)
    assert all_hooks(model) == []
    _step(model)
    assert model.net[0].weight.grad is not None


def test_a_missing_bucket_is_refused_at_watch_time_naming_the_fix(s3):
    bucket = "no-such-bucket-" + s3.rsplit("/", 1)[1]
    _refused(f"s3://{bucket}/runs", StorageError,
             rf"watch\(standalone_dir='s3://{bucket}/runs'\).*the bucket '{bucket}' of "
             rf"s3://{bucket}/runs/trials/t does not exist on the S3 server http://127\.0\.0\.1"
             rf":\d+: create it first \(e\.g\. `aws s3 mb s3://{bucket}`\)")
    names = pafs.S3FileSystem(**s3_options()).get_file_info(pafs.FileSelector(""))
    assert bucket not in {i.base_name for i in names}  # nothing was made


def test_an_unreachable_endpoint_is_refused_at_watch_time(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _refused(f"{s3}/runs", StorageError,
             r"watch\(standalone_dir='s3://.*'\) cannot record there: cannot reach "
             r"s3://comgra-test .*AWS_ENDPOINT_URL")


def test_a_bucket_without_a_folder_and_a_bad_endpoint_are_configuration_errors(s3, monkeypatch):
    _refused("s3://comgra-test", ConfigurationError, r"names no folder inside a bucket.*"
             r"s3://my-bucket/torchexplorer_standalone")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://127.0.0.1:9000")
    _refused(f"{s3}/runs", ConfigurationError, re.escape(
        "the S3 endpoint 'ftp://127.0.0.1:9000' (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) is "
        "not a URL"))


def test_the_recorder_refuses_a_missing_bucket_before_the_first_step(s3):
    from tests.conftest import TinyRun

    with pytest.raises(StorageError, match="the bucket 'no-such-bucket-r' of s3://"
                                           "no-such-bucket-r/root/g/trials/t does not exist"):
        TinyRun("s3://no-such-bucket-r/root", "g", "t", record_steps=[0])
