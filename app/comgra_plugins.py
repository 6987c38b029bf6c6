"""Visualization files written for comgra 0.11.5, run on comgra_like's recordings.

comgra calls ``create_visualization(recordings, type_of_execution, tsc, ngs, db,
training_step_value, type_of_recording_value, batch_aggregation_value, iteration_value,
node_name, role_of_tensor_in_node_value)``. :func:`plugin_style` recognises that
signature (11 positional parameters with exactly these names) next to the native
``create_visualization(ctx)``; :func:`comgra_arguments` builds the 11 arguments for the
current selection from the query API. Nothing here writes or imports torch.

What a comgra plugin gets, in comgra's vocabulary, for the selected trial and step:

- ``db.get_matches(filters)`` (:class:`PseudoDb`): the filter keys are comgra's
  attributes ``training_step``, ``type_of_tensor_recording``, ``batch_aggregation``,
  ``iteration``, ``node_name``, ``role_within_node``, ``record_type``, ``item``,
  ``metadata`` (another key raises ``ConfigurationError``); each filter is compared
  with ``==``. It returns ``(list_of_matches, possible_attribute_values)`` like comgra:
  each match is ``(key, value)`` with ``key`` the 9 attribute values in that order, and
  ``possible_attribute_values`` maps every attribute to the values it could take while
  all other filters still match. ``db.attributes`` lists the attributes.
- the records: ``record_type='data'`` with ``item`` ``mean``, ``abs_mean``, ``std``,
  ``abs_max`` (``metadata`` None), ``svd`` for 2-D parameters (forward), ``neuron`` with
  ``metadata`` the neuron's index as text (``'3'``, ``'1, 2'`` for 2-D; tensors recorded
  with values), ``single_value`` for losses; ``record_type='meta_information'`` with
  ``item`` ``tensor_shape`` (a list, batch dimension included) and
  ``index_of_batch_dimension`` (int or None), whose ``type_of_tensor_recording`` and
  ``batch_aggregation`` are ``'not_applicable'``.
- the vocabulary: ``type_of_tensor_recording`` ``'forward'``, the loss group's own name
  for gradients (comgra_like's ``'gradient:<group>'``) and comgra_like's ``'update'``;
  ``batch_aggregation`` ``'batch_mean'``, ``'batch_abs_max'``, ``'batch_std'``,
  ``'has_no_batch_dimension'`` (comgra_like's ``'none'``) and ``'Sample <i>'`` (``'Sample
  <i> | <category>'`` with comgra's zero padding when the step has sample categories);
  node names with the ``node__`` prefix. As in comgra, a node shown in an iteration's
  graph but stored elsewhere (parameters, initial values, values imported from an
  earlier iteration) is ``node__<name>*old`` in that iteration, its role gets
  ``__from_initialization`` / ``__from_iteration_<k>`` (not for parameters), and data
  of iteration -1 is only found through those names. An imported value is named after
  the tensor's last registration, as comgra does (``node__memory*old`` /
  ``memory_out__from_iteration_0``), and also after its first (comgra_like's graph). A
  tensor registered under a second name is found under both.
- ``tsc`` (:class:`TrainingStepConfiguration`): ``type_of_execution``,
  ``graph_configuration_per_iteration`` (one entry per iteration of the step, with
  ``hash_of_node_graph_structure`` and ``tensor_graph_structure.tensor_references`` /
  ``tensor_connections``) and ``modules_and_parameters``.
- ``ngs`` (:class:`NodeGraphStructure`) of the selected iteration: ``name_to_node``
  (``Node(full_unique_name, type_of_tensor)``), ``node_connections``, ``dag_format``
  (columns by longest path from the sources; comgra_like's own layout may differ) and
  ``node_graph_hash``.
- ``recordings``: an object whose ``recordings`` attribute is ``db``.
- ``type_of_execution``: the selected step's type of execution (never comgra's filter
  value ``'any_value'``).

Differences in the data: comgra records a gradient of zeros for a tensor that got none;
comgra_like records no gradient there, so such records are missing. ``svd`` is there for
the forward values of 2-D parameters only (comgra also has it for their gradients).
Checked on comgra's tutorial: apart from these, every key comgra's database has for a
step is there; the extra keys are comgra_like's ``update`` records and its own names of
imported values.

Where it lives: this module (the two plugin forms, :class:`Selection`,
:func:`comgra_arguments`) over ``comgra_db.py`` (:class:`PseudoDb`),
``comgra_objects.py`` (comgra's ``objects`` classes, built from our graphs) and
``comgra_names.py`` (comgra's vocabulary and node names). A plugin imports every name
from here.

Not supported: comgra's own modules (``import comgra...``: a plugin imports these
classes from ``comgra_like.app.comgra_plugins`` instead); ``dash_svg`` (not a
dependency); ``PseudoDb``'s writing and indexing methods (``add_record_value``,
``create_index``, ``serialize``, ``merge``); TensorReference ``previous_reference`` chains
(always None); and the order of the matches, which comgra does not promise either.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from comgra_like.errors import NotFoundError

from .comgra_db import PseudoDb, TensorRecordings, read_graphs, sample_categories
from .comgra_names import (
    ATTRIBUTES,
    DATA,
    META,
    NO_BATCH_DIMENSION,
    NODE_PREFIX,
    NOT_APPLICABLE,
    OLD_SUFFIX,
    STAT_ITEMS,
    Naming,
    comgra_batch_aggregation,
    comgra_node_name,
    comgra_recording_type,
    comgra_role,
    is_old,
    stored_location,
)
from .comgra_objects import (
    GraphConfigurationOfOneIteration,
    ModuleRepresentation,
    Node,
    NodeGraphStructure,
    ParameterRepresentation,
    TensorGraphStructure,
    TensorReference,
    TrainingStepConfiguration,
    graph_configuration,
    modules_and_parameters,
    node_graph_structure,
)

# comgra_names', comgra_objects' and comgra_db's names are re-exported: plugins (comgra's
# "from comgra.objects import ..." becomes an import from here), plugin.py and the tests
# import them from this module.
__all__ = [
    "ATTRIBUTES",
    "COMGRA",
    "COMGRA_PARAMETERS",
    "DATA",
    "META",
    "NATIVE",
    "NODE_PREFIX",
    "NOT_APPLICABLE",
    "NO_BATCH_DIMENSION",
    "OLD_SUFFIX",
    "STAT_ITEMS",
    "GraphConfigurationOfOneIteration",
    "ModuleRepresentation",
    "Naming",
    "Node",
    "NodeGraphStructure",
    "ParameterRepresentation",
    "PseudoDb",
    "Selection",
    "TensorGraphStructure",
    "TensorRecordings",
    "TensorReference",
    "TrainingStepConfiguration",
    "comgra_arguments",
    "comgra_batch_aggregation",
    "comgra_node_name",
    "comgra_recording_type",
    "comgra_role",
    "graph_configuration",
    "is_old",
    "modules_and_parameters",
    "node_graph_structure",
    "plugin_style",
    "read_graphs",
    "sample_categories",
    "stored_location",
]

COMGRA_PARAMETERS: tuple[str, ...] = (
    "recordings",
    "type_of_execution",
    "tsc",
    "ngs",
    "db",
    "training_step_value",
    "type_of_recording_value",
    "batch_aggregation_value",
    "iteration_value",
    "node_name",
    "role_of_tensor_in_node_value",
)
NATIVE, COMGRA = "native", "comgra"


# --- detecting the form of a plugin ------------------------------------------------------


def plugin_style(function: Callable[..., Any]) -> tuple[str | None, str | None]:
    """(``'native'`` or ``'comgra'``, None), or (None, what is wrong with the signature)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function: called as the native form
        return NATIVE, None
    positional = [
        p for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is p.empty]
    if tuple(p.name for p in positional[: len(COMGRA_PARAMETERS)]) == COMGRA_PARAMETERS and (
        len(required) <= len(COMGRA_PARAMETERS)
    ):
        return COMGRA, None
    if len(required) <= 1 and (positional or any(p.kind == p.VAR_POSITIONAL for p in parameters)):
        return NATIVE, None
    names = ", ".join(p.name for p in parameters)
    return None, (
        f"create_visualization({names}) has neither supported signature. Define "
        "create_visualization(ctx) (comgra_like's form), or comgra 0.11.5's "
        f"create_visualization({', '.join(COMGRA_PARAMETERS)}) with these 11 parameter "
        "names in this order."
    )


@dataclass(frozen=True)
class Selection:
    """What comgra_arguments needs of the GUI's selection (comgra_like's names)."""

    trial_id: str
    training_step: int
    iteration: int | None
    graph_node: str | None  # the node's name in the graph of ``iteration``
    graph_role: str | None
    recording_type: str | None
    aggregation: str | None
    sample_index: int = -1


def comgra_arguments(query: Any, selection: Selection, db: PseudoDb | None = None) -> tuple:
    """The 11 arguments comgra 0.11.5 passes to ``create_visualization``."""
    trial, step = selection.trial_id, int(selection.training_step)
    if db is None:
        db = PseudoDb(query, trial, step)
    steps = query.list_steps(trial)
    steps = steps[steps["training_step"] == step].sort_values("iteration")
    if steps.empty:
        raise NotFoundError(f"trial {trial!r} has no recorded step {step}")
    type_of_execution = str(steps["type_of_execution"].iloc[0])
    configurations = [
        graph_configuration(graph, iteration, db.naming) for iteration, graph in db.graphs.items()
    ]
    tsc = TrainingStepConfiguration(type_of_execution, modules_and_parameters(query, trial),
                                    configurations)
    iteration = selection.iteration
    graph = db.graphs.get(iteration) if iteration is not None else None
    ngs = (
        node_graph_structure(graph, iteration, db.naming) if graph is not None
        else NodeGraphStructure({})
    )
    node = (
        next((n for n in graph.nodes if n.name == selection.graph_node), None)
        if graph is not None else None
    )
    node_name = role = None
    if node is not None:
        node_name = db.naming.node_name(node, iteration)
        if selection.graph_role is not None:
            node_name, role = db.naming.names(node, selection.graph_role, iteration)[0]
    categories, batch_size = sample_categories(steps)
    aggregation = (
        comgra_batch_aggregation(selection.aggregation, selection.sample_index, categories,
                                 batch_size)
        if selection.aggregation else None
    )
    recording_type = (
        comgra_recording_type(selection.recording_type) if selection.recording_type else None
    )
    return (
        TensorRecordings(db), type_of_execution, tsc, ngs, db,
        step, recording_type, aggregation, iteration, node_name, role,
    )
