"""The findings' calibration on healthy real models (issue 27 item 4): each false alarm
the detectors raised before, on the model that raised it, and a real fault that is
still found.

Before the calibration, a few steps of healthy training from the initialisation gave:
BERT, ViT and Whisper ``vanishing_gradient`` warnings on the attention query/key
projections (softmax and 1/sqrt(d) make their gradients small by construction), ConvNeXt
one on its LayerScale branch (scaled by 1e-6), GPT-2 ``update_ratio_high`` at step 0 (Adam's
first step moves each weight by the learning rate: 0.1 of the RMS of GPT-2's scaled
initialisation at lr 1e-3)."""

from __future__ import annotations

import numpy as np
import pytest

from comgra_like.analysis import ERROR, WARNING, find
from comgra_like.analysis import gradients as g
from comgra_like.analysis.core import TrialData
from comgra_like.query import open_group


def _data(run) -> TrialData:
    return TrialData(open_group(run.group), run.trial)


def _branch(table, suffixes):
    return table[table.node.map(lambda n: n.endswith(suffixes))]


def _no_vanishing(run):
    # a hint (info) may remain: Whisper's encoder convolutions reach 4e-4 of the decoder's
    # cross-attention gradient at initialisation, through the cross-attention alone
    found = [f for f in find(run.group) if f.kind == g.VANISHING and f.severity != "info"]
    assert found == [], [f.explanation for f in found]


QUERY_KEY = {
    "bert": (".attention.self.query", ".attention.self.key"),
    "vit": (".attention.q_proj", ".attention.k_proj", ".attention.query", ".attention.key"),
    "whisper": (".self_attn.q_proj", ".self_attn.k_proj"),
}


@pytest.mark.parametrize("name", list(QUERY_KEY))
def test_query_and_key_gradients_are_small_and_not_vanishing(runs, name):
    run = runs(name)[1]
    table = g.gain_table(_data(run))
    qk = _branch(table, QUERY_KEY[name])
    assert len(qk) >= 4
    # small by construction against the output layer downstream: what the old rule judged
    assert (qk.median_gain < g.GAIN_WARNING_LOW).any(), qk
    # while the hidden states they are computed from get a full gradient
    assert (qk.median_reach > g.GAIN_LOW).all(), qk
    _no_vanishing(run)


def test_convnext_layer_scale_branch_neither(runs):
    # ConvNeXt's block: x + gamma * pwconv2(act(pwconv1(norm(dwconv(x))))), gamma 1e-6
    run = runs("convnext")[1]
    table = g.gain_table(_data(run))
    branch = _branch(table, (".dwconv", ".layernorm", ".pwconv1", ".act", ".pwconv2"))
    branch = branch[branch.node.str.contains(".layers.")]
    assert len(branch) >= 4
    assert (branch.median_gain < 1e-5).any(), branch  # about the LayerScale's 1e-6
    assert (branch.median_reach > g.GAIN_LOW).all(), branch
    _no_vanishing(run)


def test_gpt2_first_adam_step_is_not_a_too_large_learning_rate(runs):
    run = runs("gpt2")[1]
    data = _data(run)
    updates = data.rows(recording_type="update", kinds=("parameter",))
    matrices = [len(data.parameter_shapes.get((str(n), str(r)), ())) >= 2
                for n, r in zip(updates.node, updates.role)]
    updates = updates[np.asarray(matrices)]  # the weights it judges (biases and gains not)
    first = updates[updates.training_step == 0]
    assert first.update_ratio.max() > g.UPDATE_WARNING  # the old rule's single step
    medians = updates.groupby(["node", "role"], observed=True)["update_ratio"].median()
    assert medians.max() < g.UPDATE_WARNING
    assert [f for f in find(run.group) if f.kind == g.UPDATE_RATIO_HIGH] == []


def test_gpt2_with_only_its_first_step_recorded_neither(runs):
    # watch's log_freq longer than the run: step 0, Adam's sign step, is all there is
    run = runs("gpt2", bare=False, log_freq=100)[1]
    updates = _data(run).rows(recording_type="update", kinds=("parameter",))
    assert set(updates.training_step) == {0} and updates.update_ratio.max() > g.UPDATE_WARNING
    assert [f for f in find(run.group) if f.kind == g.UPDATE_RATIO_HIGH] == []


def test_a_learning_rate_too_large_for_gpt2_is_still_found(runs):
    # lr 3e-2 with AdamW: every update moves the weights by a large part of their size
    run = runs("gpt2", bare=False, lr=3e-2)[1]
    found = [f for f in find(run.group) if f.kind == g.UPDATE_RATIO_HIGH]
    assert found and all(f.severity in (WARNING, ERROR) for f in found)
    assert max(f.numbers["max_update_ratio"] for f in found) > g.UPDATE_WARNING
