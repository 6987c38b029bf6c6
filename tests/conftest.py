"""Shared test configuration: browser options for dash_duo and recorded test data.

Browser tests use Debian's chromium + chromedriver, headless (``--headless`` is in
pyproject's addopts), as root, offline. ``DASH_TEST_CHROMEPATH`` overrides the browser
binary; chromedriver comes from PATH. Without a browser, browser tests are skipped;
``REQUIRE_BROWSER=1`` (CI) turns that into an error.

Data: :class:`TinyRun` drives the real ``ComgraRecorder`` with a small recurrent model
(several iterations, two types of execution, a gradient group, parameter updates, KPIs,
notes), so the GUI is tested on what the recorder really writes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROME_BINARY = os.environ.get("DASH_TEST_CHROMEPATH", "/usr/bin/chromium")

# dash.testing adds --disable-dev-shm-usage --no-sandbox --disable-gpu itself; repeated
# here so that this list alone is a working configuration.
EXTRA_CHROME_ARGS = [
    "--no-sandbox",  # required as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
    "--no-first-run",
    "--no-default-browser-check",
    # offline: stop Chromium's own background traffic, which fails noisily
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--mute-audio",
]
BROWSER_FIXTURES = {"dash_duo", "dash_br", "dash_duo_mp"}


def pytest_setup_options():
    """dash.testing hook: the webdriver Options to start from."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = CHROME_BINARY
    for arg in EXTRA_CHROME_ARGS:
        options.add_argument(arg)
    return options


def browser_available() -> bool:
    return os.path.exists(CHROME_BINARY) and shutil.which("chromedriver") is not None


def pytest_collection_modifyitems(config, items):
    if browser_available():
        return
    if os.environ.get("REQUIRE_BROWSER") == "1":
        raise pytest.UsageError(
            f"REQUIRE_BROWSER=1 but {CHROME_BINARY} or chromedriver is missing "
            "(Debian: apt-get install -y chromium chromium-driver)"
        )
    skip = pytest.mark.skip(reason="chromium/chromedriver not installed")
    for item in items:
        if BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(skip)


# --- recorded test data ----------------------------------------------------------------

BATCH_SIZE = 12  # more than 10 samples: "Sample 2" must sort before "Sample 10"


class TinyRun:
    """A small recurrent model trained with the real recorder, one step at a time.

    Types of execution: ``short`` (2 iterations) on even steps, ``long`` (3 iterations)
    on odd steps. Every step in ``record_steps`` is recorded.
    """

    def __init__(
        self,
        root: Path,
        group: str,
        trial_id: str,
        record_steps,
        seed: int = 0,
        bugged: bool = False,
    ):
        import torch
        from torch import nn

        from comgra_like.objects import DecisionMakerForRecordingsHardcoded
        from comgra_like.recorder import ComgraRecorder

        torch.manual_seed(seed)
        self.torch = torch
        self.recorder = ComgraRecorder(
            comgra_root_path=root,
            group=group,
            trial_id=trial_id,
            decision_maker_for_recordings=DecisionMakerForRecordingsHardcoded(list(record_steps)),
        )
        self.model = nn.ModuleDict(
            {
                "cell": nn.Linear(4 + 3, 3),
                "readout": nn.Linear(3, 2),
            }
        )
        self.bugged = bugged
        self.recorder.track_module("net", self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.recorder.add_note(f"{trial_id}: tiny recurrent test model")
        self.group_path = Path(root) / group

    def step(self, training_step: int) -> float:
        torch, recorder = self.torch, self.recorder
        n_iterations = 2 if training_step % 2 == 0 else 3
        toe = "short" if n_iterations == 2 else "long"
        recorder.start_batch(training_step, BATCH_SIZE, type_of_execution=toe)
        memory = torch.zeros(BATCH_SIZE, 3)
        recorder.register_tensor(
            "initial_memory",
            memory,
            node_name="memory",
            role_within_node="initial",
            is_initial_value=True,
        )
        inputs = torch.randn(BATCH_SIZE, n_iterations, 4)
        target = (inputs.sum(dim=(1, 2)) > 0).float()
        loss_value = float("nan")
        for it in range(n_iterations):
            recorder.start_iteration()
            x = inputs[:, it, :]
            recorder.register_tensor("input", x, is_input=True)
            memory = torch.tanh(self.model["cell"](torch.cat([x, memory], dim=1)))
            recorder.register_tensor(
                "new_memory", memory, node_name="memory", role_within_node="new"
            )
            if it == n_iterations - 1:
                out = self.model["readout"](memory)
                if self.bugged:
                    out = torch.relu(out)
                recorder.register_tensor("output", out)
                grid = out.unsqueeze(2) * memory.unsqueeze(1)  # (batch, 2, 3): a rank-3 view
                recorder.register_tensor("outer", grid)
                recorder.register_tensor("target", target, is_target=True)
                loss = ((out.sum(dim=1) - target) ** 2).mean()
                recorder.register_tensor("loss", loss, is_loss=True)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                recorder.record_current_gradients("main_loss")
                loss_value = float(loss.item())
                recorder.record_kpi_in_graph(
                    "loss", "mse", loss_value, record_even_if_recording_is_inactive=True
                )
                recorder.record_kpi_in_graph(
                    "accuracy",
                    "sign",
                    float(training_step % 3),
                    record_even_if_recording_is_inactive=True,
                )
            recorder.finish_iteration()
        recorder.finish_batch()
        return loss_value

    def run(self, steps) -> TinyRun:
        for s in steps:
            self.step(s)
        return self

    def finalize(self) -> None:
        self.recorder.finalize()


def record_tiny_group(root: Path, group: str = "tiny") -> Path:
    """Two finished trials: steps 0..11, recorded at 0, 1, 4, 5, 8, 9, 10."""
    for number, trial_id in enumerate(["trial_a", "trial_b"]):
        run = TinyRun(
            root,
            group,
            trial_id,
            record_steps=[0, 1, 4, 5, 8, 9, 10],
            seed=number,
            bugged=number == 0,
        )
        run.run(range(12))
        run.finalize()
    return Path(root) / group


@pytest.fixture(scope="session")
def tiny_group(tmp_path_factory) -> Path:
    """A finished group folder written by the real recorder (read-only for tests)."""
    pytest.importorskip("torch")
    return record_tiny_group(tmp_path_factory.mktemp("recordings"))


@pytest.fixture
def tiny_run_class() -> type[TinyRun]:
    """TinyRun, for tests that write data while the GUI runs."""
    pytest.importorskip("torch")
    return TinyRun
