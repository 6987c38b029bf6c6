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
drawn in headless Chromium (benchmarks/_browser.py's driver).

With --on-demand, instead: a row of conv1 -> conv2 asked for from the page on a flow
stored without its matrix (input 8x32x32 -> conv1 16x32x32 -> conv2 32x16x16, both
pairs above the 2^24-entry bound), a random unit of conv2 each time, answered by ``probe.serve`` (a thread of this process, as a user's
process would run it), from the click on "compute this unit's row" to the row shown:
the button's callback (writes the request), the wait for the serving loop's poll, the
served function and the row (one backward pass) written, the wait for the page's next
tick, and the callbacks that show it (the lists at the tick, the heatmaps with the
outline, the Sankey). Waits are measured, so they depend on ``--poll`` and the page's
refresh interval (2 s by default, ``--refresh``).
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
    p.add_argument("--on-demand", action="store_true")
    p.add_argument("--verbose", action="store_true", help="--on-demand: every row's times")
    p.add_argument("--poll", type=float, default=0.5, help="serve's poll_seconds")
    p.add_argument("--refresh", type=float, default=2.0, help="the page's refresh seconds")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    if args.on_demand:
        return on_demand(args)
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


def callback_poster(app, client, output: str):
    """A function posting one call of the callback whose outputs include ``output``
    (``id.property``) with the given values; returns (seconds, response JSON)."""
    spec_key = next(k for k in app.callback_map if k == output or f"..{output}.." in k)
    spec = app.callback_map[spec_key]

    def post(values: dict, changed: str) -> tuple[float, dict]:
        def filled(deps: list) -> list:
            return [{**d, "value": values.get((d["id"], d["property"]))} for d in deps]

        outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]}
                   for o in spec_key.strip(".").split("...")]
        body = {"output": spec_key, "outputs": outputs if spec_key.startswith("..")
                else outputs[0],
                "inputs": filled(spec["inputs"]), "state": filled(spec["state"]),
                "changedPropIds": [changed]}
        started = time.perf_counter()
        response = client.post("/_dash-update-component", json=body)
        seconds = time.perf_counter() - started
        assert response.status_code in (200, 204), response.data[:500]
        return seconds, (response.get_json() if response.status_code == 200 else {})

    return post


def on_demand(args: argparse.Namespace) -> int:
    """Click to shown for rows asked for on a flow too large to store whole."""
    import torch
    from comgra_like.app import create_app
    from comgra_like.app.pages import flow as page

    from comgra_like.format import flow_requests as fr
    from comgra_like.probe import serve
    from comgra_like.record.flow import FlowChain, write_flows

    torch.manual_seed(0)
    conv1 = torch.nn.Conv2d(8, 16, 3, padding=1)
    conv2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def fn(x: torch.Tensor) -> FlowChain:
        chain = FlowChain()
        x = chain.node("input", x.float())
        a = chain.node("conv1", torch.relu(conv1(x)))
        b = chain.node("conv2", torch.relu(conv2(a)))
        chain.backward((b ** 2).mean())
        return chain

    with tempfile.TemporaryDirectory() as tmp:
        group = record(Path(tmp), 0)  # a trial; its flows are the ones below
        chain = fn(torch.randn(1, 8, 32, 32))
        write_flows(chain.flows(0), group, "conv", training_step=0)
        chain.release()
        app = create_app(group, prefetch=False, refresh_seconds=args.refresh)
        client = app.server.test_client()
        client.get("/")
        infos = [f for f in app.comgra_parts.data.group.read_flows("conv")
                 if f.source == "input"]
        assert infos[0].status == "too_large", infos[0].status
        chain_id = infos[0].chain_id
        selection = {"current": {"trial": "conv"}, "wanted": {"trial": "conv"}}
        ask = callback_poster(app, client, f"{page.ROW_ASKED}.data")
        lists = callback_poster(app, client, f"{page.LISTS_KEY}.data")
        heatmaps = callback_poster(app, client, f"{page.HEATMAPS}.figure")
        sankey = callback_poster(app, client, f"{page.SANKEY}.figure")
        served = threading.Thread(target=lambda: serve(
            fn, group=group, trial_id="conv", poll_seconds=args.poll,
            max_rows=args.repeat, timeout=3600), daemon=True)
        served.start()
        while not fr.serving(group, "conv").alive:
            time.sleep(0.05)
        base = {(page.CHAIN, "value"): chain_id, ("selection", "data"): selection,
                (page.THRESHOLD, "value"): -2.0, (page.MAX_UNITS, "value"): 16,
                (page.STEP, "value"): 0, (page.ORIGIN, "value"): page.RUN,
                (page.ROW_BUTTON, "n_clicks"): 1, ("tick", "n_intervals"): 0}
        _, shown = lists(base, "tick.n_intervals")
        key = shown.get("response", {}).get(page.LISTS_KEY, {}).get("data")
        rng = np.random.default_rng(0)
        rows = []
        for k in range(args.repeat):
            unit = int(rng.integers(0, 32 * 16 * 16))
            values = {**base, (page.UNIT, "data"): {"chain": chain_id, "node": "conv2",
                                                    "unit": unit}}
            clicked = time.perf_counter()
            t_ask, answer = ask(values, f"{page.ROW_BUTTON}.n_clicks")
            request_id = answer["response"][page.ROW_ASKED]["data"]["request_id"]
            while fr.read_request(group, "conv", request_id).status == "pending":
                time.sleep(0.005)
            answered = time.perf_counter()
            request = fr.read_request(group, "conv", request_id)
            assert request.status == "done", request.error
            # the page's next tick: at a uniformly random point of its interval
            tick = args.refresh * rng.random()
            time.sleep(tick)
            t_lists, shown = lists({**values, (page.LISTS_KEY, "data"): key},
                                   "tick.n_intervals")
            key = shown["response"][page.LISTS_KEY]["data"]
            values[(page.LISTS_KEY, "data")] = key
            t_heat, hm = heatmaps(values, f"{page.LISTS_KEY}.data")
            t_sankey, _ = sankey(values, f"{page.LISTS_KEY}.data")
            total = time.perf_counter() - clicked
            info = hm["response"][page.UNIT_INFO]["children"]
            assert "exchanges gradient with conv1" in info, info
            rows.append({"ask": t_ask, "wait_serve": answered - clicked - t_ask
                         - request.seconds, "served": request.seconds, "tick": tick,
                         "lists": t_lists, "heatmaps": t_heat, "sankey": t_sankey,
                         "total": total})
        served.join()
        if args.verbose:
            for r in rows:
                print("  " + ", ".join(f"{k} {v * 1000:.0f}" for k, v in r.items()))
        median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"row on demand, {args.repeat} units of conv2 (32x16x16) on conv1 16x32x32 -> "
              f"conv2, poll {args.poll} s, refresh {args.refresh} s; medians:")
        for k, v in median.items():
            print(f"  {k:>10}: {v * 1000:8.1f} ms")
        work = [r["total"] - r["wait_serve"] - r["tick"] for r in rows]
        print(f"  click to shown without the two waits: median "
              f"{statistics.median(work) * 1000:.0f} ms, max {max(work) * 1000:.0f} ms")
    return 0


def browser_times(app, page, repeat: int) -> None:
    """Click the slider's track and wait for the Sankey's link count to change."""
    from _browser import free_port, start_chromium
    from selenium.webdriver.common.action_chains import ActionChains
    from werkzeug.serving import make_server

    port = free_port()
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = start_chromium(1280, 900)
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
