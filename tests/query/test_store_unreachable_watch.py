"""The watch() and metrics tables while the store cannot be read now (issue 28's rule
for the readers): a refresh whose listing of a trial's histograms, module-steps or
metrics folder fails keeps the shards it knew, so the Modules and Metrics pages do not
go empty for a refresh; the folder is reported once as "could not be read now" and the
report ends when it lists again. Before, the failed listing read as "no shards": every
histogram and metric of the trial disappeared until the next refresh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import comgra_like.query.index as index_module
import comgra_like.query.metrics as metrics_module
import comgra_like.query.tensors as tensors_module
import comgra_like.query.watch as watch_module
from comgra_like import watch
from comgra_like.format.files import StoreUnreachable
from comgra_like.format.layout import HISTOGRAMS, METRICS, MODULE_STEPS, TrialLayout
from comgra_like.query import open_group

from .flaky import ALWAYS, FlakyFiles

FOLDERS = (HISTOGRAMS, MODULE_STEPS, METRICS)


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> Path:
    """A real watched training loop with per-module metrics: its group folder."""
    root = tmp_path_factory.mktemp("watched")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    handle = watch(net, log_freq=2, standalone_dir=str(root / "g"), trial_id="t",
                   verbose=False, metrics={"0": ["InputSndNorm"], "2": ["InputSndNorm"]})
    for _ in range(6):
        opt.zero_grad()
        net(torch.randn(4, 6)).pow(2).mean().backward()
        opt.step()
    handle.unwatch()
    return root / "g"


@pytest.fixture
def flaky(monkeypatch) -> FlakyFiles:
    files = FlakyFiles()
    for module in (index_module, tensors_module, watch_module, metrics_module):
        monkeypatch.setattr(module, "files_for", lambda path: files)
    return files


def outages(group) -> list[str]:
    return sorted(Path(s.path).name for s in group.skipped if "could not be read now" in s.reason)


def test_a_watch_and_metrics_listing_that_fails_keeps_the_rows_and_says_so(watched, flaky):
    group = open_group(watched)
    histograms, metrics = group.read_histograms("t"), group.read_metrics("t")
    steps = sorted(set(histograms.training_step))
    assert len(histograms) and len(metrics) and steps == [0, 2, 4]
    graph_steps = group.list_module_graph_steps("t")
    assert len(graph_steps)

    layout = TrialLayout.of(watched, "t")
    for table in FOLDERS:
        flaky.fail("list", layout.table(table).relative_to(watched).as_posix(), ALWAYS)
    group.refresh()
    # what was known stays: the same rows, not an empty table
    assert group.read_histograms("t").equals(histograms)
    assert group.read_metrics("t").equals(metrics)
    assert group.list_module_graph_steps("t").equals(graph_steps)
    assert outages(group) == sorted(FOLDERS)  # each folder said once
    group.refresh()
    assert outages(group) == sorted(FOLDERS) and group.read_metrics("t").equals(metrics)

    flaky.heal()
    group.refresh()
    assert outages(group) == []  # the folders listed again: the report ends
    assert group.read_histograms("t").equals(histograms)
    assert group.read_metrics("t").equals(metrics)


def test_a_watch_report_that_cannot_be_looked_at_now_keeps_the_one_read(
        watched, flaky, monkeypatch):
    group = open_group(watched)
    before = group.read_watch_report("t")
    assert isinstance(before, dict) and before

    def away(path):
        raise StoreUnreachable(f"cannot look at {path} now (simulated)")

    # watch.json can neither be looked at nor read: the report read before stays (it was
    # taken for "no report" and read again, which failed: the page said it was damaged)
    monkeypatch.setattr(flaky, "signature_now", away)
    flaky.fail("read_json", "watch.json", ALWAYS)
    group.refresh()
    assert group.read_watch_report("t") == before
