"""Screenshots of the Findings, Modules, Metrics and Flow pages on the committed example
group (docs/EXAMPLES.md): docs/screenshots/example_<page>.png.

    python benchmarks/screenshot_example.py [--path example_runs/tutorial]
        [--out docs/screenshots] [--size 1280x800]

Findings as the GUI opens (every trial: the tutorial's bug named); then the trial
``trial_watched_classifier`` is chosen in the Tensors page's trial selector (the
selection lives in the browser session, so the other pages show that trial): Modules with
``fc1`` clicked (its histograms over time), Metrics, Flow. No torch needed.
Uses benchmarks/_browser.py's browser helpers. The Sankey's many translucent links make
a large PNG (~500 KB); the committed one was reduced to a 64-colour palette with Pillow
(not a dependency): ``Image.open(f).convert("RGB").quantize(64).save(f, optimize=True)`` (136 KB).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _browser import (
    chromium,
    console_errors,
    park_pointer,
    report_errors,
    save_screenshot,
    served,
    settle,
    wait_for_css,
)
from screenshot_modules import click_module

REPOSITORY = Path(__file__).resolve().parents[1]
WATCHED = "trial_watched_classifier"


def choose_trial(driver, base: str, trial: str) -> None:
    """Open the Tensors page and pick ``trial`` in its trial selector."""
    from comgra_like.app import ids

    driver.get(base + "/")
    wait_for_css(driver, f"#{ids.GRAPH_CONTAINER} .scatterlayer .point", timeout=60)
    settle(driver)
    dropdown = f"[id='{ids.dom_id(ids.selector('trial'))}']"
    driver.find_element("css selector", dropdown).click()
    wait_for_css(driver, ".dash-dropdown-option", timeout=10)
    options = driver.find_elements("css selector", ".dash-dropdown-option")
    chosen = [o for o in options if o.get_attribute("textContent").strip() == trial]
    if not chosen:
        raise SystemExit(f"no trial {trial!r} in the selector")
    chosen[0].click()
    settle(driver)
    time.sleep(1)


def wait_for_script(driver, script: str, bound: float = 60) -> None:
    end = time.time() + bound
    while time.time() < end:
        if driver.execute_script(script):
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for: {script[:80]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=REPOSITORY / "example_runs" / "tutorial")
    parser.add_argument("--out", type=Path, default=REPOSITORY / "docs" / "screenshots")
    parser.add_argument("--size", default="1280x800")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app

    app = create_app(args.path, prefetch=False)
    errors = []
    with served(app) as base, chromium(width, height) as driver:
        driver.get(base + "/findings")
        wait_for_css(driver, ".findings-list .finding-kind", timeout=60)
        settle(driver)
        save_screenshot(driver, args.out / "example_findings.png")

        choose_trial(driver, base, WATCHED)
        driver.get(base + "/modules")
        wait_for_css(driver, "#modules-graph .scatterlayer .point", timeout=60)
        settle(driver)
        click_module(driver, "fc1", wait=False)
        wait_for_css(driver, ".modules-panel .heatmaplayer image, .modules-panel .hm image",
                     timeout=30)
        settle(driver)
        park_pointer(driver)
        save_screenshot(driver, args.out / "example_modules.png")

        driver.get(base + "/metrics")
        wait_for_css(driver, ".metrics-card .scatterlayer .points path", timeout=60)
        settle(driver)
        save_screenshot(driver, args.out / "example_metrics.png")

        driver.get(base + "/flow")
        wait_for_script(driver, "const gd = document.querySelector('#flow-heatmaps "
                        ".js-plotly-plot'); return !!(gd && gd._fullData && "
                        "gd._fullData.length >= 3);")
        settle(driver)
        time.sleep(2)
        save_screenshot(driver, args.out / "example_flow.png")
        errors = console_errors(driver)
    return report_errors(errors)


if __name__ == "__main__":
    sys.exit(main())
