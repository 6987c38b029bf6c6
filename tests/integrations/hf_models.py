"""A tiny BERT classifier (from a configuration, nothing downloaded) trained by Hugging
Face's Trainer on CPU for a few steps: what the Trainer tests share."""

from __future__ import annotations

import torch
import transformers

HIDDEN, LAYERS, HEADS, SEQ, BATCH, VOCAB, CLASSES = 32, 2, 2, 8, 4, 64, 5


def bert() -> torch.nn.Module:
    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=SEQ,
        num_labels=CLASSES, attn_implementation="eager")
    return transformers.BertForSequenceClassification(config)


class Samples(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.labels[i]}


def arguments(out, **kwargs) -> transformers.TrainingArguments:
    settings = {"output_dir": str(out), "max_steps": 4, "per_device_train_batch_size": BATCH,
                "per_device_eval_batch_size": BATCH, "learning_rate": 1e-3,
                "eval_strategy": "steps", "eval_steps": 2, "save_strategy": "no",
                "logging_steps": 1, "report_to": "none", "use_cpu": True, "seed": 0,
                "disable_tqdm": True, "dataloader_num_workers": 0}
    settings.update(kwargs)
    return transformers.TrainingArguments(**settings)


def train(out, callbacks=(), model_seed: int = 0, **kwargs):
    """(model, trainer) after training."""
    torch.manual_seed(model_seed)
    model = bert()
    trainer = transformers.Trainer(model=model, args=arguments(out, **kwargs),
                                   train_dataset=Samples(32, 1), eval_dataset=Samples(8, 2),
                                   callbacks=list(callbacks))
    trainer.train()
    return model, trainer
