"""The Metrics page's builders at real size (issue 27 item 6): natural order, modules
grouped by type and layer, the search, the outliers named, small multiples and the
module × step heatmap, on frames shaped like ``Group.read_metrics``'s for a 12-layer
GPT-2 (four ``Conv1D`` per block: 48 modules)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from comgra_like.app import metric_figures as mfig
from comgra_like.app import metric_groups as mg
from comgra_like.app.natural import natural_key, natural_sorted

LAYERS = 12
KINDS = ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
MODULES = [f"model.transformer.h.{i}.{k}" for i in range(LAYERS) for k in KINDS]
STEPS = [0, 2, 4, 6]


def frame(outlier: str | None = None, factor: float = 10.0) -> pd.DataFrame:
    """WeightNorm-like rows: every module at STEPS, its value growing with its layer."""
    rows = []
    for m in sorted(MODULES):  # the query API's order: as text
        _kind, index = mg.module_kind(m)
        for s in STEPS:
            value = 1.0 + 0.01 * index + 0.001 * s + 0.1 * KINDS.index(m.split(".", 4)[4])
            if m == outlier and s == STEPS[-1]:
                value *= factor
            rows.append({"training_step": s, "type_of_execution": "training", "module": m,
                         "module_class": "Conv1D", "metric": "WeightNorm",
                         "backward_pass": 0, "value": value, "vector": None, "wall_time": 0.0})
    return pd.DataFrame(rows)


def test_natural_order():
    names = ["h.10", "h.2", "h.1", "h.0", "h.11", "h.1.mlp", "ln_f", "H.3"]
    assert natural_sorted(names) == ["h.0", "h.1", "h.1.mlp", "h.2", "H.3", "h.10", "h.11",
                                     "ln_f"]
    assert natural_key("block.9.x") < natural_key("block.10.x")
    assert sorted(["a10b2", "a10b10", "a9"], key=natural_key) == ["a9", "a10b2", "a10b10"]


def test_module_kind_and_groups():
    assert mg.module_kind("model.transformer.h.3.mlp.c_fc") == (
        "model.transformer.h.*.mlp.c_fc", 3)
    assert mg.module_kind("model.encoder.block.1.layer.0.SelfAttention") == (
        "model.encoder.block.*.layer.0.SelfAttention", 1)
    assert mg.module_kind("model.lm_head") == ("model.lm_head", None)
    groups = mg.group_modules(MODULES + ["model.transformer.ln_f", "model.lm_head"])
    assert [g.kind for g in groups] == [f"model.transformer.h.*.{k}" for k in KINDS] + [mg.OTHER]
    assert groups[0].indices == tuple(range(LAYERS))
    assert groups[2].modules[:3] == tuple(f"model.transformer.h.{i}.mlp.c_fc" for i in range(3))
    assert groups[-1].modules == ("model.lm_head", "model.transformer.ln_f")
    # beyond the panel budget the types go together into "other modules"
    few = mg.group_modules(MODULES, max_panels=3)
    assert [g.kind for g in few][-1] == mg.OTHER and len(few) == 3
    assert sum(len(g.modules) for g in few) == len(MODULES)


def test_search():
    assert mg.search_modules(MODULES, "") == MODULES
    fc = mg.search_modules(MODULES, "MLP c_fc")
    assert fc == [f"model.transformer.h.{i}.mlp.c_fc" for i in range(LAYERS)]
    assert mg.search_modules(MODULES, "h.1. -attn") == ["model.transformer.h.1.mlp.c_fc",
                                                       "model.transformer.h.1.mlp.c_proj"]
    assert mg.search_modules(MODULES, "nothing-like-this") == []


def test_outliers_named():
    assert mg.outliers(frame(), "WeightNorm") == []
    odd = "model.transformer.h.7.mlp.c_fc"
    found = mg.outliers(frame(odd), "WeightNorm")
    assert [o.module for o in found] == [odd]
    o = found[0]
    assert o.kind == "model.transformer.h.*.mlp.c_fc" and o.step == STEPS[-1]
    assert o.value / o.median > 9
    assert "h.7.mlp.c_fc" in o.describe("h.7.mlp.c_fc") and "its type's median" in o.describe()
    # a filter that leaves the odd module out leaves no outlier
    assert mg.outliers(frame(odd), "WeightNorm", [m for m in MODULES if m != odd]) == []


def test_lines_in_natural_order():
    fig = mfig.metric_figure({"a": frame()}, "WeightNorm")
    names = [t["name"] for t in fig["data"]]
    assert names[:5] == ["model.transformer.h.0.attn.c_attn", "model.transformer.h.0.attn.c_proj",
                         "model.transformer.h.0.mlp.c_fc", "model.transformer.h.0.mlp.c_proj",
                         "model.transformer.h.1.attn.c_attn"]
    layer = [int(n.split(".")[3]) for n in names]
    assert layer == sorted(layer)  # h.10 after h.9, not after h.1


def test_grouped_figure():
    odd = "model.transformer.h.7.mlp.c_fc"
    fig = mg.grouped_figure({"a": frame(odd)}, "WeightNorm")
    lines = [t for t in fig["data"] if t.get("meta")]
    assert len(lines) == len(MODULES)
    # one subplot per type, 12 lines each, in depth order, coloured by depth
    axes = {}
    for t in lines:
        axes.setdefault(t["xaxis"], []).append(t)
    assert sorted(axes) == ["x", "x2", "x3", "x4"]
    fc = axes["x3"]
    assert [t["meta"][1] for t in fc] == [f"model.transformer.h.{i}.mlp.c_fc"
                                          for i in range(LAYERS)]
    assert fc[0]["line"]["color"] == mg.DEPTH_SCALE[0]
    assert fc[-1]["line"]["color"] == mg.DEPTH_SCALE[-1]
    titles = [a["text"] for a in fig["layout"]["annotations"] if a.get("name") == "panel-title"]
    assert [t.split(" ")[0] for t in titles] == [f"h.*.{k}" for k in KINDS] and all("(12)" in t for t in titles)
    named = [a["text"] for a in fig["layout"]["annotations"] if a.get("name") == "outliers"]
    assert len(named) == 1 and "h.7.mlp.c_fc" in named[0]
    assert next(t for t in fc if t["meta"][1] == odd)["line"]["width"] == 3
    # a click on a line opens its module and step
    traces = mfig.trace_meta(fig)
    k = traces.index(next(t["meta"] for t in fc if t["meta"][1] == odd))
    point = mfig.point_of({"points": [{"curveNumber": k, "pointIndex": 1, "x": 2}]}, traces)
    assert point["module"] == odd and point["training_step"] == 2


def test_heatmap_shape_and_order():
    fig = mg.heatmap_figure(frame(), "WeightNorm")
    (trace,) = fig["data"]
    # the trace's rows go bottom-up (plotly draws the first category at the bottom)
    trace = {**trace, "y": trace["y"][::-1], "z": trace["z"][::-1],
             "customdata": trace["customdata"][::-1]}
    assert trace["x"] == STEPS
    assert len(trace["y"]) == len(MODULES) and np.shape(trace["z"]) == (len(MODULES), len(STEPS))
    # rows grouped by type, in layer order inside each
    assert trace["y"][:3] == ["h.0.attn.c_attn", "h.1.attn.c_attn", "h.2.attn.c_attn"]
    assert trace["y"][11:13] == ["h.11.attn.c_attn", "h.0.attn.c_proj"]
    # the value of a cell is the module's at that step
    row = trace["y"].index("h.10.mlp.c_fc")
    want = frame().query("module == 'model.transformer.h.10.mlp.c_fc' and training_step == 4")
    assert trace["customdata"][row][2] == want["value"].iloc[0]
    # a metric computed on fewer steps leaves blank cells
    sparse = frame()
    sparse = sparse[~((sparse["module"] == MODULES[0]) & (sparse["training_step"] == 2))]
    z = mg.heatmap_figure(sparse, "WeightNorm")["data"][0]["z"]
    assert z[-1][1] is None and z[-1][0] is not None
    assert mg.heatmap_figure(frame(), "WeightNorm", modules=MODULES[:8])["data"][0]["y"][-1] == \
        "h.0.attn.c_attn"
    # a click on a cell opens its step and module
    fig = mg.heatmap_figure(frame(), "WeightNorm", trial="a")
    labels = fig["data"][0]["y"]
    row = labels.index("h.10.mlp.c_fc")
    # (dcc.Graph's click data of a heatmap: x and y, no point number)
    point = mfig.point_of({"points": [{"curveNumber": 0, "x": 4, "y": labels[row]}]},
                          mfig.trace_meta(fig))
    assert point == {"trial": "a", "module": "model.transformer.h.10.mlp.c_fc",
                     "training_step": 4, "backward_pass": 0, "rank": None}
