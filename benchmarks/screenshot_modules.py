"""A screenshot of the Modules page (issue 15) for the README: docs/screenshots/modules.png.

    python benchmarks/screenshot_modules.py [--path GROUP] [--out docs/screenshots/modules.png]
        [--size 1100x760] [--open block] [--pick block.conv1] [--steps 60] [--keep DIR]
        [--time-page]

Without --path it records a small conv net (a stem convolution, a residual block with an
in-place ReLU called twice, a nested Sequential head) with ``comgra_like.watch`` into a
temporary folder first (needs torch). The page opens the module named by --open (a click
on it in the module graph) and then its child --pick (the panel of the picked module
replaces the container's: only the clicked module's panel stays open).
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
    park_pointer,
    print_server_timings,
    report_errors,
    save_screenshot,
    served,
    settle,
    wait_for_css,
)

_CLICK = """
const gd = document.querySelector('#modules-graph .js-plotly-plot');
const t = gd.data.find((d) => d.name === 'modules');
const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
for (let i = 0; i < t.customdata.length; i++) {
  if (!t.customdata[i][0].endsWith(arguments[0])) continue;
  const x = box.left + xa._offset + xa.l2p(t.x[i]), y = box.top + ya._offset + ya.l2p(t.y[i]);
  let best = null, bestDistance = 1e9;
  for (const p of gd.querySelectorAll('.scatterlayer .points path')) {
    const r = p.getBoundingClientRect();
    const d = Math.hypot(r.left + r.width / 2 - x, r.top + r.height / 2 - y);
    if (d < bestDistance) { best = p; bestDistance = d; }
  }
  return best;
}
return null;
"""


def record_watched(root: Path, steps: int = 60, log_freq: int = 1) -> Path:
    """A small conv net trained for ``steps`` steps under ``comgra_like.watch``."""
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
    model.add_module("stem", nn.Conv2d(3, 4, 3, padding=1))
    model.add_module("block", Block(4))
    model.add_module("head", nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(256, 16), nn.ReLU()),
                                           nn.Linear(16, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    group = root / "modules"
    with comgra_like.watch(model, log_freq=log_freq, backend="standalone",
                           standalone_dir=str(group), verbose=False):
        for _ in range(steps):
            x = torch.randn(16, 3, 8, 8)
            y = torch.randint(0, 10, (16,))
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return group


def click_module(driver, name: str, wait: bool = True) -> None:
    """Click the module whose name ends with ``name`` in the Modules page's graph."""
    from selenium.webdriver.common.action_chains import ActionChains

    point = driver.execute_script(_CLICK, name)
    if point is None:
        raise SystemExit(f"no module {name!r} in the module graph")
    ActionChains(driver).move_to_element(point).click().perform()
    park_pointer(driver)
    if wait:
        settle(driver)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots/modules.png"))
    parser.add_argument("--size", default="1100x760")
    parser.add_argument("--open", default="block", help="the module to open (a click)")
    parser.add_argument("--pick", default="block.conv1", help="a module inside it to pick too")
    parser.add_argument("--steps", type=int, default=60, help="steps of the recorded run")
    parser.add_argument("--keep", type=Path, default=None,
                        help="record into this folder (kept) instead of a temporary one")
    parser.add_argument("--time-page", action="store_true")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app

    def record(root: Path) -> Path:
        return record_watched(root, steps=args.steps)

    with group_to_show(args.path, args.keep, "comgra_modules_", record,
                       f"{args.steps} steps") as path:
        app = create_app(path, prefetch=False)
        with served(app) as base, chromium(width, height) as driver:
            started = time.perf_counter()
            driver.get(f"{base}/modules")
            wait_for_css(driver, "#modules-graph .scatterlayer .point", timeout=60)
            shown = time.perf_counter() - started
            settle(driver)
            started = time.perf_counter()
            click_module(driver, args.open, wait=False)
            wait_for_css(driver, ".modules-panel .heatmaplayer image, .modules-panel .hm image",
                         timeout=30)
            panel = time.perf_counter() - started
            settle(driver)
            if args.pick:
                click_module(driver, args.pick)
                wait_for_css(driver, f'.modules-panel[data-module$="{args.pick}"]', timeout=30)
                settle(driver)
            if args.time_page:
                print(f"browser: module graph shown {shown:.2f} s after loading /modules, "
                      f"a histogram panel {panel:.2f} s after a click on a module")
            save_screenshot(driver, args.out)
            errors = console_errors(driver)
            if args.time_page:
                print_server_timings(app, "modules.")
    return report_errors(errors)


if __name__ == "__main__":
    sys.exit(main())
