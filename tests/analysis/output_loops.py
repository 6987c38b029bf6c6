"""Training loops for the output-range detector (``comgra_like/analysis/outputs.py``),
recorded with the real ComgraRecorder: the tutorial's bug in several forms, each with
its fixed version. Every function trains, finalizes and returns the group folder; the
trial id is the function's name."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder

BATCH = 64


def _recorder(root: Path, group: str, trial: str, steps: int, every: int):
    return ComgraRecorder(root, group, trial,
                          DecisionMakerForRecordingsHardcoded(range(0, steps, every)),
                          max_num_batch_size_to_record=4,
                          calculate_svd_and_other_expensive_operations_of_parameters=False)


def _activation(name: str | None):
    return {None: nn.Identity(), "relu": nn.ReLU(), "leaky_relu": nn.LeakyReLU(0.01),
            "tanh": nn.Tanh()}[name]


def sigmoid_classifier(root: Path, last: str | None = "leaky_relu", steps: int = 120,
                       every: int = 20, group: str = "sigmoid_classifier") -> Path:
    """Five binary targets (the sign of five fixed linear functions of the input), an MLP
    with ``last`` after its output layer (the bug: ``leaky_relu`` or ``relu``; None is
    the fix), then a sigmoid and the squared error (as in the tutorial). Registered: ``logits`` (before the
    sigmoid), ``output``, ``target``, ``loss``."""
    torch.manual_seed(0)
    mix = torch.randn(8, 5)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 5), _activation(last))
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-2)
    rec = _recorder(root, group, "sigmoid_classifier", steps, every)
    rec.track_module("net", net)
    for step in range(steps):
        x = torch.randn(BATCH, 8)
        target = (x @ mix > 0).float()
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        logits = net(x)
        rec.register_tensor("logits", logits)
        output = torch.sigmoid(logits)
        rec.register_tensor("output", output)
        rec.register_tensor("target", target, is_target=True)
        loss = ((output - target) ** 2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rec.record_current_gradients("gradients")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def relu_regression(root: Path, last: str | None = "relu", register_pre: bool = True,
                    steps: int = 120, every: int = 20, group: str = "relu_regression"
                    ) -> Path:
    """A regression on targets that go negative (a fixed linear function of the input
    plus noise), with ``last`` after the output layer (the bug: ``relu``; None is the
    fix). ``register_pre``: also register the output
    layer's value before ``last`` (``pre``)."""
    torch.manual_seed(1)
    weights = torch.randn(6, 3)
    body = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
    final = _activation(last)
    optimizer = torch.optim.Adam(body.parameters(), lr=5e-3)
    rec = _recorder(root, group, "relu_regression", steps, every)
    rec.track_module("net", body)
    for step in range(steps):
        x = torch.randn(BATCH, 6)
        target = x @ weights + 0.1 * torch.randn(BATCH, 3)
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        pre = body(x)
        if register_pre:
            rec.register_tensor("pre", pre)
        prediction = final(pre)
        rec.register_tensor("prediction", prediction)
        rec.register_tensor("target", target, is_target=True)
        loss = ((prediction - target) ** 2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rec.record_current_gradients("gradients")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def stuck_offset(root: Path, learns: bool = False, steps: int = 120, every: int = 20,
                 group: str = "stuck_offset") -> Path:
    """Targets around +5 (sums of the inputs plus 5). The bug: the optimizer was made
    for a copy of the network (``learns=False``), so nothing is trained and the outputs
    stay near 0, below every target. The fix trains the network itself."""
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    trained = net if learns else nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.03)
    rec = _recorder(root, group, "stuck_offset", steps, every)
    rec.track_module("net", net)
    for step in range(steps):
        x = torch.randn(BATCH, 4)
        target = torch.stack([x.sum(dim=1), x[:, 0] - x[:, 1]], dim=1) + 5.0
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        prediction = net(x)
        rec.register_tensor("prediction", prediction)
        rec.register_tensor("target", target, is_target=True)
        loss = ((prediction - target) ** 2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        net.zero_grad()
        loss.backward()
        optimizer.step()
        rec.record_current_gradients("gradients")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group


def bert_multilabel(root: Path, steps: int = 60, every: int = 10,
                    group: str = "bert_multilabel") -> Path:
    """A tiny BERT built from a config (transformers; no weights downloaded) learning four
    labels per sequence (does token 5 + j occur in it?) through a sigmoid: a healthy
    bounded output whose targets are 0 and 1. Registered: ``logits``, ``probabilities``,
    ``labels`` (the target), ``loss``."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(3)
    config = BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=16, num_labels=4)
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rec = _recorder(root, group, "bert_multilabel", steps, every)
    rec.track_module("bert", model)
    for step in range(steps):
        tokens = torch.randint(5, 16, (BATCH, 12))
        labels = torch.stack([(tokens == 5 + j).any(dim=1) for j in range(4)], 1).float()
        rec.start_batch(step, BATCH)
        rec.start_iteration()
        logits = model(input_ids=tokens).logits
        rec.register_tensor("logits", logits)
        probabilities = torch.sigmoid(logits)
        rec.register_tensor("probabilities", probabilities)
        rec.register_tensor("labels", labels, is_target=True)
        loss = ((probabilities - labels) ** 2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rec.record_current_gradients("gradients")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / group
