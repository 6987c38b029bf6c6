"""Tied (shared) parameters under watch() (issue 27 item 2) on tiny transformers models
built from configs (no download): GPT-2's ``lm_head`` holds ``wte``'s weight, T5's
``shared`` embedding is held by both ``embed_tokens`` and ``lm_head`` and never runs
itself. The data is recorded once, under the first holder; the query API and the
Modules page's builders show it under every holder, marked shared with the others."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from comgra_like.app import module_figures as mf
from comgra_like.app import module_sharing
from comgra_like.app.pages import modules as modules_page

import comgra_like
from comgra_like.query import open_group

STEPS = 3


def _gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=32)
    return transformers.GPT2LMHeadModel(config)


def _t5():
    config = transformers.T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2,
                                   num_decoder_layers=2, num_heads=2, vocab_size=64)
    return transformers.T5ForConditionalGeneration(config)


def _train(make, tmp_path=None):
    """STEPS steps of a fresh model (watched when ``tmp_path`` is given, every value
    counted: sample_n=None, no outlier rejection). Returns (model, handle, first weight)."""
    torch.manual_seed(0)
    model = make()
    first = model.get_input_embeddings().weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    handle = None
    if tmp_path is not None:
        handle = comgra_like.watch(model, standalone_dir=str(tmp_path / "w"), trial_id="t",
                                   log_freq=1, sample_n=None, reject_outlier_proportion=0.0,
                                   verbose=False)
    gen = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randint(0, 64, (2, 8), generator=gen)
        # T5: the decoder's inputs given (its config has no decoder start token)
        extra = {"decoder_input_ids": x} if model.config.is_encoder_decoder else {}
        out = model(input_ids=x, labels=x, **extra)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    if handle is not None:
        handle.unwatch()
    return model, handle, first


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return _train(_gpt2, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return _train(_t5, tmp_path_factory.mktemp("t5"))


def _params(group, node, what="params"):
    return group.read_histograms("t", modules=node, what=what, roles="weight")


def test_gpt2_lm_head_shows_the_tied_weight(gpt2):
    _model, handle, first = gpt2
    group = open_group(handle.group_path)
    graph = group.read_module_graph("t", 0)
    assert graph["shared_parameters"] == [{
        "recorded": ["model.transformer.wte", "weight"],
        "holders": [["model.transformer.wte", "weight"], ["model.lm_head", "weight"]]}]
    wte, head = _params(group, "model.transformer.wte"), _params(group, "model.lm_head")
    assert len(wte) == len(head) == STEPS
    assert set(wte["shared_with"]) == {"model.lm_head.weight"}
    assert set(wte["recorded_as"]) == {""}
    assert set(head["shared_with"]) == {"model.transformer.wte.weight"}
    assert set(head["recorded_as"]) == {"model.transformer.wte.weight"}
    for a, b in zip(wte["counts"], head["counts"]):
        assert np.array_equal(a, b)
    # exact: step 0's histogram is numpy's of the weight before the first update
    values = first.numpy().ravel()
    expected, _ = np.histogram(values, bins=30, range=(values.min(), values.max()))
    assert np.array_equal(head["counts"][0], expected)
    assert int(head["n"][0]) == values.size
    grads = _params(group, "model.lm_head", "params_grad")
    assert len(grads) == STEPS and set(grads["recorded_as"]) == {"model.transformer.wte.weight"}


def test_gpt2_data_recorded_once(gpt2):
    _model, handle, _first = gpt2
    every = open_group(handle.group_path).read_histograms("t", what=["params", "params_grad"])
    recorded = every[every["recorded_as"] == ""]
    # the stored rows: the tied weight once per step and kind, under wte only
    assert (recorded["module"] == "model.lm_head").sum() == 0
    assert ((recorded["module"] == "model.transformer.wte")
            & (recorded["role"] == "weight")).sum() == 2 * STEPS
    copies = every[every["recorded_as"] != ""]
    assert set(copies["module"]) == {"model.lm_head"} and len(copies) == 2 * STEPS


def test_t5_shared_embedding_under_every_holder(t5):
    _model, handle, first = t5
    group = open_group(handle.group_path)
    graph = group.read_module_graph("t", 0)
    holders = ["model.shared", "model.encoder.embed_tokens", "model.decoder.embed_tokens",
               "model.lm_head"]
    assert graph["shared_parameters"] == [{"recorded": ["model.shared", "weight"],
                                           "holders": [[h, "weight"] for h in holders]}]
    # the first holder never runs: it is in no module graph ...
    assert "model.shared" not in mf.invocations(graph)
    recorded = _params(group, "model.shared")
    assert len(recorded) == STEPS
    values = first.numpy().ravel()
    expected, _ = np.histogram(values, bins=30, range=(values.min(), values.max()))
    # ... and its weight, the model's largest parameter, is shown under the three others
    for holder in holders[1:]:
        assert holder in mf.invocations(graph)
        rows = _params(group, holder)
        assert len(rows) == STEPS, holder
        assert set(rows["recorded_as"]) == {"model.shared.weight"}
        others = {f"{h}.weight" for h in holders if h != holder}
        assert set(rows["shared_with"].iloc[0].split(", ")) == others
        assert np.array_equal(rows["counts"].iloc[0], expected)
        for a, b in zip(recorded["counts"], rows["counts"]):
            assert np.array_equal(a, b)
    every = group.read_histograms("t", what="params")
    assert (every[every["recorded_as"] == ""]["module"].isin(holders[1:])).sum() == 0


def test_t5_modules_page_marks_the_holders(t5):
    _model, handle, _first = t5
    group = open_group(handle.group_path)
    graph = group.read_module_graph("t", 0)
    shares = module_sharing.sharing(graph)
    assert set(shares) == {"model.shared", "model.encoder.embed_tokens",
                           "model.decoder.embed_tokens", "model.lm_head"}
    # the hover of each holder in its level says what it shares and where it is recorded
    view = mf.level_view(graph, "model.encoder")
    node = next(n for n in view.nodes if n.module == "model.encoder.embed_tokens")
    assert "weight shared with model.shared.weight" in node.hover
    assert "recorded as model.shared.weight" in node.hover
    top = mf.level_view(graph, None)
    head = next(n for n in top.nodes if n.module == "model.lm_head")
    assert "shared with" in head.hover
    # the panel's note, from the rows the page reads
    frame = group.read_histograms("t", modules="model.lm_head")
    note = module_sharing.panel_note(frame, "params", "weight")
    assert note.startswith("shared with model.shared.weight") and \
        note.endswith("(recorded as model.shared.weight)")
    assert module_sharing.panel_note(frame, "io", "output 0") is None
    # the report: the holder that never runs says where its weight is shown
    report = group.read_watch_report("t")
    assert {"module": "model.shared", "reason": "never called"}.items() <= next(
        s for s in report["skipped"] if s["module"] == "model.shared").items()
    text = str(modules_page.report_view(report, shares))
    assert "its weight is shown under model.encoder.embed_tokens, " \
           "model.decoder.embed_tokens, model.lm_head" in text


def test_gpt2_hover_and_untied_models_unchanged(gpt2, tmp_path):
    _model, handle, _first = gpt2
    graph = open_group(handle.group_path).read_module_graph("t", 0)
    head = next(n for n in mf.level_view(graph, None).nodes if n.module == "model.lm_head")
    assert "weight shared with model.transformer.wte.weight (recorded as " in head.hover
    # a model without tied weights: no key in its graph, empty columns
    untied = _gpt2()
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())
    h = comgra_like.watch(untied, standalone_dir=str(tmp_path / "u"), trial_id="t",
                          log_freq=1, verbose=False)
    untied(input_ids=torch.zeros(1, 4, dtype=torch.long)).logits.sum().backward()
    h.unwatch()
    group = open_group(h.group_path)
    assert "shared_parameters" not in group.read_module_graph("t", 0)
    rows = group.read_histograms("t", what="params")
    assert set(rows["shared_with"]) == {""} and set(rows["recorded_as"]) == {""}
    assert module_sharing.sharing(group.read_module_graph("t", 0)) == {}


def test_recording_does_not_change_training(gpt2):
    watched, _handle, _first = gpt2
    bare, _none, _f = _train(_gpt2)
    for (k, a), b in zip(watched.state_dict().items(), bare.state_dict().values()):
        assert torch.equal(a, b), k
