"""What was recorded shows in the browser (issue 14, items 7 and 8): the dependency graph
of comgra's tutorial has a distinct label for every node, and a script that names every
batch's type of execution ``batch_<i>`` gets a visible KPI curve and points for a KPI
recorded once. On the committed tutorial run plus a trial recorded here by the real
recorder, in the same group."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from comgra_like.app import ids

from tests.browser.helpers import start_app, wait_until
from tests.browser.test_gui import css

pytestmark = pytest.mark.browser

EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
TUTORIAL_TRIAL = "trial_bugged_original_version"
BATCHES = 30


def record_batch_script(root: Path, group: str, trial_id: str) -> None:
    """A comgra script as users write them: a local recorder, a new type of execution on
    every batch, a KPI without a name, and a KPI recorded only once."""
    import torch
    from torch import nn

    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=trial_id,
        decision_maker_for_recordings=DecisionMakerForRecordingsHardcoded([0]),
    )
    recorder.track_module("net", model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(BATCHES):
        recorder.start_batch(i, 8, type_of_execution=f"batch_{i}")
        recorder.start_iteration()
        x = torch.randn(8, 4)
        recorder.register_tensor("x", x, is_input=True)
        out = model(x)
        recorder.register_tensor("out", out)
        loss = ((out - x.sum(1, keepdim=True)) ** 2).mean()
        recorder.register_tensor("loss", loss, is_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recorder.record_current_gradients("main")
        recorder.record_kpi_in_graph("loss", "", loss.item(),
                                     record_even_if_recording_is_inactive=True)
        if i == BATCHES - 1:
            recorder.record_kpi_in_graph("final", "loss", loss.item(),
                                         record_even_if_recording_is_inactive=True)
        recorder.finish_iteration()
        recorder.finish_batch()
    recorder.finalize()


# The node traces of the dependency graph (customdata: node names) and, per node, the
# lines its rendered label has and their boxes on screen.
_GRAPH_LABELS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data) return null;
const labels = {};
for (const trace of gd.data) {
  const names = trace.customdata || [];
  if (!trace.text || !names.length || typeof names[0] !== 'string') continue;
  names.forEach((name, i) => { labels[name] = trace.text[i]; });
}
const boxes = [];
for (const text of gd.querySelectorAll('.scatterlayer .textpoint text')) {
  const r = text.getBoundingClientRect();
  const lines = Array.from(text.querySelectorAll('tspan.line')).map(t => t.textContent);
  boxes.push({text: lines.length ? lines : [text.textContent],
              left: r.left, right: r.right, top: r.top, bottom: r.bottom});
}
return {labels: labels, boxes: boxes};
"""

_KPI_CHARTS = """
const charts = {};
for (const gd of document.querySelectorAll('#' + arguments[0] + ' .js-plotly-plot')) {
  const title = gd.querySelector('.gtitle');
  charts[title ? title.textContent : ''] = {
    traces: gd.data.map(t => ({name: t.name, mode: t.mode, n: t.x.length})),
    legend: Array.from(gd.querySelectorAll('.legendtext')).map(e => e.textContent),
    points: gd.querySelectorAll('.scatterlayer .points path').length,
  };
}
return charts;
"""


def test_graph_labels_are_distinct_and_kpis_with_few_points_are_visible(dash_duo, tmp_path):
    pytest.importorskip("torch")
    group = tmp_path / "tutorial"
    shutil.copytree(EXAMPLE_RUN, group)
    record_batch_script(tmp_path, "tutorial", "batch_script")

    # the page's design size (the graph's labels are fitted to it), as the screenshots
    set_viewport(dash_duo.driver, 1280, 800)
    start_app(dash_duo, group)
    dash_duo.select_dcc_dropdown(css(ids.selector("trial")), value=TUTORIAL_TRIAL)
    dash_duo.wait_for_element(f"#{ids.GRAPH_CONTAINER} .scatterlayer .textpoint", timeout=20)

    # item 8: every node of the tutorial's graph has its own label, whole, on lines
    def graph_ready():
        found = dash_duo.driver.execute_script(_GRAPH_LABELS, ids.GRAPH_CONTAINER)
        return found if found and len(found["boxes"]) == len(found["labels"]) > 10 else None

    found = wait_until(graph_ready, what="the graph's labels")
    labels, boxes = found["labels"], found["boxes"]
    assert len(set(labels.values())) == len(labels)
    shown = {" ".join(box["text"]) for box in boxes}
    assert len(shown) == len(boxes)  # what the browser drew: as many texts as nodes
    for module in ("mem", "out", "pre"):
        assert f"subnet_{module}__ hidden_state" in shown  # two lines, not "subnet…n_state"
    assert "subnet_mem. layer_in.weight" in shown
    assert not any("…" in text for text in shown)
    # the labels do not overlap each other
    for k, a in enumerate(boxes):
        for b in boxes[k + 1:]:
            overlap_x = min(a["right"], b["right"]) - max(a["left"], b["left"])
            overlap_y = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            assert overlap_x <= 1 or overlap_y <= 1, (a["text"], b["text"])

    # item 7: the script's trial, 30 types of execution with one point each
    dash_duo.select_dcc_dropdown(css(ids.selector("trial")), value="batch_script")
    dash_duo.find_element("#nav-graphs").click()
    dash_duo.wait_for_element(f"#{ids.KPI_GRAPHS} .js-plotly-plot", timeout=10)

    def charts_ready():
        charts = dash_duo.driver.execute_script(_KPI_CHARTS, ids.KPI_GRAPHS)
        return charts if len(charts) == 2 else None

    charts = wait_until(charts_ready, what="both KPI charts")
    final_title, loss_title = sorted(charts)
    final, loss = charts[final_title], charts[loss_title]
    # one point: a marker, drawn
    assert final["traces"] == [{"name": "loss (batch_*)", "mode": "markers", "n": 1}]
    assert final["points"] == 1
    assert loss["traces"] == [{"name": "batch_*", "mode": "lines", "n": BATCHES}]
    assert loss["legend"] == ["batch_*"]  # not 30 entries, no "(batch_0)"
    # the title says what shares the line
    assert loss_title.startswith("loss") and f"{BATCHES} types of execution" in loss_title


def set_viewport(driver, width: int, height: int) -> None:
    """Make the page (not the window with its browser chrome) ``width`` × ``height``."""
    driver.set_window_size(width, height)
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
