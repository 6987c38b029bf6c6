"""The Metrics page in the browser (issue 16) on real recordings: a small conv net
(tests/app/watched_runs.py) trained under ``comgra_like.watch(model, metrics=...)`` with
a recorder that records every step. The page draws one figure per metric with a line per
module and markers exactly on the computed steps, a second trial overlaid, a band when a
window is set, the spectrum of a vector metric at the hovered step, new points as the
training goes on, and a click on a point opens the Modules page (and the Tensors page)
at that step and module. The numbers drawn are compared with ``Group.read_metrics``."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from comgra_like.app import create_app, ids
from comgra_like.app.pages import metrics as page
from comgra_like.app.pages import modules as modules_page
from comgra_like.app.pages import notes as notes_page
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from comgra_like.format.layout import METRICS, TrialLayout
from comgra_like.format.schema import METRICS_SCHEMA
from comgra_like.query import open_group
from comgra_like.writer.shards import ShardBuffer
from tests.browser.helpers import wait_until
from tests.browser.test_gui import GRAPH, text_of, wait_for_header

pytestmark = pytest.mark.browser

STEPS = 10
#: Taiyi's config format: every convolution's weight norm on linear(3, 0), the stem's
#: input norm every step, the last linear layer's input covariance spectrum on linear(4, 0)
CONFIG = {"Conv2d": [["WeightNorm", "linear(3, 0)"]], "stem": ["InputSndNorm"],
          "head.2": [["InputCovSpectrum", "linear(4, 0)"]]}
CONVS = ["model.stem", "model.block.conv1", "model.block.conv2"]


class MetricsRun:
    """The watched net trained with metrics, one step at a time, every step recorded."""

    def __init__(self, root: Path, trial: str, seed: int):
        import torch

        import comgra_like
        from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
        from comgra_like.recorder import ComgraRecorder
        from tests.app import watched_runs

        torch.manual_seed(seed)
        self.torch = torch
        self.model = watched_runs.build_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.recorder = ComgraRecorder(
            comgra_root_path=root, group=watched_runs.GROUP, trial_id=trial,
            decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1))
        self.handle = comgra_like.watch(self.model, log_freq=1, recorder=self.recorder,
                                        verbose=False, metrics=CONFIG)
        self.step = 0
        self.group = Path(root) / watched_runs.GROUP

    def run(self, steps: int) -> MetricsRun:
        torch, recorder = self.torch, self.recorder
        for _ in range(steps):
            recorder.start_batch(self.step, 8)
            recorder.start_iteration()
            x = torch.randn(8, 3, 8, 8)
            y = torch.randint(0, 10, (8,))
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            recorder.register_tensor("loss", loss, is_loss=True)
            self.optimizer.zero_grad()
            loss.backward()
            recorder.record_current_gradients("loss")
            self.optimizer.step()
            recorder.finish_iteration()
            recorder.finish_batch()
            self.step += 1
        recorder.flush()
        return self

    def finish(self) -> None:
        self.handle.unwatch()
        self.recorder.finalize()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("metrics_browser")
    b = MetricsRun(root, "trial_b", seed=1).run(STEPS)
    b.finish()
    # stays open: the page is live; one step more, so that the metrics of the last of
    # STEPS (sent when that step ends, at the next forward) are stored
    a = MetricsRun(root, "trial_a", seed=0).run(STEPS + 1)
    yield a
    a.finish()


def read(group: Path, trial: str, metric: str, module: str):
    frame = open_group(group).read_metrics(trial, module=module, metric=metric)
    return frame


def metric_rows(trial: str, triples) -> pa.Table:
    plain = pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                       for f in METRICS_SCHEMA])
    rows = [{"trial_id": trial, "training_step": s, "type_of_execution": "main_execution_type",
             "module": module, "module_class": "Conv2d", "metric": metric, "backward_pass": 0,
             "value": 1.0 + s, "vector": None, "wall_time": float(s)}
            for metric, module, steps in triples for s in steps]
    return pa.Table.from_pylist(rows, schema=plain).cast(METRICS_SCHEMA)


def write_metrics(group: Path, trial: str, triples) -> None:
    """Metrics shards of a trial through the writer's shard writer (what the writer
    process does with the rows it computes)."""
    shards = ShardBuffer(TrialLayout.of(group, trial).root)
    shards.add({METRICS: metric_rows(trial, triples)})
    shards.write()


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


def point_element(dash_duo, metric: str, name: str, index: int, trial: str):
    """The drawn marker of point ``index`` of the line ``name`` in a metric's figure."""
    return dash_duo.driver.execute_script(
        """
        const card = document.querySelector(`.metrics-card[data-metric="${arguments[0]}"]`);
        const gd = card.querySelector('.js-plotly-plot');
        // the line of the trial (named by trial only while another trial is overlaid)
        const i = gd.data.findIndex((t) => t.name === arguments[1]
                                           || t.name === arguments[1] + ' · ' + arguments[3]);
        const layer = gd.querySelectorAll('.scatterlayer .trace')[i];
        return layer.querySelectorAll('.points path')[arguments[2]];
        """,
        metric, name, index, trial,
    )


def test_metrics_page_on_a_real_recording(dash_duo, runs):
    group = runs.group
    app = create_app(group, refresh_seconds=0.5)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-metrics").click()

    # one figure per metric, a line per module, markers exactly on the computed steps
    dash_duo.wait_for_element(".metrics-card", timeout=30)
    shown = wait_until(lambda: [c.get_attribute("data-metric")
                                for c in dash_duo.find_elements(".metrics-card")],
                       what="the metric cards")
    assert set(shown) == {"WeightNorm", "InputSndNorm", "InputCovSpectrum"}
    trial = wait_until(lambda: _main_trial(dash_duo), what="the drawn trial")
    lines = wait_until(lambda: [t for t in traces(dash_duo, "WeightNorm") if t["name"]],
                       what="the WeightNorm lines")
    by_name = {t["name"]: t for t in lines}
    assert set(by_name) == set(CONVS)
    for module in CONVS:
        assert by_name[module]["x"][:4] == [0, 3, 6, 9]  # linear(3, 0)
        assert "markers" in by_name[module]["mode"]
        stored = read(group, trial, "WeightNorm", module)
        assert by_name[module]["y"] == pytest.approx(stored["value"].tolist())
    drawn = dash_duo.driver.execute_script(
        """const c = document.querySelector('.metrics-card[data-metric="WeightNorm"]');
           return c.querySelectorAll('.scatterlayer .points path').length;""")
    assert drawn == 3 * len(by_name["model.stem"]["x"])  # nothing between computed steps

    # a second trial overlaid: its lines named by trial, its own numbers
    other = "trial_b" if trial == "trial_a" else "trial_a"
    dash_duo.select_dcc_dropdown(f"#{page.OVERLAY}", value=other)
    wait_until(lambda: any(t["name"] == f"model.stem · {other}"
                           for t in traces(dash_duo, "WeightNorm")), what="the overlay")
    overlaid = {t["name"]: t for t in traces(dash_duo, "WeightNorm")}
    assert overlaid[f"model.stem · {other}"]["y"] == pytest.approx(
        read(group, other, "WeightNorm", "model.stem")["value"].tolist())
    assert overlaid[f"model.stem · {other}"]["y"] != pytest.approx(
        overlaid[f"model.stem · {trial}"]["y"])

    # a window: the mean per window with a band, the computed points kept
    window = dash_duo.find_element(f"#{page.WINDOW}")
    window.clear()
    window.send_keys("5\n")
    wait_until(lambda: any(t["fill"] == "toself" for t in traces(dash_duo, "InputSndNorm")),
               what="a band")
    mean = next(t for t in traces(dash_duo, "InputSndNorm")
                if t["name"] == f"model.stem · {trial}")
    values = read(group, trial, "InputSndNorm", "model.stem")
    values = values[values["training_step"] < STEPS]["value"].to_numpy()
    assert mean["y"][:2] == pytest.approx([np.mean(values[:5]), np.mean(values[5:])])

    # the spectrum of the vector metric: the latest vector until a step is hovered
    spectra = read(group, trial, "InputCovSpectrum", "model.head.2")
    assert spectra["training_step"].tolist()[:3] == [0, 4, 8]
    window = dash_duo.find_element(f"#{page.WINDOW}")
    window.clear()
    window.send_keys("1\n")
    wait_until(lambda: not any(t["fill"] for t in traces(dash_duo, "InputSndNorm")),
               what="the band gone")
    point = point_element(dash_duo, "InputCovSpectrum", "model.head.2", 1, trial)  # step 4
    ActionChains(dash_duo.driver).move_to_element(point).perform()
    at_4 = spectra[spectra["training_step"] == 4]["vector"].iloc[0]
    wait_until(lambda: [t for t in traces(dash_duo, "InputCovSpectrum", "spectrum")
                        if t["y"] == pytest.approx(at_4.tolist())], what="step 4's spectrum")

    # live: the training goes on, new points appear on refresh
    runs.run(2)
    wait_until(lambda: STEPS + 1 in next(t for t in traces(dash_duo, "InputSndNorm")
                                         if t["name"] == f"model.stem · {trial}")["x"],
               what="the new points", timeout=30)

    # a click on a point opens the Modules page at that step and module
    point = point_element(dash_duo, "WeightNorm", "model.block.conv1", 2, trial)  # step 6
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
    point = point_element(dash_duo, "WeightNorm", "model.stem", 1, trial)  # step 3
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    wait_for_header(dash_duo, "node", "model.stem")
    wait_for_header(dash_duo, "step", "3")
    wait_for_header(dash_duo, "role", "output 0")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


def _main_trial(dash_duo) -> str:
    """The trial the page draws first (the selection's)."""
    return dash_duo.driver.execute_script(
        """const c = document.querySelector('.metrics-card[data-metric="WeightNorm"]');
           const gd = c && c.querySelector('.js-plotly-plot');
           return gd && gd.data && gd.data[0].meta ? gd.data[0].meta[0] : '';""")


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
    write_metrics(group, "plain", [("WeightNorm", "model.stem", range(0, STEPS, 3))])
    dash_duo.wait_for_element(".metrics-card[data-metric='WeightNorm'] .scatterlayer .points path",
                              timeout=20)
    assert not dash_duo.find_elements(".metrics-empty")
    assert dash_duo.get_logs() == [], dash_duo.get_logs()


@pytest.fixture(scope="module")
def ranked(tmp_path_factory) -> tuple[Path, str]:
    """A real 2-rank gloo job under watch(ddp_model, metrics=...)
    (tests/distributed/watch_child.py): each rank's metrics and a note of each rank."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    from tests.distributed.test_ddp import free_port
    from tests.distributed.test_ranks_watch import CHILD

    root = tmp_path_factory.mktemp("ranked")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(CHILD), str(root), str(r), "2", port],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()
    return root / "g", (root / "raw" / "trial-0.txt").read_text()


def test_the_rank_selector_shows_each_ranks_metrics_and_notes(dash_duo, ranked):
    group, trial = ranked
    g = open_group(group)
    module = "model.module.first"
    values = {r: g.read_metrics(trial, module=module, metric="InputSndNorm", rank=r)
              for r in (0, 1)}
    assert values[0]["value"].tolist() != pytest.approx(values[1]["value"].tolist())
    app = create_app(group, refresh_seconds=0.5)
    dash_duo.start_server(app)
    dash_duo.wait_for_element(f"{GRAPH} .scatterlayer .point", timeout=20)
    dash_duo.find_element("#nav-metrics").click()
    dash_duo.wait_for_element(".metrics-card", timeout=30)

    def line(name: str) -> list | None:
        found = [t for t in traces(dash_duo, "InputSndNorm") if t["name"] == name]
        return found[0]["y"] if found else None

    # the default: every rank side by side, a line per rank
    for r in (0, 1):
        y = wait_until(lambda r=r: line(f"{module} · rank {r}"), what=f"rank {r}'s line")
        assert y == pytest.approx(values[r]["value"].tolist())
    assert dash_duo.find_element(f"#{page.RANK_BOX}").is_displayed()
    # one rank at a time: that rank's numbers, then the other's
    for r in (1, 0):
        dash_duo.select_dcc_dropdown(f"#{page.RANK}", value=f"rank {r}")
        wait_until(lambda: line(f"{module} · rank 0") is None and line(module),
                   what=f"rank {r} alone")
        y = wait_until(lambda r=r: line(module) if line(module) == pytest.approx(
            values[r]["value"].tolist()) else None, what=f"rank {r}'s values")
        assert y == pytest.approx(values[r]["value"].tolist())

    # the Modules page: a panel's histograms of one rank, the ranks side by side, merged
    dash_duo.find_element("#nav-modules").click()
    dash_duo.wait_for_element(f"#{modules_page.RANK_BOX}", timeout=15)
    wait_until(lambda: dash_duo.find_element(f"#{modules_page.RANK_BOX}").is_displayed(),
               what="the Modules page's rank selector")
    dash_duo.select_dcc_dropdown(f"#{modules_page.PICK}", value=module)
    ActionChains(dash_duo.driver).send_keys(Keys.ESCAPE).perform()  # close its menu
    dash_duo.wait_for_element(".modules-panel .js-plotly-plot", timeout=15)
    wait_until(lambda: panel_names(dash_duo) == [trial], what="rank 0's histograms")
    dash_duo.select_dcc_dropdown(f"#{modules_page.RANK}", value="all ranks side by side")
    wait_until(lambda: panel_names(dash_duo) == [f"{trial} · rank 0", f"{trial} · rank 1"],
               what="a grid per rank")
    dash_duo.select_dcc_dropdown(f"#{modules_page.RANK}", value="all ranks merged")
    wait_until(lambda: "all ranks merged (re-binned)" in text_of(
        dash_duo, ".modules-panel .gtitle"), what="the merged histograms")

    # the notes say their rank and filter by it
    dash_duo.find_element("#nav-notes").click()
    dash_duo.wait_for_contains_text(f"#{ids.NOTES_LIST}", "2 notes")
    assert "rank 1" in text_of(dash_duo, f"#{ids.NOTES_LIST}")
    dash_duo.select_dcc_dropdown(f"#{notes_page.RANK}", value="rank 1")
    dash_duo.wait_for_contains_text(f"#{ids.NOTES_LIST}", "1 notes")
    assert "rank 1 saw loss" in text_of(dash_duo, f"#{ids.NOTES_LIST}")
    assert "rank 0 saw loss" not in text_of(dash_duo, f"#{ids.NOTES_LIST}")
    logs = dash_duo.get_logs()
    assert logs == [], [entry["message"] for entry in logs]


def panel_names(dash_duo) -> list[str]:
    """The names of the first histogram panel's heatmaps as drawn."""
    return dash_duo.driver.execute_script(
        """
        const gd = document.querySelector('.modules-panel .js-plotly-plot');
        return gd && gd.data ? gd.data.filter((t) => t.type === 'heatmap')
                                      .map((t) => t.name || '') : [];
        """)
