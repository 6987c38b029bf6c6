"""One typed-array encoding for every figure (comgra_like.app.typed_figures), and the
figure modules' names still importable where they were before the builders were split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from comgra_like.app import (
    comgra_plugins,
    figures,
    graph_figure,
    histogram_figures,
    module_figures,
    typed_figures,
)
from comgra_like.app.typed_figures import typed_array, typed_arrays, typed_values


def test_a_figure_and_a_series_share_one_encoding():
    assert figures.typed_array is typed_array and figures.typed_values is typed_values
    assert module_figures.typed_arrays is typed_arrays


@pytest.mark.parametrize(("values", "float32", "dtype"), [
    (np.arange(6, dtype=np.int64).reshape(2, 3), False, "i4"),
    (np.arange(6, dtype=np.float64).reshape(3, 2) / 7, False, "f8"),
    (np.arange(6, dtype=np.float64).reshape(3, 2) / 7, True, "f4"),
    (np.zeros((2, 2, 3)), True, "f4"),
    (np.array([1.5, np.nan, -np.inf]), True, "f4"),
    (np.array([True, False, True]), False, "i4"),
    (np.array([3, 2**40 + 1], np.int64), True, "f8"),  # a step beyond int32: exact, not wrapped
])
def test_typed_array_keeps_shape_and_values(values, float32, dtype):
    spec = typed_array(values, float32=float32)
    assert spec["dtype"] == dtype
    assert ("shape" in spec) == (values.ndim > 1)
    back = typed_values(spec)
    assert back.shape == values.shape
    expected = values.astype(np.float32) if dtype == "f4" else values
    np.testing.assert_array_equal(back, expected.astype(back.dtype))


def test_typed_arrays_encode_every_array_of_a_figure_floats_as_float32():
    steps = np.array([0, 7, 2**33 + 1], np.int64)  # the heatmap's columns
    counts = np.arange(6, dtype=np.float64).reshape(2, 3) + 0.1
    figure = {"data": [{"type": "heatmap", "x": steps, "y": np.array([-1.0, 0.0, 1.0]),
                        "z": counts, "name": "a", "meta": [1, 2]}],
              "layout": {"title": "t"}}
    typed = typed_arrays(figure)
    trace = typed["data"][0]
    # int64 steps past int32 go as float64, exact (they wrapped round to 0 before)
    assert typed_values(trace["x"]).tolist() == [0, 7, 2**33 + 1]
    assert trace["z"]["dtype"] == "f4" and trace["z"]["shape"] == "2, 3"
    np.testing.assert_array_equal(typed_values(trace["z"]), counts.astype(np.float32))
    assert trace["name"] == "a" and trace["meta"] == [1, 2] and typed["layout"] == {"title": "t"}
    json.dumps(typed)  # nothing numpy is left


def test_names_stay_importable_from_the_modules_that_were_split():
    """Pages, tests, benchmarks and comgra 0.11.5 plugins import these from the old
    modules; every name of each old module's __all__ resolves to the new one's."""
    for module in (graph_figure, comgra_plugins, module_figures, histogram_figures,
                   typed_figures):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__
    for name in ("ARROW_TRACE", "MAX_ARROWS", "MAX_LABELED_NODES", "NON_FINITE_COLOR",
                 "NO_DATA_COLOR", "ColorScale", "NodeValue", "Paint", "build_graph_figure",
                 "build_graph_model", "client_highlight_data", "color_scale",
                 "compute_highlight", "highlight_patch", "highlight_updates",
                 "neighbor_in_direction", "node_labels", "node_style", "paint_patch",
                 "paint_trace_index", "paint_updates", "GraphFigureModel"):
        assert name in graph_figure.__all__, name
    # what comgra's example plugin imports from comgra.objects / comgra.utilities
    for name in ("TrainingStepConfiguration", "NodeGraphStructure", "PseudoDb",
                 "TensorRecordings", "Selection", "comgra_arguments", "plugin_style",
                 "COMGRA", "NATIVE", "STAT_ITEMS", "COMGRA_PARAMETERS"):
        assert name in comgra_plugins.__all__, name
    for name in ("ROOT", "WHATS", "WHAT_LABELS", "HistogramGrid", "histogram_grid",
                 "histogram_figure", "histogram_choices", "recording_types", "level_view",
                 "module_graph_figure", "typed_arrays", "find_invocation", "breadcrumb"):
        assert name in module_figures.__all__, name
