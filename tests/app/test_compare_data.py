"""The Compare page's reads on real recorded loops through AppData: the trials table with
config columns, the quantities the selected trials share, series aligned by step, the
grouped overlay and the first divergence with its places in both trials."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from comgra_like.app import compare_data as cd
from comgra_like.app import compare_figures as cf
from comgra_like.app.data import AppData
from comgra_like.app.pages import compare
from comgra_like.app.timings import Timings
from comgra_like.app.typed_figures import typed_values
from dash import no_update
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder
from comgra_like.vocabulary import BATCH_MEAN, NO_BATCH

#: (trial, lr, seed, recorded steps)
TRIALS = (("lr0.05-s0", 0.05, 0, range(0, 8, 2)), ("lr0.05-s1", 0.05, 1, range(0, 8, 2)),
          ("lr0.2-s0", 0.2, 0, range(0, 8, 2)), ("lr0.2-s1", 0.2, 1, range(1, 8, 3)))


def train(root: Path, trial: str, lr: float, seed: int, recorded: range, steps: int = 8
          ) -> dict[int, float]:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    rec = ComgraRecorder(root, "g", trial, DecisionMakerForRecordingsHardcoded(recorded),
                         max_num_batch_size_to_record=0,
                         calculate_svd_and_other_expensive_operations_of_parameters=False,
                         config={"optim": {"lr": lr}, "seed": seed})
    rec.track_module("net", net)
    torch.manual_seed(100)  # the same data in every trial
    losses = {}
    for step in range(steps):
        x = torch.randn(8, 4)
        rec.start_batch(step, 8)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        out = net(x)
        rec.register_tensor("out", out)
        loss = (out - 1).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        rec.record_kpi_in_graph("loss", "", loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        rec.finish_batch()
        losses[step] = float(loss.detach())
    rec.finalize()
    return losses


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    losses = {name: train(root, name, lr, seed, recorded)
              for name, lr, seed, recorded in TRIALS}
    data = AppData(root / "g", refresh_seconds=0)
    data.refresh(force=True)
    return data, losses


def test_the_table_has_a_row_per_trial_with_its_config(sweep):
    data, losses = sweep
    frame = cd.trials_frame(data)
    assert sorted(frame["trial_id"]) == sorted(t[0] for t in TRIALS)
    assert cd.config_keys(frame) == ["optim.lr", "seed"]
    by_trial = frame.set_index("trial_id")
    assert by_trial.loc["lr0.2-s1", "config.optim.lr"] == 0.2
    # record_kpi_in_graph stores the KPI at recorded steps: the last is step 6's loss
    assert by_trial.loc["lr0.05-s1", "kpi.loss"] == pytest.approx(losses["lr0.05-s1"][6])
    rows = cf.table_rows(frame, "lr0.2")
    assert {r["id"] for r in rows} == {"lr0.2-s0", "lr0.2-s1"}


def test_kpi_series_of_every_trial_aligned_by_step(sweep):
    data, losses = sweep
    trials = [t[0] for t in TRIALS]
    options = cd.quantity_options(data, trials, cd.KPI)
    assert [cd.decode(o["value"]) for o in options] == [[cd.KPI, "loss", ""]]
    quantity = cd.decode(options[0]["value"])
    series = {t: cd.series(data, t, quantity) for t in trials}
    for name, _, _, recorded in TRIALS:  # logged in the graph: at the recorded steps
        steps, values = series[name]
        assert steps.tolist() == list(recorded)
        assert np.allclose(values, [losses[name][s] for s in recorded])
    assert series["lr0.05-s0"][1][0] == series["lr0.2-s0"][1][0]  # same seed, step 0


def test_a_tensor_statistic_across_trials_that_recorded_other_steps(sweep):
    data, _ = sweep
    trials = ["lr0.2-s0", "lr0.2-s1"]
    options = [cd.decode(o["value"]) for o in cd.quantity_options(data, trials, cd.TENSOR)]
    out = next(q for q in options if q[2] == "out" and q[4] == "forward")
    assert out[5] == "batch_mean"
    a = cd.series(data, "lr0.2-s0", out, "abs_max")
    b = cd.series(data, "lr0.2-s1", out, "abs_max")
    assert a[0].tolist() == [0, 2, 4, 6] and b[0].tolist() == [1, 4, 7]
    expected = data.group.read_statistics("lr0.2-s1", nodes="out", roles=out[3],
                                          recording_types="forward",
                                          aggregations="batch_mean", statistics="abs_max")
    assert np.allclose(b[1], expected.sort_values("training_step")["abs_max"])
    steps, matrix = cf.align({"a": a, "b": b})
    assert steps.tolist() == [0, 1, 2, 4, 6, 7]
    assert np.isnan(matrix[0, 1]) and np.isnan(matrix[1, 0])
    # the tensor's statistics were read together: another statistic reads nothing
    reads = []
    original = data.group.read_statistics
    data.group.read_statistics = lambda *a, **k: reads.append(a) or original(*a, **k)
    try:
        std = cd.series(data, "lr0.2-s1", out, "std")
    finally:
        del data.group.read_statistics
    assert reads == []
    expected = data.group.read_statistics("lr0.2-s1", nodes="out", roles=out[3],
                                          recording_types="forward",
                                          aggregations="batch_mean", statistics="std")
    assert np.allclose(std[1], expected.sort_values("training_step")["std"])
    # several trials are read in threads: the same series, in the trials' order
    together = cd.series_of(data, ["lr0.2-s1", "lr0.2-s0", "lr0.05-s1"], out, "norm")
    assert list(together) == ["lr0.2-s1", "lr0.2-s0", "lr0.05-s1"]
    for trial, (steps, values) in together.items():
        alone = cd.series(data, trial, out, "norm")
        assert np.array_equal(steps, alone[0]) and np.array_equal(values, alone[1])


def test_grouped_by_lr_each_group_mean_is_numpys_over_its_trials(sweep):
    data, _ = sweep
    trials = [t[0] for t in TRIALS]
    frame = cd.trials_frame(data)
    groups = cf.group_trials(trials, cd.config_values(frame, "optim.lr"))
    assert groups == {"0.05": ["lr0.05-s0", "lr0.05-s1"], "0.2": ["lr0.2-s0", "lr0.2-s1"]}
    quantity = [cd.KPI, "loss", ""]
    series = {t: cd.series(data, t, quantity) for t in trials}
    fig = cf.overlay_figure(series, "loss", groups=groups, group_key="optim.lr")
    means = {tr["name"]: typed_values(tr["y"]) for tr in fig["data"]
             if not tr["name"].endswith("band")}
    # lr 0.05: both trials recorded steps 0, 2, 4, 6: the mean is numpy's
    stacked = np.vstack([series[t][1] for t in groups["0.05"]])
    assert np.allclose(means["optim.lr=0.05 (2)"], stacked.mean(axis=0))
    # lr 0.2: steps 0, 2, 4, 6 and 1, 4, 7: on the union, each trial interpolated
    # within its own steps, then numpy's mean over the trials covering the step
    a, b = series["lr0.2-s0"], series["lr0.2-s1"]
    steps = np.union1d(a[0], b[0])
    ia = np.where((steps >= 0) & (steps <= 6), np.interp(steps, *a), np.nan)
    ib = np.where((steps >= 1) & (steps <= 7), np.interp(steps, *b), np.nan)
    assert np.allclose(means["optim.lr=0.2 (2)"], np.nanmean(np.vstack([ia, ib]), axis=0))


def test_first_divergence_names_the_step_and_where_to_open_it(sweep):
    data, _ = sweep
    found = cd.divergence(data, "lr0.05-s0", "lr0.2-s0")
    # same seed and data, another lr: the first update (step 0) differs
    assert found["step"] == 0
    assert "first differ at step 0" in found["text"]
    assert found["where_a"]["trial"] == "lr0.05-s0"
    assert found["where_b"]["trial"] == "lr0.2-s0"
    assert found["where_a"]["recording_type"] == "update"
    assert found["where_a"]["node"] == found["where_b"]["node"]
    # the graph painted by the relative difference of the two trials: at first at the
    # divergence's step and recording type; the updates differ (another lr)
    steps = cd.common_steps(data, "lr0.05-s0", "lr0.2-s0")
    assert steps == [0, 2, 4, 6]
    step, statistic, recording_type = cd.difference_defaults(found, steps)
    assert (step, recording_type) == (0, "update")
    model, paint = cd.difference_graph(data, "lr0.05-s0", "lr0.2-s0", step, statistic,
                                       recording_type)
    assert paint.step == 0 and "update" in paint.label
    differences = {n: v.value for n, v in paint.values.items() if v.value is not None}
    assert differences and all(d > 0 for d in differences.values())
    assert set(differences) <= set(model.nodes)
    same = cd.divergence(data, "lr0.05-s0", "lr0.05-s0")
    assert same["where_a"] is None and "Not compared" in same["text"]


def statistic_at(data, trial, step, node, recording_type, statistic):
    frame = data.group.read_statistics(trial, nodes=node, recording_types=recording_type,
                                       aggregations=[BATCH_MEAN, NO_BATCH],
                                       statistics=statistic)
    frame = frame[frame["training_step"] == step]
    assert len(frame) == 1, frame
    return float(frame[statistic].iloc[0])


def test_the_difference_is_painted_at_any_step_both_recorded_with_any_statistic(sweep):
    data, _ = sweep
    a, b = "lr0.05-s0", "lr0.2-s0"
    # step 0's forward pass: same seed and data, the lr has not acted yet: equal
    _, paint = cd.difference_graph(data, a, b, 0, "mean", "forward")
    assert cf.compared_nodes(paint)[0] > 0 and cf.compared_nodes(paint)[1] == 0
    # step 4's forward pass: two updates of another lr apart; each node's value is
    # |a - b| / max(|a|, |b|) of the two trials' recorded statistic
    _, paint = cd.difference_graph(data, a, b, 4, "abs_max", "forward")
    assert paint.step == 4 and paint.label == cd.difference_label("abs_max", "forward")
    out = paint.values["out"].value
    va, vb = (statistic_at(data, t, 4, "out", "forward", "abs_max") for t in (a, b))
    assert out == pytest.approx(abs(va - vb) / max(abs(va), abs(vb))) and out > 0
    assert paint.values["x"].value == 0  # the same data in both trials
    # one scale over every step both recorded: it reaches the largest difference of
    # any step, not only this one's
    later = cd.difference_graph(data, a, b, 6, "abs_max", "forward")[1]
    assert later.scale == paint.scale
    largest = max(v.value for p in (paint, later) for v in p.values.values()
                  if v.value is not None)
    assert paint.scale.high >= largest
    # the view: figure, title and the recording types of the first trial
    painted, title, options = compare.difference_view(
        data, Timings(), [a, b], 4, "abs_max", "forward")
    assert painted[1] == paint and compare.difference_figure(painted).data
    assert "graph at step 4, painted by the relative difference of max |x| · forward" in title
    assert "nodes differ" in title
    assert options[0]["value"] == "forward" and "update" in [o["value"] for o in options]
    # a step only one trial recorded has nothing to paint
    assert cd.difference_graph(data, a, "lr0.2-s1", 2, "mean", "forward") is None
    painted, title, _ = compare.difference_view(data, Timings(), [a, "lr0.2-s1"], 2, "mean",
                                                "forward")
    assert painted is None and title.startswith("Nothing to paint")


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Two runs of one seed, lr and data (bitwise equal recordings) and a third trial."""
    root = tmp_path_factory.mktemp("twins")
    for name in ("twin_a", "twin_b"):
        train(root, name, 0.1, 0, range(0, 8, 2))
    train(root, "other", 0.3, 0, range(0, 8, 2))
    data = AppData(root / "g", refresh_seconds=0)
    data.refresh(force=True)
    return data


def test_identical_trials_are_painted_all_zero_and_said_to_be_equal(twins):
    data = twins
    found = cd.divergence(data, "twin_a", "twin_b")
    assert found["where_a"] is None and "agree on every step" in found["text"]
    # the view: no divergence, the panel shows the last common step's forward means
    out = compare.divergence_view(data, Timings(), ["twin_a", "twin_b"], None, None)
    _, places, _, _, _, _, style, options, step, statistic, recording_type, defaults = out
    assert places == [None, None] and style == {}
    assert [o["value"] for o in options] == [0, 2, 4, 6]
    assert (step, statistic, recording_type) == (6, "mean", "forward")
    # asked again (a refresh), the user's choice stays
    again = compare.divergence_view(data, Timings(), ["twin_a", "twin_b"], options, defaults)
    assert again[7:] == (no_update,) * 5
    for step, statistic, recording_type in ((6, "mean", "forward"), (2, "std", "update"),
                                            (0, "norm", "gradient:loss")):
        _, paint = cd.difference_graph(data, "twin_a", "twin_b", step, statistic,
                                       recording_type)
        values = [v.value for v in paint.values.values() if v.value is not None]
        assert values and all(v == 0 for v in values)
        # zero is the lowest colour of the scale, not the middle of a padded one
        assert paint.scale.low == 0 and paint.scale.position(0.0) == 0
        _, title, _ = compare.difference_view(data, Timings(), ["twin_a", "twin_b"], step,
                                              statistic, recording_type)
        assert "the two trials are equal here" in title
    # another pair of the group diverges: its defaults replace the twins'
    out = compare.divergence_view(data, Timings(), ["twin_a", "other"], options, defaults)
    assert out[8:11] == (0, out[8 + 1], "update") and out[11] != defaults


def test_a_trial_recorded_later_joins_the_table_and_the_other_rows_stay(sweep):
    data, _ = sweep
    before = cd.trials_frame(data)
    kept = data.cache.bytes
    root = data.path.parent
    train(root, "lr0.1-late", 0.1, 2, range(0, 8, 4))
    data.refresh(force=True)
    after = cd.trials_frame(data)
    assert len(after) == len(before) + 1
    late = after.set_index("trial_id").loc["lr0.1-late"]
    assert late["config.optim.lr"] == 0.1 and late["steps_recorded"] == 2
    # the rows of the trials that did not change stay as they were
    same = after[after["trial_id"] != "lr0.1-late"].reset_index(drop=True)
    assert same.equals(before.reset_index(drop=True)[same.columns])
    assert data.cache.bytes >= kept
