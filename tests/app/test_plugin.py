"""Visualization plugins (comgra_like.app.plugin): loading, re-import, errors."""

from __future__ import annotations

import os

import plotly.graph_objects as go
from comgra_like.app.plugin import (
    VisualizationContext,
    VisualizationPlugin,
    check_plugin_file,
    to_component,
)
from dash import dcc, html


def _ctx(**kw) -> VisualizationContext:
    base = {
        "trial_id": "t",
        "training_step": 3,
        "type_of_execution": "train",
        "iteration": 0,
        "node": "n",
        "role": "r",
        "recording_type": "forward",
        "aggregation": "sample",
        "sample_index": 2,
        "query": None,
    }
    return VisualizationContext(**(base | kw))


def _write(path, text, bump=0):
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump))  # a new mtime even within one tick


def test_renders_component_figure_text_and_sees_the_context(tmp_path):
    plugin_file = tmp_path / "vis.py"
    _write(
        plugin_file,
        "from dash import html\n"
        "def create_visualization(ctx):\n"
        "    return html.Div(f'{ctx.trial_id}/{ctx.training_step}/{ctx.sample_index}')\n",
    )
    plugin = VisualizationPlugin(plugin_file)
    out = plugin.render(_ctx())
    assert isinstance(out, html.Div) and out.children == "t/3/2"

    _write(
        plugin_file,
        "import plotly.graph_objects as go\n"
        "def create_visualization(ctx):\n    return go.Figure()\n",
        bump=10**9,
    )
    assert isinstance(plugin.render(_ctx()), dcc.Graph)  # re-imported after the change


def test_an_exception_becomes_a_traceback_box(tmp_path):
    plugin_file = tmp_path / "vis.py"
    _write(plugin_file, "def create_visualization(ctx):\n    raise RuntimeError('boom')\n")
    out = VisualizationPlugin(plugin_file).render(_ctx())
    text = str(out.to_plotly_json())
    assert "plugin-error" in out.className and "boom" in text and "Traceback" in text


def test_bad_files_are_explained(tmp_path):
    missing = tmp_path / "nope.py"
    assert "does not exist" in check_plugin_file(missing)
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def create_visualization(ctx:\n")
    assert "SyntaxError" in check_plugin_file(syntax)
    no_function = tmp_path / "empty.py"
    no_function.write_text("x = 1\n")
    assert "create_visualization" in check_plugin_file(no_function)
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    assert "SystemExit" in check_plugin_file(exits)
    good = tmp_path / "good.py"
    good.write_text("def create_visualization(ctx):\n    return 'ok'\n")
    assert check_plugin_file(good) is None


def test_to_component_conversions():
    assert isinstance(to_component("text"), html.Pre)
    assert isinstance(to_component({"data": [], "layout": {}}), dcc.Graph)
    assert isinstance(to_component(go.Figure()), dcc.Graph)
    assert isinstance(to_component([html.B("a"), "b"]), html.Div)
    assert "nothing" in to_component(None).children


def test_unusable_return_value_is_reported(tmp_path):
    plugin_file = tmp_path / "vis.py"
    plugin_file.write_text("def create_visualization(ctx):\n    return object()\n")
    out = VisualizationPlugin(plugin_file).render(_ctx())
    assert "plugin-error" in out.className


def test_context_repr_leaves_out_the_query():
    assert "query" not in repr(_ctx(query=object()))


COMGRA_SIGNATURE = (
    "def create_visualization(recordings, type_of_execution, tsc, ngs, db, "
    "training_step_value, type_of_recording_value, batch_aggregation_value, "
    "iteration_value, node_name, role_of_tensor_in_node_value):\n"
)


def test_comgra_style_plugin_waits_for_a_selection(tmp_path):
    plugin_file = tmp_path / "vis.py"
    plugin_file.write_text(COMGRA_SIGNATURE + "    raise AssertionError('not called')\n")
    plugin = VisualizationPlugin(plugin_file)
    out = plugin.render(_ctx(trial_id=None))
    assert plugin.style == "comgra"
    assert "Select a trial" in str(out.to_plotly_json()) and "plugin-error" not in out.className


def test_native_form_with_optional_parameters_stays_native(tmp_path):
    plugin_file = tmp_path / "vis.py"
    plugin_file.write_text("def create_visualization(ctx, scale=2):\n    return ctx.trial_id\n")
    plugin = VisualizationPlugin(plugin_file)
    out = plugin.render(_ctx())
    assert plugin.style == "native" and out.children == "t"
    # the file changes to comgra's form: re-imported, the form is detected again
    plugin_file.write_text(COMGRA_SIGNATURE + "    return node_name\n")
    st = plugin_file.stat()
    os.utime(plugin_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    out = plugin.render(_ctx())  # query=None: no data to build comgra's arguments from
    assert plugin.style == "comgra" and "Select a trial" in str(out.to_plotly_json())
