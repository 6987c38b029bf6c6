"""The optimizer detector (analysis/optimizer.py): healthy runs of the real-model suite's
tiny transformers raise nothing; an injected fault is named (eps=1e-1: updates dominated
by eps; lr x 100: updates far larger than the weights)."""

from __future__ import annotations

import pytest
import torch

from comgra_like import ComgraRecorder, DecisionMakerForRecordingsFrequencyPerType
from comgra_like.analysis import optimizer as detector
from comgra_like.analysis.core import TrialData
from comgra_like.query import open_group
from comgra_like.record.optimizer import watch_optimizer

models = pytest.importorskip("tests.realmodels.models")

STEPS = 8


def _train(tmp_path, name: str, trial: str, **adamw) -> TrialData:
    case = models.CASES[name]
    torch.manual_seed(0)
    net = case.build()
    net.train()
    rec = ComgraRecorder(tmp_path, "g", trial, DecisionMakerForRecordingsFrequencyPerType(1),
                         max_num_batch_size_to_record=0)
    rec.track_module("model", net)
    opt = torch.optim.AdamW(net.parameters(), **{"lr": 1e-3, **adamw})
    ow = watch_optimizer(rec, opt, net)
    gen = torch.Generator().manual_seed(0)
    for step in range(STEPS):
        rec.start_batch(step, models.BATCH, type_of_execution="training")
        rec.start_iteration()
        net(**case.batch(gen)).loss.backward()
        rec.finish_iteration()
        opt.step()
        opt.zero_grad()
        rec.finish_batch()
    ow.close()
    rec.finalize()
    return TrialData(open_group(tmp_path / "g"), trial)


@pytest.mark.parametrize("name", ["gpt2", "bert", "t5", "vit"])
def test_healthy_runs_raise_nothing(tmp_path, name):
    found = detector.detect(_train(tmp_path, name, "healthy"))
    assert found == [], [f.explanation for f in found]


def test_injected_faults_are_named(tmp_path):
    eps = detector.detect(_train(tmp_path, "gpt2", "eps", eps=1e-1))
    kinds = {f.kind for f in eps}
    assert kinds == {detector.EPS_DOMINATED}, [f.explanation for f in eps]
    assert len(eps) >= 10  # most parameters
    assert all(f.numbers["median_eps_dominated"] > detector.EPS_SHARE for f in eps)

    fast = detector.detect(_train(tmp_path, "gpt2", "fast", lr=1e-1))
    high = [f for f in fast if f.kind == detector.UPDATE_HIGH]
    assert len(high) == 1, [f.explanation for f in fast]
    assert high[0].numbers["median_update_ratio"] > detector.UPDATE_WARNING
    assert "learning rate" in high[0].explanation
