"""Tiny real architectures for the real-model tests, and the training loop they share.

Every transformers model is built from a configuration with random weights (nothing is
downloaded): GPT-2 (decoder-only, the LM head tied to the token embedding), BERT
(encoder-only, an attention mask with padding), T5 (encoder-decoder, one embedding shared
by the encoder, the decoder and the LM head), Whisper (a speech encoder-decoder: two
convolutions over log-mel frames, then attention), ViT (patches, a [CLS] token), ConvNeXt
(depthwise convolutions and a LayerScale branch initialised at 1e-6) and ResNet
(convolutions with BatchNorm). Sizes: hidden 32 (ConvNeXt and ResNet 8 and 16
channels), 2 layers, sequences of 8 tokens, images of 16x16, batches of 4.

``train(case, ...)`` trains one of them from its initialisation for a few steps with
AdamW, the same batches for the same seed, optionally under ``comgra_like.watch``, with
gradient checkpointing, bf16 autocast or a validation forward after every step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

import comgra_like

HIDDEN, LAYERS, HEADS, SEQ, BATCH, VOCAB = 32, 2, 2, 8, 4, 64
IMAGE, PATCH, CLASSES = 16, 4, 5
MELS = 8  # Whisper's log-mel bins; its encoder takes 2 x SEQ frames
ROOT = "model"


def _quiet() -> None:
    transformers.logging.set_verbosity_error()


def gpt2() -> nn.Module:
    _quiet()
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        n_inner=2 * HIDDEN, tie_word_embeddings=True)
    return transformers.GPT2LMHeadModel(config)


def bert() -> nn.Module:
    _quiet()
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=SEQ,
        num_labels=CLASSES, attn_implementation="eager")
    return transformers.BertForSequenceClassification(config)


def t5() -> nn.Module:
    _quiet()
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN,
        num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=HEADS,
        relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0,
        tie_word_embeddings=True)
    return transformers.T5ForConditionalGeneration(config)


def vit() -> nn.Module:
    _quiet()
    config = transformers.ViTConfig(
        image_size=IMAGE, patch_size=PATCH, num_channels=3, hidden_size=HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
        num_labels=CLASSES, attn_implementation="eager")
    return transformers.ViTForImageClassification(config)


def convnext() -> nn.Module:
    _quiet()
    config = transformers.ConvNextConfig(
        num_channels=3, num_stages=2, patch_size=2, hidden_sizes=[8, 16], depths=[1, 1],
        layer_scale_init_value=1e-6, image_size=IMAGE, num_labels=CLASSES)
    return transformers.ConvNextForImageClassification(config)


def resnet() -> nn.Module:
    _quiet()
    config = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        layer_type="basic", num_labels=CLASSES, downsample_in_first_stage=False)
    return transformers.ResNetForImageClassification(config)


def whisper() -> nn.Module:
    _quiet()
    config = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=MELS, d_model=HIDDEN, encoder_layers=LAYERS,
        decoder_layers=LAYERS, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
        encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN, max_source_positions=SEQ,
        max_target_positions=SEQ, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None,
        attn_implementation="eager")
    return transformers.WhisperForConditionalGeneration(config)


def _tokens(gen: torch.Generator) -> torch.Tensor:
    return torch.randint(1, VOCAB, (BATCH, SEQ), generator=gen)


def _padding_mask() -> torch.Tensor:
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, -3:] = 0  # the first sequence is padded: attention must leave those keys out
    mask[1, -1:] = 0
    return mask


def _lm_batch(gen):
    tokens = _tokens(gen)
    return {"input_ids": tokens, "labels": tokens}


def _classify_tokens(gen):
    return {"input_ids": _tokens(gen), "attention_mask": _padding_mask(),
            "labels": torch.randint(0, CLASSES, (BATCH,), generator=gen)}


def _seq2seq(gen):
    return {"input_ids": _tokens(gen), "attention_mask": _padding_mask(),
            "labels": _tokens(gen)}


def _speech(gen):
    return {"input_features": torch.randn(BATCH, MELS, 2 * SEQ, generator=gen),
            "labels": _tokens(gen)}


def _images(gen):
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen),
            "labels": torch.randint(0, CLASSES, (BATCH,), generator=gen)}


@dataclass(frozen=True)
class Case:
    """A model, its batches (keyword arguments of ``forward``, labels included: the
    model's output has ``.loss``) and whether it supports gradient checkpointing."""

    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[torch.Generator], dict[str, torch.Tensor]]
    checkpointing: bool = True


CASES: dict[str, Case] = {c.name: c for c in (
    Case("gpt2", gpt2, _lm_batch),
    Case("bert", bert, _classify_tokens),
    Case("t5", t5, _seq2seq),
    Case("whisper", whisper, _speech),
    Case("vit", vit, _images),
    Case("convnext", convnext, _images, checkpointing=False),
    Case("resnet", resnet, _images, checkpointing=False),
)}


@dataclass
class Run:
    """What a training run left: the model after training, the losses of every step,
    the watch handle (None for a bare run) and the forward modules of one step."""

    model: nn.Module
    losses: list[float]
    handle: Any = None
    validation_losses: list[float] = field(default_factory=list)

    @property
    def group(self) -> Path:
        return self.handle.group_path

    @property
    def trial(self) -> str:
        return self.handle.trial_id


def train(case: Case, steps: int, *, folder: Path | None = None, trial: str = "t",
          log_freq: int = 1, metrics: Mapping | None = None, checkpointing: str | None = None,
          autocast: bool = False, validate: bool = False, seed: int = 0,
          lr: float = 1e-3) -> Run:
    """Train ``case`` from its initialisation (seed ``seed``) for ``steps`` steps.

    ``folder``: watch the model into the group folder ``folder`` (trial ``trial``, every
    ``log_freq``-th step, exact histograms: every value, no outliers dropped), else train
    bare. ``checkpointing``: ``"reentrant"`` or ``"non_reentrant"`` gradient
    checkpointing of the transformer layers. ``autocast``: the forward under bf16
    autocast. ``validate``: after every training step a forward in eval mode without
    gradients on a batch of its own (the validation loop, on recorded and unrecorded
    steps alike)."""
    torch.manual_seed(seed)
    model = case.build()
    model.train()
    if checkpointing is not None:
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    handle = None
    if folder is not None:
        handle = comgra_like.watch(
            model, log_freq=log_freq, standalone_dir=str(folder), trial_id=trial,
            name=ROOT, verbose=False, sample_n=None, reject_outlier_proportion=0.0,
            metrics=metrics)
    data = torch.Generator().manual_seed(seed + 1)
    held_out = torch.Generator().manual_seed(seed + 2)
    losses, validation = [], []
    try:
        for _ in range(steps):
            batch = case.batch(data)
            with _autocast(autocast):
                loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            if handle is not None and metrics is not None:
                handle.log_loss(loss)
            optimizer.step()
            losses.append(float(loss.detach()))
            if validate:
                model.eval()
                with torch.no_grad(), _autocast(autocast):
                    validation.append(float(model(**case.batch(held_out)).loss))
                model.train()
    finally:
        if handle is not None:
            handle.unwatch()
    return Run(model, losses, handle, validation)


def _autocast(on: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


def called_modules(case: Case, seed: int = 0) -> set[str]:
    """The qualified names (``model.…``) of the modules one training forward of a fresh
    ``case`` model calls (plain forward hooks on a model nobody trains)."""
    torch.manual_seed(seed)
    model = case.build()
    model.train()
    names = {id(m): (ROOT if not n else f"{ROOT}.{n}") for n, m in model.named_modules()}
    seen: set[str] = set()
    handles = [m.register_forward_hook(lambda mod, _i, _o: seen.add(names[id(mod)]))
               for m in model.modules()]
    try:
        model(**case.batch(torch.Generator().manual_seed(seed + 1)))
    finally:
        for h in handles:
            h.remove()
    return seen


def parameter_holders(model: nn.Module) -> set[tuple[str, str]]:
    """(module, parameter name) of every parameter under every module that holds it
    (tied weights once per holder)."""
    out = set()
    for name, module in model.named_modules(remove_duplicate=False):
        for p_name, _p in module.named_parameters(recurse=False):
            out.add((ROOT if not name else f"{ROOT}.{name}", p_name))
    return out


def same_parameters(a: nn.Module, b: nn.Module) -> list[str]:
    """The names of the parameters and buffers that differ (bitwise) between a and b."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return [k for k in sa if not torch.equal(sa[k], sb[k])]
