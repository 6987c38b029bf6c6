"""The Flow page's response to the threshold slider (issue 18) on the flow between two
conv layers of realistic size, 16x32x32 -> 32x16x16 (benchmarks/benchmark_flow.py's
layers): the partial flow of the rows the 2^24-entry bound allows (1024 units of conv2,
64 MB), stored in a trial and shown as the Sankey.

    python benchmarks/benchmark_flow_gui.py [--rows 1024] [--repeat 5] [--max-units 64]
        [--browser]

Prints the median seconds of the Sankey's server callback (``flow.sankey`` in the app's
timings): the first show (grouping the memory-mapped flow into blocks, then cached) and
each later move of the slider (links above the threshold of the grouped flow, figure).
With --browser, also the time from a click on the slider's track to the new Sankey
drawn in headless Chromium (benchmarks/screenshot_pages.py's driver).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def record(root: Path, rows: int) -> Path:
    """A trial with the flow conv1 -> conv2 for the first ``rows`` units of conv2."""
    import torch
    from benchmark_flow import build

    from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
    from comgra_like.record.flow import write_flows
    from comgra_like.recorder import ComgraRecorder

    recorder = ComgraRecorder(
        comgra_root_path=root, group="bench", trial_id="conv",
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1),
        max_num_batch_size_to_record=1,
        calculate_svd_and_other_expensive_operations_of_parameters=False)
    layer = torch.nn.Linear(4, 1)
    recorder.track_module("model", layer)
    recorder.start_batch(0, 1)
    recorder.start_iteration()
    x = torch.randn(1, 4)
    recorder.register_tensor("input", x, is_input=True)
    loss = layer(x).sum()
    recorder.register_tensor("loss", loss, is_loss=True)
    loss.backward()
    recorder.record_current_gradients("main")
    recorder.finish_iteration()
    recorder.finish_batch()
    recorder.finalize()
    chain = build(1)
    write_flows(chain.flows(0, rows={"conv2": list(range(rows))}), root / "bench", "conv",
                training_step=0)
    chain.release()
    return root / "bench"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--max-units", type=int, default=64)
    p.add_argument("--browser", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from comgra_like.app import create_app
    from comgra_like.app.pages import flow as page

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        group = record(Path(tmp), args.rows)
        print(f"recorded the flow of {args.rows} rows in {time.perf_counter() - t0:.1f} s")
        app = create_app(group, prefetch=False)
        client = app.server.test_client()
        client.get("/")
        spec_key = next(k for k in app.callback_map if k.startswith(f"..{page.SANKEY}."))
        spec = app.callback_map[spec_key]
        infos = app.comgra_parts.data.group.read_flows("conv")
        chain = infos[0].chain_id
        selection = {"current": {"trial": "conv"}, "wanted": {"trial": "conv"}}

        def post(slider: float) -> float:
            values = {(page.CHAIN, "value"): chain, (page.THRESHOLD, "value"): slider,
                      (page.MAX_UNITS, "value"): args.max_units, ("selection", "data"): selection}
            body = {"output": spec_key,
                    "outputs": [{"id": o.split(".")[0], "property": o.split(".")[1]}
                                for o in spec_key.strip(".").split("...")],
                    "inputs": [{**i, "value": values.get((i["id"], i["property"]))}
                               for i in spec["inputs"]],
                    "state": [{**s, "value": values.get((s["id"], s["property"]))}
                              for s in spec["state"]],
                    "changedPropIds": [f"{page.THRESHOLD}.value"]}
            started = time.perf_counter()
            response = client.post("/_dash-update-component", json=body)
            assert response.status_code == 200, response.data[:500]
            return time.perf_counter() - started

        first = post(-2.0)
        moves = [post(s) for s in np.linspace(-4, 0, 4 * args.repeat + 1)[1:]]
        timings = app.comgra_parts.timings.summary()["flow.sankey"]
        print(f"server, first show (grouping {args.rows}x16x32x32 into blocks): "
              f"{first * 1000:.0f} ms")
        print(f"server, a slider move: median {statistics.median(moves) * 1000:.1f} ms, "
              f"max {max(moves) * 1000:.1f} ms over {len(moves)} moves "
              f"(callback alone: median {timings['median_ms']:.1f} ms)")
        if args.browser:
            browser_times(app, page, args.repeat)
    return 0


def browser_times(app, page, repeat: int) -> None:
    """Click the slider's track and wait for the Sankey's link count to change."""
    from screenshot_pages import _driver, _free_port
    from selenium.webdriver.common.action_chains import ActionChains
    from werkzeug.serving import make_server

    port = _free_port()
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = _driver(1280, 900)
    count = ("const gd = document.querySelector('#flow-sankey .js-plotly-plot');"
             "return gd && gd._fullData && gd._fullData[0] && gd._fullData[0].link ? "
             "gd._fullData[0].link.value.length + ':' + gd.layout.meta.links : null;")
    try:
        driver.get(f"http://127.0.0.1:{port}/flow")
        end = time.time() + 60
        while time.time() < end and not driver.execute_script(count):
            time.sleep(0.1)
        root = driver.find_element("css selector", f"#{page.THRESHOLD} .dash-slider-root")
        width = root.size["width"]
        times = []
        for k in range(2 * repeat):
            fraction = 0.9 if k % 2 == 0 else 0.3
            before = driver.execute_script(count)
            started = time.perf_counter()
            ActionChains(driver).move_to_element(root).move_by_offset(
                round(8 + (width - 16) * fraction - width / 2), 0).click().perform()
            while driver.execute_script(count) == before and time.perf_counter() - started < 30:
                time.sleep(0.005)
            times.append(time.perf_counter() - started)
        print(f"browser, click on the slider to the new Sankey drawn: median "
              f"{statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
              f"over {len(times)} moves")
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
