"""Custom visualization plugins (``comgra --visualization-file FILE``).

Contract (version 1, a promise to users): FILE defines ``create_visualization(ctx)``.
``ctx`` is a :class:`VisualizationContext` (the current selection and the query API).
The function returns a Dash component, a plotly figure (or its dict), a string (shown
as preformatted text), a list of those, or None. The file is imported again whenever
its modification time changes. Anything it raises is shown as a traceback in the
Visualization tab; the rest of the GUI is not affected.

A file written for comgra 0.11.5, whose ``create_visualization`` takes comgra's 11
parameters (``recordings, type_of_execution, tsc, ngs, db, ...``), is recognised by its
signature and called with comgra's arguments built from the query API
(:mod:`comgra_like.app.comgra_plugins` says what of comgra's surface is supported).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from dash.development.base_component import Component

from . import comgra_plugins as comgra

PLUGIN_API_VERSION = 1
ENTRY_POINT = "create_visualization"


@dataclass(frozen=True)
class VisualizationContext:
    """What a plugin's ``create_visualization(ctx)`` receives.

    Attributes:
        trial_id, training_step, iteration, node, role, recording_type: the selection
            (node/role/... are None when nothing is selected yet).
        type_of_execution: the type of execution of the selected training step.
        aggregation: 'batch_mean', 'batch_abs_max', 'batch_std', 'sample' or 'none'.
        sample_index: the recorded batch index if aggregation == 'sample', else -1.
        query: the group (``comgra_like.query`` API) for reading anything else.
        data_iteration: the iteration where the selected tensor is stored, to pass to
            ``query.read_tensor`` (-1 for parameters and initial values; an earlier
            iteration for a node imported from there). ``node``/``role`` are already the
            stored names.
        graph_node, graph_role: the selected node and role as the dependency graph of the
            selected iteration names them (before following aliases and imports).
        api_version: the version of this contract.
    """

    trial_id: str | None
    training_step: int | None
    type_of_execution: str | None
    iteration: int | None
    node: str | None
    role: str | None
    recording_type: str | None
    aggregation: str | None
    sample_index: int
    query: Any
    data_iteration: int | None = None
    graph_node: str | None = None
    graph_role: str | None = None
    api_version: int = PLUGIN_API_VERSION

    def __repr__(self) -> str:  # the query object's repr can be long
        return (
            f"VisualizationContext(trial_id={self.trial_id!r}, "
            f"training_step={self.training_step!r}, "
            f"type_of_execution={self.type_of_execution!r}, iteration={self.iteration!r}, "
            f"node={self.node!r}, role={self.role!r}, recording_type={self.recording_type!r}, "
            f"aggregation={self.aggregation!r}, sample_index={self.sample_index!r}, "
            f"data_iteration={self.data_iteration!r})"
        )


def check_plugin_file(path: str | os.PathLike) -> str | None:
    """None if ``path`` imports and defines ``create_visualization``, else what is wrong."""
    plugin = VisualizationPlugin(path)
    _, error = plugin.load()
    return error


class VisualizationPlugin:
    """One plugin file, imported lazily and again whenever its mtime changes. Thread-safe."""

    _counter = itertools.count()
    _KEEP_DATABASES = 4  # comgra-style plugins: the tensor databases of the last steps

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser().resolve()
        self._lock = threading.Lock()
        self._loaded_mtime: float | None = None
        self._function: Any = None
        self._error: str | None = None
        self.style: str | None = None  # comgra_plugins.NATIVE or .COMGRA once loaded
        self._databases: dict[tuple, comgra.PseudoDb] = {}

    def mtime(self) -> float | None:
        """The file's modification time, None if it does not exist."""
        try:
            return self.path.stat().st_mtime_ns / 1e9
        except OSError:
            return None

    def load(self) -> tuple[Any, str | None]:
        """(create_visualization or None, error text or None); re-imports a changed file."""
        with self._lock:
            mtime = self.mtime()
            if mtime is None:
                self._loaded_mtime, self._function = None, None
                self._error = f"The visualization file {self.path} does not exist."
                return None, self._error
            if mtime != self._loaded_mtime:
                self._loaded_mtime = mtime
                self._function, self._error = self._import()
                self.style = None
                if self._function is not None:
                    self.style, self._error = comgra.plugin_style(self._function)
                    if self.style is None:
                        self._function = None
                        self._error = f"In {self.path}: {self._error}"
            return self._function, self._error

    def _import(self) -> tuple[Any, str | None]:
        # A fresh module name per import: a plugin never sees state of its old version.
        name = f"comgra_visualization_plugin_{next(self._counter)}"
        try:
            spec = importlib.util.spec_from_file_location(name, self.path)
            if spec is None or spec.loader is None:
                return None, f"{self.path} cannot be imported as a Python file."
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses in the plugin look their module up
            try:
                spec.loader.exec_module(module)
            finally:
                sys.modules.pop(name, None)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - even SystemExit must not end the GUI
            return None, (
                f"Importing the visualization file {self.path} failed:\n"
                + "".join(traceback.format_exception(exc))
            )
        function = getattr(module, ENTRY_POINT, None)
        if not callable(function):
            return None, (
                f"The visualization file {self.path} defines no function "
                f"{ENTRY_POINT}(ctx). Define one that returns a Dash component, a plotly "
                "figure or text (or comgra 0.11.5's create_visualization with its 11 "
                "parameters)."
            )
        return function, None

    def render(self, ctx: VisualizationContext) -> Component:
        """The plugin's output for ``ctx`` as a Dash component; errors become a traceback box."""
        function, error = self.load()
        if function is None:
            return error_box("The visualization plugin could not be loaded", error or "")
        try:
            if self.style == comgra.COMGRA:
                if None in (ctx.trial_id, ctx.training_step, ctx.iteration) or ctx.query is None:
                    return html.Div(
                        "Select a trial, a training step and an iteration first.",
                        className="text-muted",
                    )
                result = function(*self._comgra_arguments(ctx))
            else:
                result = function(ctx)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - shown, nothing else breaks
            return error_box(
                f"{ENTRY_POINT}() raised {type(exc).__name__}",
                "".join(traceback.format_exception(exc)),
            )
        try:
            return to_component(result)
        except TypeError as exc:
            return error_box("The visualization plugin returned something unusable", str(exc))


    def _comgra_arguments(self, ctx: VisualizationContext) -> tuple:
        """comgra's 11 arguments; a step's database is kept while the group is unchanged."""
        key = (id(ctx.query), getattr(ctx.query, "version", None), ctx.trial_id,
               ctx.training_step)
        with self._lock:
            db = self._databases.get(key)
        if db is None:
            db = comgra.PseudoDb(ctx.query, ctx.trial_id, ctx.training_step)
            with self._lock:
                self._databases[key] = db
                while len(self._databases) > self._KEEP_DATABASES:
                    self._databases.pop(next(iter(self._databases)))
        selection = comgra.Selection(
            trial_id=ctx.trial_id,
            training_step=ctx.training_step,
            iteration=ctx.iteration,
            graph_node=ctx.graph_node,
            graph_role=ctx.graph_role,
            recording_type=ctx.recording_type,
            aggregation=ctx.aggregation,
            sample_index=ctx.sample_index,
        )
        return comgra.comgra_arguments(ctx.query, selection, db)


def to_component(result: Any) -> Component:
    """A plugin's return value as a Dash component."""
    if result is None:
        return html.Div("The visualization plugin returned nothing.", className="text-muted")
    if isinstance(result, Component):
        return result
    if isinstance(result, go.Figure):
        return dcc.Graph(figure=result, config={"displaylogo": False})
    if isinstance(result, dict) and "data" in result:
        return dcc.Graph(figure=result, config={"displaylogo": False})
    if isinstance(result, str):
        return html.Pre(result, className="plugin-text")
    if isinstance(result, (list, tuple)):
        return html.Div([to_component(item) for item in result])
    raise TypeError(
        f"{ENTRY_POINT}() returned a {type(result).__name__}; return a Dash component, "
        "a plotly figure, a string, a list of those, or None."
    )


def error_box(title: str, details: str) -> Component:
    """A visible error with its traceback (the Visualization tab's error display)."""
    return html.Div(
        [
            html.Div(title, className="fw-semibold mb-1"),
            html.Pre(details, className="plugin-traceback mb-0"),
        ],
        className="alert alert-danger plugin-error",
        role="alert",
    )
