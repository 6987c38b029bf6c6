"""A screenshot of the Flow page (issue 18) for the README: docs/screenshots/flow.png.

    python benchmarks/screenshot_flow.py [--out docs/screenshots/flow.png] [--size 1280x1000]
    python benchmarks/screenshot_flow.py --walkthrough [--out docs/screenshots/flow_rows.png]

Records a small conv net (input 1x8x8 -> conv1 4x4x4, stride 2 -> conv2 4x4x4) with the
ComgraRecorder, stores its flows, and one edit of the input served the way
``comgra_like.probe.serve`` does (needs torch); the page shows the edit's Sankey next to
the one before it, the heatmaps with a unit of conv1 clicked, and the input editor.

``--walkthrough``: the README's walk-through instead (scripts/flow_walkthrough.py run as
a process, conv1 -> conv2 stored without its matrix): a unit of conv2 clicked, its row
asked for with "compute this unit's row" and shown once the script has served it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _browser import chromium, save_screenshot, served


def record(root: Path) -> Path:
    import numpy as np
    import torch

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.probe import serve, submit_input
    from comgra_like.record.flow import FlowChain, write_flows
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"conv1": torch.nn.Conv2d(1, 4, 3, stride=2, padding=1),
                                 "conv2": torch.nn.Conv2d(4, 4, 3, padding=1)})
    recorder = ComgraRecorder(
        comgra_root_path=root, group="flow", trial_id="conv_net",
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    recorder.track_module("model", model)
    step = 0

    def run(x: torch.Tensor) -> FlowChain:
        nonlocal step
        chain = FlowChain()
        recorder.start_batch(step, 1, override__recording_is_active=True)
        recorder.start_iteration()
        x = chain.node("input", x.float())
        recorder.register_tensor("input", x, is_input=True)
        h = chain.node("conv1", torch.tanh(model["conv1"](x)))
        out = chain.node("conv2", model["conv2"](h))
        loss = (out ** 2).mean() + out.mean()
        recorder.register_tensor("loss", loss, is_loss=True)
        chain.backward(loss)
        recorder.record_current_gradients("main")
        recorder.finish_iteration()
        recorder.finish_batch()
        model.zero_grad()
        step += 1
        return chain

    group = root / "flow"
    image = np.zeros((1, 1, 8, 8), np.float32)
    image[0, 0, 2:6, 3] = 1.0  # a vertical bar
    base = run(torch.from_numpy(image))
    recorder.flush()
    write_flows(base.flows(0), group, "conv_net", training_step=0)
    base.release()
    edited = image.copy()
    edited[0, 0, 3, 2:6] = 1.0  # a cross
    submit_input(group, "conv_net", edited, training_step=0, note="bar -> cross")
    serve(run, group=group, trial_id="conv_net", max_probes=1, timeout=120)
    recorder.finalize()
    return group


CLICK_UNIT = """
const gd = document.querySelector('#flow-heatmaps .js-plotly-plot');
const t = gd._fullData[arguments[0]];
let row = -1, col = -1;
Array.from(t.customdata).forEach((r, i) => Array.from(r).forEach((v, j) => {
  if (Number(v) === arguments[1]) { row = i; col = j; } }));
const name = (a) => (a === 'x' || a === 'y' || !a) ? '' : a.slice(1);
const xa = gd._fullLayout['xaxis' + name(t.xaxis)];
const ya = gd._fullLayout['yaxis' + name(t.yaxis)];
const box = gd.getBoundingClientRect();
const drag = gd.querySelector('.nsewdrag[data-subplot="x' + name(t.xaxis) + 'y'
                              + name(t.yaxis) + '"]');
const r = drag.getBoundingClientRect();
return [drag, box.left + xa._offset + xa.l2p(col) - (r.left + r.width / 2),
        box.top + ya._offset + ya.l2p(row) - (r.top + r.height / 2)];
"""


def wait_for(driver, script: str, bound: float = 120) -> None:
    end = time.time() + bound
    while time.time() < end and not driver.execute_script(script):
        time.sleep(0.2)


def walkthrough(out: Path, width: int, height: int) -> None:
    """The walk-through's page: a unit of conv2 clicked and its row computed on demand."""
    from comgra_like.app import create_app
    from selenium.webdriver.common.action_chains import ActionChains

    from comgra_like.format import flow_requests as fr

    with tempfile.TemporaryDirectory() as tmp:
        group = Path(tmp) / "flow_demo"
        proc = subprocess.Popen([sys.executable, "-m", "comgra_like.scripts.flow_walkthrough",
                                 "--path", tmp, "--max-entries", "100000", "--max-rows", "1",
                                 "--timeout", "600"])
        try:
            end = time.time() + 600
            while time.time() < end and not fr.serving(group, "bars").alive:
                time.sleep(0.5)
            app = create_app(group, refresh_seconds=1.0)
            with served(app) as base, chromium(width, height) as driver:
                driver.get(f"{base}/flow")
                wait_for(driver, "const gd = document.querySelector('#flow-heatmaps "
                         ".js-plotly-plot'); return !!(gd && gd._fullData && "
                         "gd._fullData.length >= 4);")
                time.sleep(1)
                driver.execute_script("document.querySelector('#flow-heatmaps')"
                                      ".scrollIntoView({block: 'center'});")
                element, dx, dy = driver.execute_script(CLICK_UNIT, 2, 50)  # conv2 map 1, y 2, x 2
                chain = ActionChains(driver).move_to_element(element)
                chain.move_by_offset(round(dx) - 1, round(dy)).pause(0.1)
                chain.move_by_offset(1, 0).pause(0.3).click().perform()
                wait_for(driver, "const b = document.querySelector('#flow-row-box');"
                         "return b && b.style.display !== 'none';", 30)
                button = driver.find_element("css selector", "#flow-row-button")
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
                ActionChains(driver).move_to_element(button).pause(0.2).click().perform()
                wait_for(driver, "const s = document.querySelector('#flow-row-status');"
                         "return s && s.textContent.startsWith('Computed');", 120)
                time.sleep(2)
                driver.execute_script("document.querySelector('#flow-summary')"
                                      ".scrollIntoView({block: 'start'});")
                driver.execute_script("window.scrollBy(0, -70);")
                time.sleep(0.5)
                save_screenshot(driver, out)
        finally:
            proc.wait(timeout=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="default: docs/screenshots/flow.png, "
                   "or flow_rows.png with --walkthrough")
    p.add_argument("--size", default="1280x1000")
    p.add_argument("--walkthrough", action="store_true")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    shots = Path(__file__).parents[1] / "docs" / "screenshots"
    if args.walkthrough:
        walkthrough(args.out or shots / "flow_rows.png", width, height)
        return 0
    out = args.out or shots / "flow.png"
    from comgra_like.app import create_app
    from selenium.webdriver.common.action_chains import ActionChains

    with tempfile.TemporaryDirectory() as tmp:
        group = record(Path(tmp))
        app = create_app(group, refresh_seconds=1.0)
        with served(app) as base, chromium(width, height) as driver:
            driver.get(f"{base}/flow")
            wait_for(driver, "const b = document.querySelector('#flow-before');"
                     "const gd = document.querySelector('#flow-heatmaps .js-plotly-plot');"
                     "return !!(b && b.parentElement.style.display !== 'none' && gd"
                     " && gd._fullData && gd._fullData.length >= 3);", 90)
            # the edit, beside the flows before it; a higher threshold
            driver.find_element("css selector", "#flow-following").click()
            time.sleep(3)
            root = driver.find_element("css selector", "#flow-threshold .dash-slider-root")
            w = root.size["width"]
            ActionChains(driver).move_to_element(root).move_by_offset(
                round(8 + (w - 16) * 0.75 - w / 2), 0).click().perform()
            time.sleep(3)
            where = driver.execute_script(
                """
                const gd = document.querySelector('#flow-heatmaps .js-plotly-plot');
                const xa = gd._fullLayout.xaxis2, ya = gd._fullLayout.yaxis2;
                const box = gd.getBoundingClientRect();
                const drag = gd.querySelector('.nsewdrag[data-subplot="x2y2"]');
                const r = drag.getBoundingClientRect();
                return [drag, box.left + xa._offset + xa.l2p(1) - (r.left + r.width / 2),
                        box.top + ya._offset + ya.l2p(1) - (r.top + r.height / 2)];
                """)
            element, dx, dy = where
            chain = ActionChains(driver).move_to_element(element)
            chain.move_by_offset(round(dx) - 1, round(dy)).pause(0.1)
            chain.move_by_offset(1, 0).pause(0.3).click().perform()
            time.sleep(3)
            driver.execute_script(
                "for (const e of document.querySelectorAll('html, body, main, .page, "
                ".app-shell')) e.scrollTop = 0;")
            time.sleep(0.5)
            save_screenshot(driver, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
