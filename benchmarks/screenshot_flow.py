"""A screenshot of the Flow page (issue 18) for the README: docs/screenshots/flow.png.

    python benchmarks/screenshot_flow.py [--out docs/screenshots/flow.png] [--size 1280x1000]

Records a small conv net (input 1x8x8 -> conv1 4x4x4, stride 2 -> conv2 4x4x4) with the
ComgraRecorder, stores its flows, and one edit of the input served the way
``comgra_like.probe.serve`` does (needs torch); the page shows the edit's Sankey next to
the one before it, the heatmaps with a unit of conv1 clicked, and the input editor.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from screenshot_pages import _driver, _free_port


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).parents[1] / "docs" / "screenshots"
                                        / "flow.png"))
    p.add_argument("--size", default="1280x1000")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    from comgra_like.app import create_app
    from selenium.webdriver.common.action_chains import ActionChains
    from werkzeug.serving import make_server

    with tempfile.TemporaryDirectory() as tmp:
        group = record(Path(tmp))
        app = create_app(group, refresh_seconds=1.0)
        port = _free_port()
        server = make_server("127.0.0.1", port, app.server, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        driver = _driver(width, height)
        try:
            driver.get(f"http://127.0.0.1:{port}/flow")
            ready = ("const b = document.querySelector('#flow-before');"
                     "const gd = document.querySelector('#flow-heatmaps .js-plotly-plot');"
                     "return !!(b && b.parentElement.style.display !== 'none' && gd"
                     " && gd._fullData && gd._fullData.length >= 3);")
            end = time.time() + 90
            while time.time() < end and not driver.execute_script(ready):
                time.sleep(0.2)
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
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(args.out)
            print(f"wrote {args.out}")
        finally:
            driver.quit()
            server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
