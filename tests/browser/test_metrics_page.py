"""The Metrics page in the browser (issue 16) on a real recording: a small conv net
trained under ``comgra_like.watch`` (tests/app/watched_runs.py), with per-module metrics
in its trial's metrics table. The page draws one figure per metric with a line per
module and markers exactly on the computed steps, a second trial overlaid, a band when
a window is set, the spectrum of a vector metric, new points on refresh, and a click on
a point opens the Modules page (and the Tensors page) at that step and module."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from comgra_like.app import create_app
from comgra_like.app.pages import metrics as page
from selenium.webdriver.common.action_chains import ActionChains

from comgra_like.format.layout import METRICS, TrialLayout
from comgra_like.format.schema import METRICS_SCHEMA
from comgra_like.writer.shards import ShardBuffer
from tests.browser.test_gui import GRAPH, text_of, wait_for_header

pytestmark = pytest.mark.browser

STEPS = 10
#: (metric, module, computed steps): linear(3, 0) and every step
SCHEDULE = [("WeightNorm", "model.stem", range(0, STEPS, 3)),
            ("WeightNorm", "model.block.conv1", range(0, STEPS, 3)),
            ("InputSndNorm", "model.stem", range(STEPS)),
            ("InputCovSpectrum", "model.block.conv1", range(0, STEPS, 4))]


def metric_rows(trial: str, triples, scale: float) -> pa.Table:
    plain = pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                       for f in METRICS_SCHEMA])
    rows = []
    for metric, module, steps in triples:
        for s in steps:
            vector = [scale * (s + 1) / (k + 1) for k in range(4)] if "Spectrum" in metric else None
            value = vector[0] if vector else scale * (1 + s + len(module))
            rows.append({"trial_id": trial, "training_step": s, "type_of_execution":
                         "main_execution_type", "module": module, "module_class": "Conv2d",
                         "metric": metric, "backward_pass": 0, "value": value,
                         "vector": vector, "time": float(s)})
    return pa.Table.from_pylist(rows, schema=plain).cast(METRICS_SCHEMA)


def write_metrics(group: Path, trial: str, triples, scale: float = 1.0) -> None:
    """The metrics shards of a trial, through the writer's shard writer (what the writer
    process does with the rows it computes)."""
    shards = ShardBuffer(TrialLayout.of(group, trial).root)
    shards.add({METRICS: metric_rows(trial, triples, scale)})
    shards.write()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from tests.app import watched_runs

    root = tmp_path_factory.mktemp("metrics_browser")
    watched_runs.record(root, trial="trial_a", steps=STEPS, seed=0)
    group = watched_runs.record(root, trial="trial_b", steps=STEPS, seed=1)
    write_metrics(group, "trial_a", SCHEDULE)
    write_metrics(group, "trial_b", SCHEDULE[:2], scale=2.0)
    return group


def wait_until(condition, timeout: float = 15, what: str = "condition"):
    end = time.time() + timeout
    while time.time() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def traces(dash_duo, metric: str, kind: str = "graph") -> list[dict]:
    """``{name, x, mode, fill}`` of a metric's figure as drawn."""
    return dash_duo.driver.execute_script(
        """
        const card = document.querySelector(`.metrics-card[data-metric="${arguments[0]}"]`);
        if (!card) return [];
        const gds = card.querySelectorAll('.js-plotly-plot');
        const gd = gds[arguments[1] === 'graph' ? 0 : 1];
        if (!gd || !gd.data) return [];
        return gd.data.map((t) => ({name: t.name || '', x: Array.from(t.x || []),
                                    y: Array.from(t.y || []), mode: t.mode || '',
                                    fill: t.fill || ''}));
        """,
        metric, kind,
    )


def point_element(dash_duo, metric: str, name: str, index: int):
    """The drawn marker of point ``index`` of the line ``name`` in a metric's figure."""
    return dash_duo.driver.execute_script(
        """
        const card = document.querySelector(`.metrics-card[data-metric="${arguments[0]}"]`);
        const gd = card.querySelector('.js-plotly-plot');
        // the line of trial_a (named by trial only while another trial is overlaid)
        const i = gd.data.findIndex((t) => t.name === arguments[1]
                                           || t.name === arguments[1] + ' · trial_a');
        const layer = gd.querySelectorAll('.scatterlayer .trace')[i];
        return layer.querySelectorAll('.points path')[arguments[2]];
        """,
        metric, name, index,
    )


def test_metrics_page_on_a_real_recording(dash_duo, recorded):
    app = create_app(recorded, refresh_seconds=0.5)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-metrics").click()

    # one figure per metric, a line per module, markers exactly on the computed steps
    dash_duo.wait_for_element(".metrics-card", timeout=20)
    shown = wait_until(lambda: [c.get_attribute("data-metric")
                                for c in dash_duo.find_elements(".metrics-card")],
                       what="the metric cards")
    assert set(shown) == {"WeightNorm", "InputSndNorm", "InputCovSpectrum"}
    lines = wait_until(lambda: [t for t in traces(dash_duo, "WeightNorm") if t["name"]],
                       what="the WeightNorm lines")
    by_name = {t["name"]: t for t in lines}
    assert set(by_name) == {"model.stem", "model.block.conv1"}
    assert by_name["model.stem"]["x"] == [0, 3, 6, 9]
    assert "markers" in by_name["model.stem"]["mode"]
    drawn = dash_duo.driver.execute_script(
        """const c = document.querySelector('.metrics-card[data-metric="WeightNorm"]');
           return c.querySelectorAll('.scatterlayer .points path').length;""")
    assert drawn == 8  # 4 computed steps x 2 modules, nothing in between

    # a second trial overlaid: its lines named by trial
    dash_duo.select_dcc_dropdown(f"#{page.OVERLAY}", value="trial_b")
    wait_until(lambda: any(t["name"] == "model.stem · trial_b"
                           for t in traces(dash_duo, "WeightNorm")), what="trial_b overlaid")
    overlaid = {t["name"]: t for t in traces(dash_duo, "WeightNorm")}
    assert overlaid["model.stem · trial_b"]["y"] == [2 * (1 + s + len("model.stem"))
                                                    for s in (0, 3, 6, 9)]

    # a window: the mean per window with a band, the computed points kept
    window = dash_duo.find_element(f"#{page.WINDOW}")
    window.clear()
    window.send_keys("5\n")
    wait_until(lambda: any(t["fill"] == "toself" for t in traces(dash_duo, "InputSndNorm")),
               what="a band")
    mean = next(t for t in traces(dash_duo, "InputSndNorm") if t["name"] == "model.stem")
    values = [1 + s + len("model.stem") for s in range(STEPS)]
    assert mean["y"] == pytest.approx([np.mean(values[:5]), np.mean(values[5:])])

    # the spectrum of the vector metric: the latest vector until a step is hovered
    spectrum = wait_until(lambda: [t for t in traces(dash_duo, "InputCovSpectrum", "spectrum")
                                   if t["name"]], what="the spectrum")
    assert spectrum[0]["y"] == pytest.approx([9 / (k + 1) for k in range(4)])  # step 8
    window = dash_duo.find_element(f"#{page.WINDOW}")
    window.clear()
    window.send_keys("1\n")
    wait_until(lambda: not any(t["fill"] for t in traces(dash_duo, "InputSndNorm")),
               what="the band gone")
    point = point_element(dash_duo, "InputCovSpectrum", "model.block.conv1", 1)  # step 4
    ActionChains(dash_duo.driver).move_to_element(point).perform()
    wait_until(lambda: [t for t in traces(dash_duo, "InputCovSpectrum", "spectrum")
                        if t["y"] and abs(t["y"][0] - 5.0) < 1e-9], what="step 4's spectrum")

    # live: new points appear on refresh
    write_metrics(recorded, "trial_a", [("InputSndNorm", "model.stem", [STEPS, STEPS + 1])])
    wait_until(lambda: STEPS + 1 in next(t for t in traces(dash_duo, "InputSndNorm")
                                         if t["name"] == "model.stem")["x"],
               what="the new points", timeout=20)

    # a click on a point opens the Modules page at that step and module
    point = point_element(dash_duo, "WeightNorm", "model.block.conv1", 2)  # step 6
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    wait_until(lambda: "/modules" in dash_duo.driver.current_url, what="the Modules page")
    wait_until(lambda: "structure of step 6 " in text_of(dash_duo, "#modules-info"),
               what="the Modules page at step 6")
    wait_until(lambda: text_of(dash_duo, ".modules-panel strong") == "model.block.conv1",
               what="the module's histograms")

    # and with the Tensors page chosen, there: the module's output at that step
    dash_duo.find_element("#nav-metrics").click()
    dash_duo.wait_for_element(f"#{page.TARGET} input[value='/']", timeout=10).click()
    wait_until(lambda: [t for t in traces(dash_duo, "WeightNorm") if t["name"]],
               what="the WeightNorm lines again")
    time.sleep(0.5)  # the figure drawn before the click lands on it
    point = point_element(dash_duo, "WeightNorm", "model.stem", 1)  # step 3
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    wait_for_header(dash_duo, "node", "model.stem")
    wait_for_header(dash_duo, "step", "3")
    wait_for_header(dash_duo, "role", "output 0")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def test_a_recording_without_metrics_says_how_to_record_them(dash_duo, tmp_path):
    pytest.importorskip("torch")
    from tests.app import watched_runs

    group = watched_runs.record(tmp_path, trial="plain", steps=2, seed=0)
    dash_duo.start_server(create_app(group, refresh_seconds=0.5))
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-metrics").click()
    dash_duo.wait_for_element(".metrics-empty", timeout=20)
    text = text_of(dash_duo, ".metrics-empty")
    assert "No metrics recorded in plain" in text and "watch(model, metrics=" in text
    assert not dash_duo.find_elements(".metrics-card")

    # live: metrics that arrive replace the message with their figures
    write_metrics(group, "plain", SCHEDULE[:1])
    dash_duo.wait_for_element(".metrics-card[data-metric='WeightNorm'] .scatterlayer .points path",
                              timeout=20)
    assert not dash_duo.find_elements(".metrics-empty")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()
