"""A screenshot of the Modules page (issue 15) for the README: docs/screenshots/modules.png.

    python benchmarks/screenshot_modules.py [--path GROUP] [--out docs/screenshots/modules.png]
        [--size 1100x760] [--open block] [--pick block.conv1] [--steps 60] [--keep DIR]
        [--time-page]

Without --path it records a small conv net (a stem convolution, a residual block with an
in-place ReLU called twice, a nested Sequential head) with ``comgra_like.watch`` into a
temporary folder first (needs torch). The page opens the module named by --open (a click
on it in the module graph) and picks --pick as well, so two histogram panels show.
--time-page prints the server time of the page's callbacks (``create_app``'s timings).
Uses benchmarks/screenshot_pages.py's browser helpers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from screenshot_pages import _driver, _free_port, _settle, _wait

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


def _click(driver, name: str, settle: bool = True) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    point = driver.execute_script(_CLICK, name)
    if point is None:
        raise SystemExit(f"no module {name!r} in the module graph")
    ActionChains(driver).move_to_element(point).click().perform()
    ActionChains(driver).move_to_element(driver.find_element("css selector", ".brand")).perform()
    if settle:
        _settle(driver)


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

    tmp = None
    path = args.path
    if path is None:
        if args.keep is None:
            tmp = tempfile.TemporaryDirectory(prefix="comgra_modules_")
        started = time.perf_counter()
        path = record_watched(args.keep or Path(tmp.name), steps=args.steps)
        print(f"recorded {args.steps} steps in {time.perf_counter() - started:.1f} s: {path}")
    app = create_app(path, prefetch=False)
    port = _free_port()
    threading.Thread(
        target=lambda: app.run(host="127.0.0.1", port=port, debug=False, use_reloader=False),
        daemon=True,
    ).start()
    time.sleep(1.5)
    driver = _driver(width, height)
    errors = []
    try:
        started = time.perf_counter()
        driver.get(f"http://127.0.0.1:{port}/modules")
        _wait(driver, "#modules-graph .scatterlayer .point", timeout=60)
        shown = time.perf_counter() - started
        _settle(driver)
        started = time.perf_counter()
        _click(driver, args.open, settle=False)
        _wait(driver, ".modules-panel .heatmaplayer image, .modules-panel .hm image", timeout=30)
        panel = time.perf_counter() - started
        _settle(driver)
        if args.pick:
            _click(driver, args.pick)
            _wait(driver, ".modules-panel + .modules-panel", timeout=30)
            _settle(driver)
        if args.time_page:
            print(f"browser: module graph shown {shown:.2f} s after loading /modules, "
                  f"a histogram panel {panel:.2f} s after a click on a module")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if args.time_page:
            for name, row in app.comgra_parts.timings.summary().items():
                if name.startswith("modules."):
                    print(f"{name}: {row['count']} calls, median {row['median_ms']:.0f} ms, "
                          f"max {row['max_ms']:.0f} ms (server)")
    finally:
        driver.quit()
        if tmp is not None:
            tmp.cleanup()
    for error in errors:
        print("console error:", error.get("message"), file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
