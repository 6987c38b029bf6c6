"""A screenshot of the Metrics page (issue 16) for the README: docs/screenshots/metrics.png.

    python benchmarks/screenshot_metrics.py [--path GROUP] [--out docs/screenshots/metrics.png]
        [--size 1100x1000] [--steps 60] [--window 1] [--keep DIR] [--time-page]

Without --path it records a small conv net (a stem convolution, a residual block, a
Sequential head) with ``comgra_like.watch(model, metrics=...)`` into a temporary folder
first (needs torch): the output norm of every module each step, the weight norm of the
convolutions every 5 steps, the input covariance spectrum of the head's linear layers
every 10 steps, and the loss. The page shows them with --window steps per aggregation
window (a band when more than 1), and the pointer rests on a point of the spectrum's
metric, so that its spectrum at that step shows.
--time-page prints the server time of the page's callbacks (``create_app``'s timings).
Uses benchmarks/_browser.py's browser helpers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _browser import (
    chromium,
    console_errors,
    group_to_show,
    print_server_timings,
    report_errors,
    save_screenshot,
    served,
    settle,
    wait_for_css,
)

#: What the recorded run computes (Taiyi's config format).
CONFIG = {
    "Conv2d": [["WeightNorm", "linear(5, 0)"], "OutputRMS"],
    "Linear": [["InputCovSpectrum", "linear(10, 0)"], "OutputRMS"],
}
#: The vector metric whose spectrum the screenshot shows at a hovered step.
VECTOR = "InputCovSpectrum"

_POINT = """
const card = document.querySelector(`.metrics-card[data-metric="${arguments[0]}"]`);
if (!card) return null;
const gd = card.querySelector('.js-plotly-plot');
const trace = gd.querySelector('.scatterlayer .trace');
const paths = trace ? trace.querySelectorAll('.points path') : [];
return paths.length ? paths[Math.min(3, paths.length - 1)] : null;
"""


def record_with_metrics(root: Path, steps: int = 60) -> Path:
    """A small conv net trained for ``steps`` steps under ``watch(model, metrics=CONFIG)``."""
    import torch
    from torch import nn

    import comgra_like

    class Block(nn.Module):
        def __init__(self, channels: int):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

        def forward(self, x):
            out = self.conv2(self.relu(self.conv1(x)))
            out += x
            return self.relu(out)

    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("stem", nn.Conv2d(3, 8, 3, padding=1))
    model.add_module("block", Block(8))
    model.add_module("head", nn.Sequential(nn.Flatten(), nn.Linear(512, 32), nn.ReLU(),
                                           nn.Linear(32, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    group = root / "metrics"
    with comgra_like.watch(model, log_freq=10, backend="standalone", standalone_dir=str(group),
                           verbose=False, metrics=CONFIG) as handle:
        for _ in range(steps):
            x = torch.randn(32, 3, 8, 8)
            y = torch.randint(0, 10, (32,))
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            handle.log_loss(loss)
            optimizer.step()
    return group


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots/metrics.png"))
    parser.add_argument("--size", default="1100x1000")
    parser.add_argument("--steps", type=int, default=60, help="steps of the recorded run")
    parser.add_argument("--window", type=int, default=1, help="steps per aggregation window")
    parser.add_argument("--keep", type=Path, default=None,
                        help="record into this folder (kept) instead of a temporary one")
    parser.add_argument("--time-page", action="store_true")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app
    from selenium.webdriver.common.action_chains import ActionChains

    def record(root: Path) -> Path:
        return record_with_metrics(root, steps=args.steps)

    with group_to_show(args.path, args.keep, "comgra_metrics_", record,
                       f"{args.steps} steps") as path:
        app = create_app(path, prefetch=False)
        with served(app) as base, chromium(width, height) as driver:
            started = time.perf_counter()
            driver.get(f"{base}/metrics")
            wait_for_css(driver, ".metrics-card .scatterlayer .points path, .metrics-empty",
                         timeout=60)
            shown = time.perf_counter() - started
            settle(driver)
            if args.window > 1:
                window = driver.find_element("css selector", "#metrics-window")
                window.clear()
                window.send_keys(f"{args.window}\n")
                settle(driver)
            point = driver.execute_script(_POINT, VECTOR)
            if point is not None:
                ActionChains(driver).move_to_element(point).perform()
                settle(driver)
                driver.execute_script("window.scrollTo(0, 0)")
            if args.time_page:
                print(f"browser: figures shown {shown:.2f} s after loading /metrics")
            save_screenshot(driver, args.out)
            errors = console_errors(driver)
            if args.time_page:
                print_server_timings(app, "metrics.")
    return report_errors(errors)


if __name__ == "__main__":
    sys.exit(main())
