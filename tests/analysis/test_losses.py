"""Loss spikes against the trend; outlier samples; what the per-sample loss goes with."""

from __future__ import annotations

from comgra_like.analysis import INFO, WARNING, find
from comgra_like.analysis import correlations as c
from comgra_like.analysis import losses as lo


def test_a_spike_and_an_outlier_sample(recorded):
    found = find(recorded("bad_batches", spike_at=20, outlier_at=25, outlier_sample=2))
    spikes = [f for f in found if f.kind == lo.SPIKE]
    assert len(spikes) == 1 and spikes[0].severity == WARNING
    assert spikes[0].steps == (20, 25)  # the tenfold batch, and the one corrupted sample
    assert spikes[0].node == "loss"
    outliers = [f for f in found if f.kind == lo.OUTLIER]
    assert len(outliers) == 1
    f = outliers[0]
    assert f.steps == (25,) and f.numbers["sample_index"] == 2
    assert f.where["aggregation"] == "sample:2" and f.node == "loss_per_sample"
    assert "recorded sample 2" in f.explanation


def test_no_spike_or_outlier_without_them(recorded):
    found = find(recorded("bad_batches", spike_at=None, outlier_at=None))
    assert [f for f in found if f.kind in (lo.SPIKE, lo.OUTLIER)] == []


def test_the_loss_rises_with_the_noise_of_a_sample(recorded):
    # Each sample's target carries noise of scale `difficulty`: the harder the sample,
    # the larger its loss.
    found = find(recorded("bad_batches", spike_at=None, outlier_at=None))
    hints = [f for f in found if f.kind == c.KIND]
    assert hints and all(f.severity == INFO for f in hints)
    top = hints[0]
    assert top.node == "difficulty" and top.numbers["r"] > 0.4
    assert top.numbers["samples"] == 240 and top.numbers["loss_node"] == "loss_per_sample"
    assert top.where["aggregation"].startswith("sample:")
