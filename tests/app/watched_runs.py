"""Recordings made with ``comgra_like.watch`` for the Modules page's tests: a small conv
net with a stem convolution, a residual block (an in-place ReLU called twice, ``out +=
identity``) and a nested Sequential head, trained for real, one trial per call."""

from __future__ import annotations

from pathlib import Path

GROUP = "watched"
BATCH = 8


def build_model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, channels: int):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.conv2(self.relu(self.conv1(x)))
            out += x
            return self.relu(out)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 4, 3, padding=1)
            self.block = Block(4)
            self.head = nn.Sequential(
                nn.Flatten(), nn.Sequential(nn.Linear(4 * 8 * 8, 16), nn.ReLU()), nn.Linear(16, 10)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.block(self.stem(x)))

    return Net()


class WatchedRun:
    """The net trained under ``watch(model, recorder=...)``, one recorded step at a time
    (every step is recorded), so that tests can read while it records."""

    def __init__(self, root: Path, trial: str, seed: int = 0):
        import torch

        import comgra_like
        from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
        from comgra_like.recorder import ComgraRecorder

        torch.manual_seed(seed)
        self.torch = torch
        self.model = build_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.recorder = ComgraRecorder(
            comgra_root_path=root, group=GROUP, trial_id=trial,
            decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        )
        self.handle = comgra_like.watch(self.model, log_freq=1, recorder=self.recorder,
                                        verbose=False)
        self.steps = 0
        self.group_path = Path(root) / GROUP

    def run(self, steps: int) -> WatchedRun:
        torch, recorder = self.torch, self.recorder
        for _ in range(steps):
            recorder.start_batch(self.steps, BATCH)
            recorder.start_iteration()
            x = torch.randn(BATCH, 3, 8, 8)
            y = torch.randint(0, 10, (BATCH,))
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            recorder.register_tensor("loss", loss, is_loss=True)
            self.optimizer.zero_grad()
            loss.backward()
            recorder.record_current_gradients("loss")
            self.optimizer.step()
            recorder.finish_iteration()
            recorder.finish_batch()
            self.steps += 1
        return self

    def finish(self) -> Path:
        self.handle.unwatch()
        self.recorder.finalize()
        return self.group_path


def record(root: Path, trial: str, steps: int, seed: int) -> Path:
    """Train the net for ``steps`` steps with every step recorded; returns the group."""
    return WatchedRun(root, trial, seed).run(steps).finish()
