"""Screenshots of every GUI page with headless Chromium (for docs/screenshots/).

    python benchmarks/screenshot_pages.py [--path GROUP] [--out docs/screenshots]
        [--size 1280x800] [--visualization-file FILE] [--plugin-node helper_partial_sums]
    python benchmarks/screenshot_pages.py --faulty [--out docs/screenshots]

Without --path it uses the tutorial's group (``comgra-test-run``) if there is one, else
records a small one into a temporary folder first (needs torch). The GUI runs in this
process on a free local port; Selenium drives /usr/bin/chromium (override with
DASH_TEST_CHROMEPATH) and prints any browser console errors. Pages: those of the GUI's
page registry, Tensors with a node near the middle selected, Visualization with
``--plugin-node`` and its first sample selected, if that node exists.

``--faulty`` records a small training run whose loss takes the ``log`` of a value that
reaches 0 at step 7 (needs torch) and takes two pictures of it instead: the Findings page,
and the Tensors page opened from the first non-finite finding with the graph painted by
max |x| (the origin of the Inf outlined red).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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

from comgra_like import paths


def _record_example(root: Path) -> Path:
    from comgra_like.scripts.tutorial import run_tutorial_with_summaries

    path, _ = run_tutorial_with_summaries(
        root, group="screenshots", steps=150, recordings_per_type=3
    )
    return Path(path)


def _record_faulty(root: Path) -> Path:
    """A small network trained until a value it takes the log of reaches 0 (step 7)."""
    import torch
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    net = nn.ModuleDict({"layer_1": nn.Linear(4, 16), "layer_2": nn.Linear(16, 16),
                         "head": nn.Linear(16, 1)})
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    steps, zero_at = 12, 7
    rec = ComgraRecorder(root, "faulty", "log_of_zero",
                         DecisionMakerForRecordingsHardcoded(range(steps)),
                         max_num_batch_size_to_record=4)
    rec.track_module("net", net)
    for step in range(steps):
        x = torch.randn(16, 4)
        rec.start_batch(step, 16)
        rec.start_iteration()
        rec.register_tensor("input", x, is_input=True)
        h1 = torch.tanh(net["layer_1"](x))
        rec.register_tensor("hidden_1", h1)
        h2 = torch.tanh(net["layer_2"](h1))
        rec.register_tensor("hidden_2", h2)
        positive = torch.sigmoid(net["head"](h2)) * max(0.0, 1.0 - step / zero_at)
        rec.register_tensor("positive", positive)
        log_positive = torch.log(positive)
        rec.register_tensor("log_positive", log_positive)
        loss = -log_positive.mean()
        rec.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()
    return root / "faulty"


def _faulty_screenshots(driver, base: str, out: Path, width: int, height: int) -> None:
    """The Findings page of the faulty run, then its first NaN/Inf painted on the graph."""
    from comgra_like.app.pages import tensors

    driver.get(base + "/findings")
    wait_for_css(driver, ".finding-row[data-severity='error']", timeout=60)
    settle(driver)
    save_screenshot(driver, out / f"findings_faulty_{width}x{height}.png")
    driver.find_element("css selector", ".finding-row[data-severity='error']").click()
    wait_for_css(driver, "#dependency-graph-container .scatterlayer .point")
    settle(driver)
    driver.find_element("css selector", f"#{tensors.PAINT_STATISTIC}").click()
    time.sleep(0.5)
    next(o for o in driver.find_elements("css selector", ".dash-dropdown-option")
         if o.text == "max |x|").click()
    wait_for_css(driver, "#dependency-graph-container .colorbar")
    park_pointer(driver)
    settle(driver)
    save_screenshot(driver, out / f"painted_graph_{width}x{height}.png")


_FIND_NODE = """
const gd = document.querySelector('#dependency-graph-container .js-plotly-plot');
const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
const box = gd.getBoundingClientRect();
const cx = box.left + box.width / 2, cy = box.top + box.height / 2;
let target = null, bestDistance = 1e9;
for (const trace of gd.data) {  // node traces carry node names as customdata
  const names = trace.customdata || [];
  if (!trace.mode || !trace.mode.includes('markers')) continue;
  for (let i = 0; i < names.length; i++) {
    if (typeof names[i] !== 'string') continue;
    const x = box.left + xa._offset + xa.l2p(trace.x[i]);
    const y = box.top + ya._offset + ya.l2p(trace.y[i]);
    const d = arguments[0] === null ? Math.hypot(x - cx, y - cy)
      : (names[i] === arguments[0] ? 0 : 1e9);
    if (d < bestDistance) { target = [x, y]; bestDistance = d; }
  }
}
if (!target) return null;
let best = null;
bestDistance = 1e9;
for (const p of gd.querySelectorAll('.scatterlayer .points path')) {
  const r = p.getBoundingClientRect();
  const d = Math.hypot(r.left + r.width / 2 - target[0], r.top + r.height / 2 - target[1]);
  if (d < bestDistance) { best = p; bestDistance = d; }
}
return best;
"""


def _click_node(driver, name: str | None) -> bool:
    """Click graph node ``name`` (None: the node nearest the middle); False if absent."""
    from selenium.webdriver.common.action_chains import ActionChains

    point = driver.execute_script(_FIND_NODE, name)
    if point is None:
        return False
    ActionChains(driver).move_to_element(point).click().perform()
    park_pointer(driver)
    settle(driver)
    return True


def _next(driver, field: str, times: int) -> None:
    """Press a selector's ▶ up to ``times`` times (stops at the last option)."""
    from comgra_like.app import ids

    button = driver.find_element("css selector", f"[id='{ids.dom_id(ids.following(field))}']")
    for _ in range(times):
        if not button.is_enabled():
            break
        button.click()
        settle(driver, 5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--visualization-file", type=Path, default=None)
    parser.add_argument(
        "--plugin-node",
        default="helper_partial_sums",
        help="node to select for the Visualization screenshot",
    )
    parser.add_argument("--faulty", action="store_true",
                        help="the Findings page and a painted graph of a run with a NaN")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app
    from comgra_like.app.pages import PAGES

    tmp = None
    path = args.path
    if args.faulty:
        tmp = tempfile.TemporaryDirectory(prefix="comgra_screens_")
        path = _record_faulty(Path(tmp.name))
    if path is None and paths.default_test_run_path().exists():
        path = paths.default_test_run_path()
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="comgra_screens_")
        print("recording an example group (about a minute) …", flush=True)
        path = _record_example(Path(tmp.name))
    plugin = args.visualization_file or paths.example_visualization_path()
    plugin = plugin if plugin.exists() else None
    app = create_app(path, visualization_file=plugin)
    pages = [(p.name.lower(), p.path) for p in PAGES if plugin is not None or not p.needs_plugin]
    args.out.mkdir(parents=True, exist_ok=True)
    errors = []
    try:
        with served(app) as base, chromium(width, height) as driver:
            if args.faulty:
                _faulty_screenshots(driver, base, args.out, width, height)
                pages = []
            for name, route in pages:
                if name == "visualization":
                    # the selection lives in the tab: pick the plugin's node on the Tensors page
                    driver.get(base + "/")
                    wait_for_css(driver, "#dependency-graph-container .scatterlayer .point")
                    settle(driver)
                    # a step with several iterations (the tutorial's 05_iterations), its last
                    _next(driver, "type_of_execution", 5)
                    _next(driver, "iteration", 50)
                    if _click_node(driver, args.plugin_node):
                        _next(driver, "aggregation", 3)  # mean, abs max, std, then Sample 0
                driver.get(base + route)
                wait_for_css(driver, ".page > *")
                if name == "tensors":
                    wait_for_css(driver, "#dependency-graph-container .scatterlayer .point")
                    settle(driver)
                    _click_node(driver, None)
                settle(driver)
                save_screenshot(driver, args.out / f"{name}_{width}x{height}.png")
                errors += console_errors(driver)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return report_errors(errors)


if __name__ == "__main__":
    sys.exit(main())
