"""The Compare page's module-metric overlay across trials (issue 31) on real watched
loops: the small conv net of tests/app/watched_runs.py trained under
``comgra_like.watch(model, recorder=..., metrics=...)`` with two learning rates and two
seeds, each trial's ``config=`` on its recorder. The metrics offered are those any
ticked trial computed, each trial's line is what ``Group.read_metrics`` reads, on the
steps of the metric's schedule, and a group by lr averages its trials."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from comgra_like.app import compare_data as cd
from comgra_like.app import compare_figures as cf
from comgra_like.app.data import AppData
from comgra_like.app.pages import compare
from comgra_like.app.timings import Timings
from comgra_like.app.typed_figures import typed_values

pytest.importorskip("torch")

STEPS = 7
#: Taiyi's config format: every convolution's weight norm on linear(3, 0) (steps 0, 3,
#: 6), the stem's input norm every step
METRICS = {"Conv2d": [["WeightNorm", "linear(3, 0)"]], "stem": ["InputSndNorm"]}
#: (trial, lr, seed)
TRIALS = (("lr0.01-s0", 0.01, 0), ("lr0.01-s1", 0.01, 1), ("lr0.3-s0", 0.3, 0),
          ("lr0.3-s1", 0.3, 1))


def train(root: Path, trial: str, lr: float, seed: int) -> None:
    import torch

    import comgra_like
    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.recorder import ComgraRecorder
    from tests.app import watched_runs

    torch.manual_seed(seed)
    model = watched_runs.build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    recorder = ComgraRecorder(
        comgra_root_path=root, group=watched_runs.GROUP, trial_id=trial,
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        config={"lr": lr, "seed": seed})
    handle = comgra_like.watch(model, log_freq=1, recorder=recorder, verbose=False,
                               metrics=METRICS)
    torch.manual_seed(100)  # the same data in every trial
    for step in range(STEPS):
        recorder.start_batch(step, watched_runs.BATCH)
        recorder.start_iteration()
        x = torch.randn(watched_runs.BATCH, 3, 8, 8)
        y = torch.randint(0, 10, (watched_runs.BATCH,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        recorder.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        recorder.record_current_gradients("loss")
        optimizer.step()
        recorder.finish_iteration()
        recorder.finish_batch()
    handle.unwatch()
    recorder.finalize()


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> AppData:
    from tests.app import watched_runs

    root = tmp_path_factory.mktemp("compare_metrics")
    for name, lr, seed in TRIALS:
        train(root, name, lr, seed)
    data = AppData(root / watched_runs.GROUP, refresh_seconds=0)
    data.refresh(force=True)
    return data


def test_module_metrics_overlaid_across_trials_and_grouped_by_lr(watched):
    data = watched
    trials = [t[0] for t in TRIALS]
    options = [cd.decode(o["value"]) for o in cd.quantity_options(data, trials, cd.METRIC)]
    stem = "model.stem"
    assert [cd.METRIC, stem, "WeightNorm"] in options
    assert [cd.METRIC, stem, "InputSndNorm"] in options
    assert [cd.METRIC, "model.block.conv1", "WeightNorm"] in options
    # each trial's line is Group.read_metrics', on the schedule's steps
    quantity = [cd.METRIC, stem, "WeightNorm"]
    series = {t: cd.series(data, t, quantity) for t in trials}
    for trial in trials:
        frame = data.group.read_metrics(trial, module=stem, metric="WeightNorm")
        frame = frame.sort_values("training_step")
        steps, values = series[trial]
        assert steps.tolist() == [0, 3, 6] == frame["training_step"].tolist()
        assert np.array_equal(values, frame["value"].to_numpy(np.float64))
    # the stem's input is the data, the same in every trial, on every step
    inputs = [cd.series(data, t, [cd.METRIC, stem, "InputSndNorm"]) for t in trials]
    assert inputs[0][0].tolist() == list(range(STEPS))
    assert all(np.array_equal(i[1], inputs[0][1]) for i in inputs)
    # same seed, another lr: the weights move apart
    assert series["lr0.01-s0"][1][2] != series["lr0.3-s0"][1][2]
    # the page's overlay: one line per ticked trial, titled by the metric and module
    figure = compare.overlay_view(data, Timings(), trials, cd.encode(quantity), "mean", 0,
                                  compare.NO_GROUPING, cf.BAND_STD, [])
    assert [t["name"] for t in figure["data"]] == trials
    assert figure["layout"]["title"]["text"] == "WeightNorm of model.stem"
    assert np.array_equal(typed_values(figure["data"][2]["y"]), series["lr0.3-s0"][1])
    # grouped by the config's lr: each group's mean is numpy's over its two trials
    figure = compare.overlay_view(data, Timings(), trials, cd.encode(quantity), "mean", 0,
                                  "lr", cf.BAND_MINMAX, [])
    lines = {t["name"]: typed_values(t["y"]) for t in figure["data"]
             if not t["name"].endswith(" band")}
    assert sorted(lines) == ["lr=0.01 (2)", "lr=0.3 (2)"]
    for name, members in (("lr=0.01 (2)", trials[:2]), ("lr=0.3 (2)", trials[2:])):
        stacked = np.vstack([series[t][1] for t in members])
        assert np.allclose(lines[name], stacked.mean(axis=0))
    band = next(t for t in figure["data"] if t["name"] == "lr=0.3 (2) band")
    assert np.allclose(typed_values(band["y"])[:3], np.vstack(
        [series[t][1] for t in trials[2:]]).max(axis=0))
