"""The Modules page (issue 15): drill-down and picks, the way to the Tensors page and
back, and the histogram panels, on recordings made with ``comgra_like.watch`` of a small
conv net with a residual block and a nested Sequential (tests/app/watched_runs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from comgra_like.app import module_data
from comgra_like.app import module_figures as mf
from comgra_like.app import selection as sel
from comgra_like.app.data import AppData
from comgra_like.app.pages import modules as page

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def watched(tmp_path_factory) -> Path:
    from tests.app import watched_runs

    root = tmp_path_factory.mktemp("modules_page")
    watched_runs.record(root, trial="trial_a", steps=12, seed=0)
    return watched_runs.record(root, trial="trial_b", steps=8, seed=1)


def _text(component: Any) -> str:
    if component is None:
        return ""
    if isinstance(component, (str, int, float)):
        return str(component)
    if isinstance(component, (list, tuple)):
        return "".join(_text(c) for c in component)
    return _text(getattr(component, "children", None))


def test_drill_down_and_breadcrumb_on_a_real_recording(watched):
    data = AppData(watched)
    step, graph = module_data.module_graph(data, "trial_a")
    assert step is not None and graph
    top = mf.level_view(graph, None)
    names = {n.label: n for n in top.nodes if n.kind == "module"}
    assert {"stem", "block", "head"} <= set(names)
    assert names["block"].has_children and names["head"].has_children
    assert not names["stem"].has_children
    assert any(n.kind == "input" for n in top.nodes) and any(n.kind == "output" for n in top.nodes)

    # a click on the block opens it and picks it for the histograms
    view = page.navigate(None, graph, "trial_a",
                         clicked=[names["block"].key, "module", True])
    assert view["parent"] == names["block"].key and view["picked"] == [names["block"].key]
    inside = mf.level_view(graph, view["parent"])
    labels = [n.label for n in inside.nodes if n.kind == "module"]
    assert labels[:2] == ["conv1", "relu"] and "relu#1" in labels  # the ReLU called twice
    # the residual: the block's input reaches the addition's consumer directly
    assert any(s.startswith(f"{names['block'].key}:input") and t.endswith("relu#1")
               for s, t, _ in inside.edges), inside.edges
    crumbs = page.breadcrumb_bar(inside.breadcrumb)
    assert _text(crumbs).endswith("block")
    # a leaf is picked, not opened; the breadcrumb goes back up
    leaf = next(n for n in inside.nodes if n.label == "conv1")
    view = page.navigate(view, graph, "trial_a", clicked=[leaf.key, "module", False])
    assert view["parent"] == names["block"].key
    # down into the block: its panel closes, the leaf's stays (issue 27)
    assert view["picked"] == [leaf.key]
    other = next(n for n in inside.nodes if n.label == "conv2")
    view = page.navigate(view, graph, "trial_a", clicked=[other.key, "module", False])
    assert view["picked"] == [other.key, leaf.key]  # siblings side by side
    view = page.navigate(view, graph, "trial_a", crumb=top.parent)
    assert view["parent"] == top.parent and len(view["picked"]) == 2
    # a module of another branch stays beside one picked inside a container
    stem = page.navigate(view, graph, "trial_a", clicked=[names["stem"].key, "module", False])
    assert stem["picked"][0] == names["stem"].key and leaf.key in stem["picked"]

    # tooltips: shapes and extra_repr rows
    hover = leaf.hover
    assert "input 0: (B, 4, 8, 8)" in hover and "kernel_size: (3, 3)" in hover, hover


def test_to_the_tensors_page_and_back(watched):
    data = AppData(watched)
    _, graph = module_data.module_graph(data, "trial_a")
    inner = next(i for i in mf.invocations(graph) if i.endswith("block.conv1"))
    selection = sel.refresh(None, data.option_source())
    # the module's output is a node of the dependency graph: the Tensors page shows it
    opened = sel.open_where(selection, {"trial": "trial_a", "node": inner, "role": "output 0"},
                            data.option_source())
    assert opened["current"]["node"] == inner
    assert opened["current"]["role"] == "output 0"
    # back on the Modules page: the level of that node, the module picked
    view = page.navigate({"trial": "trial_a", "parent": None, "picked": [], "from_node": None},
                         graph, "trial_a", node=opened["current"]["node"])
    assert view["parent"].endswith("block") and view["picked"] == [inner]
    # the same node again (a refresh) changes nothing the user did since
    moved = page.navigate({**view, "parent": mf.root_id(graph)}, graph, "trial_a", node=inner)
    assert moved["parent"] == mf.root_id(graph)


def test_histogram_panels_show_every_recorded_step_of_each_kind(watched):
    data = AppData(watched)
    _, graph = module_data.module_graph(data, "trial_a")
    conv = next(i for i in mf.invocations(graph) if i.endswith("block.conv1"))
    frame = module_data.histograms(data, "trial_a", conv)
    choices = mf.histogram_choices(frame)
    assert set(choices) == {"io", "io_grad", "params", "params_grad"}
    assert {"weight", "bias"} <= set(choices["params"])
    steps = sorted(data.steps("trial_a"))
    for what, role in (("io", "output 0"), ("params", "weight"), ("params_grad", "weight"),
                       ("io_grad", choices["io_grad"][0])):
        grid = page._grid(frame, what, role, None, data.steps("trial_a"))
        assert list(grid.steps) == steps, what
        rows = frame[(frame["what"] == what) & (frame["role"] == role)]
        rows = rows.drop_duplicates("training_step", keep="last")
        # every column holds the counts read (all of them, once, when the bins are shared)
        for column, counts in enumerate(rows["counts"]):
            shown = grid.counts[:, column]
            if grid.shared:
                np.testing.assert_array_equal(shown, counts)
            else:
                assert set(shown[np.isfinite(shown)].astype(int)) <= set(counts.tolist())
    # two trials side by side
    other = module_data.histograms(data, "trial_b", conv)
    figure = mf.histogram_figure(
        [("trial_a", page._grid(frame, "io", "output 0", None, data.steps("trial_a"))),
         ("trial_b", page._grid(other, "io", "output 0", None, data.steps("trial_b")))])
    heats = [t for t in figure["data"] if t["type"] == "heatmap"]
    assert [len(h["x"]) for h in heats] == [len(steps), len(data.steps("trial_b"))]


def test_the_watch_report_and_a_recording_without_watch(watched, tiny_group):
    data = AppData(watched)
    report = module_data.watch_report(data, "trial_a")
    assert report and report.get("hooked")
    assert _text(page.report_view(report)).startswith(f"{len(report['hooked'])} modules hooked")
    plain = AppData(tiny_group)
    assert module_data.module_graph(plain, "trial_a") == (None, None)
    assert module_data.histograms(plain, "trial_a", "memory").empty


def test_new_steps_appear_as_new_columns_while_the_run_records(tmp_path):
    from tests.app.watched_runs import WatchedRun

    run = WatchedRun(tmp_path, "live").run(3)
    try:
        run.recorder.flush()
        data = AppData(run.group_path, refresh_seconds=0.01)
        _, graph = module_data.module_graph(data, "live")
        conv = next(i for i in mf.invocations(graph) if i.endswith("block.conv1"))

        def columns() -> list[int]:
            data.refresh(force=True)
            frame = module_data.histograms(data, "live", conv)
            return list(page._grid(frame, "io", "output 0", None, data.steps("live")).steps)

        assert columns() == [0, 1, 2]
        run.run(2)
        run.recorder.flush()
        assert columns() == [0, 1, 2, 3, 4]  # the cached read follows the new data
    finally:
        run.finish()
