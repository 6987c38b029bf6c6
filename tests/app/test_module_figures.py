"""The Modules page's pure builders (issue 15): one level of the module graph with its
drill-down and tooltips, and the histograms over time (every recorded step a column,
the counts read as colours, bin ranges in the hover)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest
from comgra_like.app import module_figures as mf


def _port(role: str, shape: list[int]) -> dict:
    return {"role": role, "shape": shape}


def residual_graph() -> dict:
    """A small net in the contract's shape: stem conv, a residual block (conv1, relu,
    conv2, relu called twice) and a head Sequential (flatten, linear)."""
    x = [-1, 3, 8, 8]
    f = [-1, 4, 8, 8]

    def inv(id_, parent, cls, ins, outs, extra=None):
        return {"id": id_, "module": id_.split("#")[0], "parent": parent, "class": cls,
                "extra_repr": extra or {}, "inputs": ins, "outputs": outs}

    return {
        "invocations": [
            inv("Net", None, "Net", [_port("input 0", x)], [_port("output 0", [-1, 10])]),
            inv("stem", "Net", "Conv2d", [_port("input 0", x)], [_port("output 0", f)],
                {"in_channels": "3", "out_channels": "4", "kernel_size": "(3, 3)"}),
            inv("block", "Net", "Block", [_port("input 0", f)], [_port("output 0", f)]),
            inv("block.conv1", "block", "Conv2d", [_port("input 0", f)], [_port("output 0", f)],
                {"in_channels": "4", "out_channels": "4"}),
            inv("block.relu", "block", "ReLU", [_port("input 0", f)], [_port("output 0", f)],
                {"inplace": "True"}),
            inv("block.conv2", "block", "Conv2d", [_port("input 0", f)], [_port("output 0", f)]),
            inv("block.relu#1", "block", "ReLU", [_port("input 0", f)], [_port("output 0", f)],
                {"inplace": "True"}),
            inv("head", "Net", "Sequential", [_port("input 0", f)], [_port("output 0", [-1, 10])]),
            inv("head.0", "head", "Flatten", [_port("input 0", f)], [_port("output 0", [-1, 256])]),
            inv("head.1", "head", "Linear", [_port("input 0", [-1, 256])],
                [_port("output 0", [-1, 10])], {"in_features": "256", "out_features": "10"}),
        ],
        "edges": [
            ["Net:input", "input 0", "stem", "input 0"],
            ["stem", "output 0", "block", "input 0"],
            ["block", "output 0", "head", "input 0"],
            ["head", "output 0", "Net:output", "output 0"],
            ["block:input", "input 0", "block.conv1", "input 0"],
            ["block.conv1", "output 0", "block.relu", "input 0"],
            ["block.relu", "output 0", "block.conv2", "input 0"],
            ["block.conv2", "output 0", "block.relu#1", "input 0"],
            ["block:input", "input 0", "block.relu#1", "input 0"],  # the residual +=
            ["block.relu#1", "output 0", "block:output", "output 0"],
            ["head:input", "input 0", "head.0", "input 0"],
            ["head.0", "output 0", "head.1", "input 0"],
            ["head.1", "output 0", "head:output", "output 0"],
        ],
    }


def _points(figure: dict) -> dict[str, dict]:
    trace = next(t for t in figure["data"] if t.get("name") == "modules")
    return {c[0]: {"label": label, "hover": hover, "kind": c[1], "open": c[2]}
            for c, label, hover in zip(trace["customdata"], trace["text"], trace["hovertext"])}


def test_each_level_shows_its_children_and_the_viewed_modules_inputs_and_outputs():
    graph = residual_graph()
    assert mf.root_id(graph) == "Net"

    top = mf.level_view(graph, None)
    assert top.parent == "Net"
    assert [n.key for n in top.nodes] == [
        "Net:input/input 0", "stem", "block", "head", "Net:output/output 0"]
    assert {(s, t) for s, t, _ in top.edges} == {
        ("Net:input/input 0", "stem"), ("stem", "block"), ("block", "head"),
        ("head", "Net:output/output 0")}
    assert [n.has_children for n in top.nodes if n.kind == "module"] == [False, True, True]
    assert top.breadcrumb == (("Net", "Net"),)

    block = mf.level_view(graph, "block")
    assert [n.key for n in block.nodes] == [
        "block:input/input 0", "block.conv1", "block.relu", "block.conv2", "block.relu#1",
        "block:output/output 0"]
    # the residual: the block's input reaches the second ReLU call directly
    assert ("block:input/input 0", "block.relu#1", "input 0 → input 0") in block.edges
    assert [n.label for n in block.nodes if n.kind == "module"] == [
        "conv1", "relu", "conv2", "relu#1"]
    assert block.breadcrumb == (("Net", "Net"), ("block", "block"))

    head = mf.level_view(graph, "head")
    assert [n.key for n in head.nodes if n.kind == "module"] == ["head.0", "head.1"]
    assert not any(n.has_children for n in head.nodes)
    # an id the graph does not have (a structure that changed) shows the top level
    assert mf.level_view(graph, "gone").parent == "Net"
    assert mf.parent_of(graph, "block.relu#1") == "block"
    assert mf.find_invocation(graph, "head.1") == "head.1"
    assert mf.find_invocation(graph, "nothing") is None
    assert mf.find_invocation(graph, "head.1.weight") == "head.1"  # a parameter's module


def test_a_recording_without_a_root_invocation_has_a_virtual_top_level():
    graph = residual_graph()
    graph["invocations"] = [i for i in graph["invocations"] if i["id"] != "Net"]
    for inv in graph["invocations"]:
        if inv["parent"] == "Net":
            inv["parent"] = mf.ROOT
    graph["edges"] = [[e.replace("Net:", ":") for e in edge] for edge in graph["edges"]]
    assert mf.root_id(graph) == mf.ROOT
    top = mf.level_view(graph, None)
    assert [n.key for n in top.nodes] == [":input/input 0", "stem", "block", "head",
                                          ":output/output 0"]
    assert mf.breadcrumb(graph, "block") == [("model", ""), ("block", "block")]


def test_the_figure_marks_what_opens_and_the_tooltips_carry_shapes_and_extra_repr():
    graph = residual_graph()
    figure = mf.module_graph_figure(mf.level_view(graph, "Net"), selected=["stem"])
    points = _points(figure)
    assert points["block"]["open"] and points["block"]["label"] == "block ▸"
    assert not points["stem"]["open"]
    stem = points["stem"]["hover"]
    assert "<b>stem</b> · Conv2d" in stem
    assert "input 0: (B, 3, 8, 8)" in stem and "output 0: (B, 4, 8, 8)" in stem
    assert "in_channels: 3" in stem and "kernel_size: (3, 3)" in stem
    assert points["Net:output/output 0"]["kind"] == "output"
    assert "shape (B, 10)" in points["Net:output/output 0"]["hover"]
    trace = next(t for t in figure["data"] if t.get("name") == "modules")
    widths = dict(zip((c[0] for c in trace["customdata"]), trace["marker"]["line"]["width"]))
    assert widths["stem"] > widths["block"]  # the selected module stands out
    block = _points(mf.module_graph_figure(mf.level_view(graph, "block")))
    assert "inplace: True" in block["block.relu#1"]["hover"]
    # left to right: the viewed module's input first, its output last
    xs = dict(zip((c[0] for c in trace["customdata"]), trace["x"]))
    assert xs["Net:input/input 0"] < xs["stem"] < xs["block"] < xs["head"] < xs[
        "Net:output/output 0"]
    # the inputs' and outputs' labels above them, towards the inside (issue 27: below
    # and centred, a long output role ran into its neighbour's label and off the edge)
    where = dict(zip((c[0] for c in trace["customdata"]), trace["textposition"]))
    assert where["Net:input/input 0"] == "top right"
    assert where["Net:output/output 0"] == "top left"
    assert where["stem"] == where["block"] == "bottom center"
    pio.from_json(json.dumps(figure))  # plotly accepts it


def test_names_from_the_recording_are_text_in_the_figure():
    graph = residual_graph()
    graph["invocations"][1]["extra_repr"] = {"<b>key</b>": "%{x}"}
    hover = _points(mf.module_graph_figure(mf.level_view(graph, "Net")))["stem"]["hover"]
    assert "<b>key</b>" not in hover and "&lt;b&gt;key&lt;/b&gt;: &#37;{x}" in hover


def hist_rows(steps, values_of, bins=10, shared=None) -> pd.DataFrame:
    rows = []
    for step in steps:
        values = values_of(step)
        edges = shared if shared is not None else np.linspace(values.min(), values.max(), bins + 1)
        counts, edges = np.histogram(values, bins=edges)
        rows.append({"training_step": step, "module": "block.conv1", "role": "output 0",
                     "recording_type": "forward", "what": "io", "lo": edges[0],
                     "hi": edges[-1], "counts": counts.astype(np.int64),
                     "vmin": values.min(), "vmax": values.max()})
    return pd.DataFrame(rows)


def test_shared_bins_are_drawn_as_read_every_recorded_step_a_column():
    rng = np.random.default_rng(0)
    steps = list(range(0, 500 * 7, 7))  # 500 recorded steps, not a fixed number of slices
    edges = np.linspace(-4, 4, 31)
    frame = hist_rows(steps, lambda s: rng.normal(s / 3500, 1, 200).clip(-3.9, 3.9), shared=edges)
    grid = mf.histogram_grid(frame)
    assert grid.shared
    assert list(grid.steps) == steps
    np.testing.assert_array_equal(grid.counts, np.stack(frame["counts"].to_list(), axis=1))
    figure = mf.histogram_figure([("trial_a", grid)])
    heat = next(t for t in figure["data"] if t["type"] == "heatmap")
    assert list(heat["x"]) == steps
    np.testing.assert_array_equal(heat["z"], np.stack(frame["counts"].to_list(), axis=1))
    np.testing.assert_array_equal(heat["y"], edges)
    # the hover names the step, the bin range and the count
    assert "step %{x}" in heat["hovertemplate"] and "count %{customdata[2]" in heat["hovertemplate"]
    np.testing.assert_allclose(heat["customdata"][5, 10, :2], [edges[5], edges[6]], rtol=1e-6)
    assert heat["customdata"][5, 10, 2] == frame["counts"][10][5]
    # min/max bounds per step, a dashed zero line
    bounds = [t for t in figure["data"] if t["type"] == "scatter"]
    np.testing.assert_array_equal(bounds[0]["y"], frame["vmin"])
    np.testing.assert_array_equal(bounds[1]["y"], frame["vmax"])
    assert figure["layout"]["shapes"][0]["line"]["dash"] == "dash"
    assert figure["layout"]["shapes"][0]["y0"] == 0


def test_bins_that_move_from_step_to_step_show_the_count_of_the_bin_at_each_value():
    rng = np.random.default_rng(1)
    steps = [0, 10, 20, 30, 100]
    frame = hist_rows(steps, lambda s: rng.normal(s / 10, 1 + s / 50, 300), bins=20)
    grid = mf.histogram_grid(frame)
    assert not grid.shared and list(grid.steps) == steps
    centres = (grid.edges[:-1] + grid.edges[1:]) / 2
    for column, row in enumerate(frame.itertuples()):
        edges = np.linspace(row.lo, row.hi, len(row.counts) + 1)
        covered = 0
        for r, centre in enumerate(centres):
            inside = edges[0] <= centre < edges[-1]
            if not inside:
                assert np.isnan(grid.counts[r, column])
                continue
            b = min(int(np.searchsorted(edges, centre, side="right") - 1), len(row.counts) - 1)
            assert grid.counts[r, column] == row.counts[b]
            assert (grid.bin_lo[r, column], grid.bin_hi[r, column]) == (edges[b], edges[b + 1])
            covered += 1
        assert covered >= len(row.counts)  # every bin is at least one row tall
    assert grid.edges[0] == frame["lo"].min() and grid.edges[-1] == frame["hi"].max()


def test_two_trials_side_by_side_share_the_value_axis_and_colour_scale():
    rng = np.random.default_rng(2)
    a = mf.histogram_grid(hist_rows([0, 1, 2], lambda s: rng.normal(0, 1, 100)))
    b = mf.histogram_grid(hist_rows([0, 1, 2, 3], lambda s: rng.normal(5, 2, 100)))
    figure = mf.histogram_figure([("trial_a", a), ("trial_b", b)], log_color=True)
    heats = [t for t in figure["data"] if t["type"] == "heatmap"]
    assert [h["xaxis"] for h in heats] == ["x", "x2"]
    assert figure["layout"]["yaxis2"]["matches"] == "y"
    assert all(h["coloraxis"] == "coloraxis" for h in heats)
    np.testing.assert_allclose(heats[1]["z"], np.log10(b.counts + 1))
    np.testing.assert_array_equal(heats[1]["customdata"][..., 2], b.counts)  # hover: counts
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["trial_a", "trial_b"]
    one_missing = mf.histogram_figure([("trial_a", a), ("trial_c", None)])
    assert "nothing recorded" in [x["text"] for x in one_missing["layout"]["annotations"]]
    pio.from_json(json.dumps(figure, default=lambda v: v.tolist()))


def test_constant_values_and_choices():
    frame = hist_rows([0, 1], lambda s: np.zeros(5), bins=4)
    frame["lo"], frame["hi"] = 0.0, 0.0
    grid = mf.histogram_grid(frame)
    assert np.nansum(grid.counts[:, 0]) >= 5 and grid.edges[0] < 0 < grid.edges[-1]
    both = pd.concat([frame, frame.assign(what="params", role="weight"),
                      frame.assign(what="params", role="bias")])
    assert mf.histogram_choices(both) == {"io": ["output 0"], "params": ["weight", "bias"]}
    with pytest.raises(ValueError):
        mf.histogram_grid(frame.iloc[:0])


def test_typed_arrays_carry_the_same_numbers_to_the_browser():
    rng = np.random.default_rng(3)
    grid = mf.histogram_grid(hist_rows(list(range(40)), lambda s: rng.normal(s, 1, 50)))
    figure = mf.histogram_figure([("trial_a", grid)])
    typed = mf.typed_arrays(figure)
    heat = next(t for t in typed["data"] if t["type"] == "heatmap")
    z = np.frombuffer(base64.b64decode(heat["z"]["bdata"]), dtype=np.float32)
    assert heat["z"]["shape"] == f"{grid.counts.shape[0]}, {grid.counts.shape[1]}"
    np.testing.assert_array_equal(z.reshape(grid.counts.shape), grid.counts.astype(np.float32))
    x = np.frombuffer(base64.b64decode(heat["x"]["bdata"]), dtype=np.int32)
    assert list(x) == list(range(40))
    custom = np.frombuffer(base64.b64decode(heat["customdata"]["bdata"]), dtype=np.float32)
    np.testing.assert_array_equal(custom.reshape(*grid.counts.shape, 3)[..., 2],
                                  grid.counts.astype(np.float32))
    assert len(json.dumps(typed)) < len(json.dumps(figure, default=lambda v: v.tolist()))


def test_two_trials_overlaid_in_one_panel_the_second_as_contour_lines_of_its_counts():
    rng = np.random.default_rng(3)
    edges = np.linspace(-4, 4, 21)
    a = mf.histogram_grid(hist_rows([0, 1, 2, 3], lambda s: rng.normal(0, 1, 300), shared=edges))
    b = mf.histogram_grid(hist_rows([0, 2, 4], lambda s: rng.normal(2, 0.5, 300), bins=12))
    side = mf.histogram_figure([("trial_a", a), ("trial_b", b)])
    assert "xaxis2" in side["layout"]  # side by side: a subplot each
    figure = mf.histogram_figure([("trial_a", a), ("trial_b", b)], overlay=True)
    assert "xaxis2" not in figure["layout"]  # one panel
    heat = [t for t in figure["data"] if t["type"] == "heatmap"]
    lines = [t for t in figure["data"] if t["type"] == "contour"]
    assert len(heat) == 1 and len(lines) == 1
    np.testing.assert_array_equal(heat[0]["z"], a.counts)
    # the second trial's own steps, its counts at its bin centres, lines in one colour
    assert list(lines[0]["x"]) == [0, 2, 4]
    np.testing.assert_array_equal(lines[0]["z"], b.counts)
    np.testing.assert_allclose(lines[0]["y"], (b.edges[:-1] + b.edges[1:]) / 2)
    assert lines[0]["contours"]["coloring"] == "lines"
    colour = lines[0]["line"]["color"]
    assert lines[0]["colorscale"] == [[0, colour], [1, colour]] and colour != "#d62728"
    # the levels on the heatmap's scale, and both named in the legend
    top = max(np.nanmax(a.counts), np.nanmax(b.counts))
    assert lines[0]["contours"]["end"] == pytest.approx(top)
    assert figure["layout"]["coloraxis"]["cmax"] == pytest.approx(top)
    assert {"trial_a (colours)", "trial_b (lines)"} <= {t["name"] for t in figure["data"]}
    # the second trial's bounds in its colour; the value axis covers both trials
    bounds = [t for t in figure["data"] if t["type"] == "scatter" and t["line"]["color"] == colour]
    np.testing.assert_array_equal(bounds[1]["y"], b.vmax)
    low, high = figure["layout"]["yaxis"]["range"]
    assert low < a.vmin.min() and high > b.vmax.max()
    # log colour: the levels follow
    logged = mf.histogram_figure([("trial_a", a), ("trial_b", b)], overlay=True, log_color=True)
    contour = next(t for t in logged["data"] if t["type"] == "contour")
    np.testing.assert_allclose(contour["z"], np.log10(b.counts + 1))
    # a trial without such histograms is named, not drawn
    missing = mf.histogram_figure([("trial_a", a), ("trial_c", None)], overlay=True)
    assert "trial_c" in missing["layout"]["annotations"][0]["text"]
    assert not [t for t in missing["data"] if t["type"] == "contour"]
    pio.from_json(json.dumps(figure, default=lambda v: v.tolist()))  # plotly accepts it


def test_several_gradient_groups_of_one_module_each_distinguishable():
    rng = np.random.default_rng(4)
    frames = []
    for group, scale in (("gradient:backward", 1.0), ("gradient:backward_2", 0.1),
                         ("gradient:backward_10", 0.01), ("forward", 5.0)):
        rows = hist_rows([0, 1, 2], lambda s, sc=scale: rng.normal(0, sc, 100))
        rows["recording_type"] = group
        rows["what"] = "io" if group == "forward" else "io_grad"
        frames.append(rows)
    frame = pd.concat(frames, ignore_index=True)
    groups = mf.recording_types(frame, "io_grad", "output 0")
    # the passes in their order (10 after 2), forward is not a gradient group of io_grad
    assert groups == ["gradient:backward", "gradient:backward_2", "gradient:backward_10"]
    assert mf.recording_types(frame, "io", "output 0") == ["forward"]
    grids = [(g, mf.histogram_grid(frame[frame["recording_type"] == g])) for g in groups]
    side = mf.histogram_figure(grids)
    titles = [a["text"] for a in side["layout"]["annotations"]]
    assert titles == groups and "xaxis3" in side["layout"]
    over = mf.histogram_figure(grids, overlay=True)
    contours = [t for t in over["data"] if t["type"] == "contour"]
    assert [t["name"] for t in contours] == [f"{g} (lines)" for g in groups[1:]]
    assert len({t["line"]["color"] for t in contours}) == 2
    # each group's own counts
    np.testing.assert_array_equal(contours[1]["z"], grids[2][1].counts)
