"""Example plugin for the Visualization tab: the tutorial's running sums as curves.

Use it with ``comgra --path GROUP --visualization-file THIS_FILE``.

The tutorial (``comgra-test-run``) records a helper node ``helper_partial_sums`` on the
last iteration of every recorded step. It has one role per iteration,
``up_to_iteration_00``, ``up_to_iteration_01``, ...: the sum of each of the 5 input
channels from the first step of the sequence up to that iteration. Each role alone is
one point per channel; this plugin draws all of them as 5 curves over the iterations,
for the selected training step and the selected sample or batch aggregate. A channel's
target is 1 exactly when its curve ends above zero.

A plugin gets one argument, ``ctx``: the GUI's current selection (``ctx.trial_id``,
``ctx.training_step``, ``ctx.type_of_execution``, ``ctx.iteration``, ``ctx.node``,
``ctx.role``, ``ctx.recording_type``, ``ctx.aggregation``, ``ctx.sample_index``) and
``ctx.query``, the read API of the open group (see docs/QUERY_API.md). It returns a
Dash component, a plotly figure or text. The GUI calls it again whenever the selection
changes and re-imports this file when it changes on disk, so you can edit it while the
GUI runs. It needs no torch.
"""

from __future__ import annotations

import plotly.graph_objects as go

from comgra_like.errors import NotFoundError

HELPER_NODE = "helper_partial_sums"
ROLE_PREFIX = "up_to_iteration_"
AGGREGATION_LABELS = {
    "batch_mean": "mean over the batch",
    "batch_abs_max": "largest absolute value in the batch",
    "batch_std": "standard deviation over the batch",
}


def create_visualization(ctx):
    if ctx.trial_id is None or ctx.training_step is None:
        return "Select a trial and a training step first."
    if ctx.node != HELPER_NODE:
        return (
            f"This tab plots the node '{HELPER_NODE}' of the tutorial: the running sum of "
            "each of the 5 input channels, one curve per channel over the iterations.\n\n"
            f"Select the node '{HELPER_NODE}' in the dependency graph (it is recorded on "
            "the last iteration of each training step, so select that iteration), then "
            "choose 'Sample 0', 'Sample 1', ... or a batch aggregate.\n\n"
            f"Currently selected: node {ctx.node!r}, iteration {ctx.iteration!r}."
        )

    aggregation = ctx.aggregation
    sample_index = ctx.sample_index if aggregation == "sample" else -1
    if aggregation not in ("sample", *AGGREGATION_LABELS):
        return f"Choose a sample or a batch aggregate; '{aggregation}' does not apply here."

    # Which iteration holds the helper node, and which roles (one per iteration) it has.
    listing = ctx.query.list_tensors(ctx.trial_id, ctx.training_step)
    rows = listing[
        (listing["node"] == HELPER_NODE)
        & (listing["recording_type"] == "forward")
        & (listing["aggregation"] == aggregation)
        & (listing["sample_index"] == sample_index)
    ]
    if rows.empty:
        return (
            f"Nothing recorded for '{HELPER_NODE}' at step {ctx.training_step} "
            f"({aggregation}, sample {sample_index})."
        )
    iteration = int(rows["iteration"].max())
    roles = sorted(
        (int(role[len(ROLE_PREFIX):]), role)
        for role in set(rows.loc[rows["iteration"] == iteration, "role"])
        if role.startswith(ROLE_PREFIX) and role[len(ROLE_PREFIX):].isdigit()
    )

    # One read per role: each gives the 5 channels' sums up to that iteration.
    xs = [number for number, _ in roles]
    curves = []
    for _, role in roles:
        record = ctx.query.read_tensor(
            ctx.trial_id, ctx.training_step, iteration, HELPER_NODE, role,
            "forward", aggregation, sample_index,
        )
        curves.append([float(v) for v in record.values.reshape(-1)])
    channels = len(curves[0]) if curves else 0
    targets = _read_targets(ctx, iteration, aggregation, sample_index)

    figure = go.Figure()
    for channel in range(channels):
        name = f"channel {channel}"
        if targets is not None and channel < len(targets):
            name += f" (target {targets[channel]:g})"
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=[curve[channel] for curve in curves],
                mode="lines+markers",
                name=name,
            )
        )
    figure.add_hline(y=0, line_dash="dot", line_color="gray")
    what = (
        f"sample {sample_index}" if aggregation == "sample" else AGGREGATION_LABELS[aggregation]
    )
    figure.update_layout(
        title=(
            f"Running sums of the 5 input channels - {ctx.trial_id}, step "
            f"{ctx.training_step}, {what}"
        ),
        xaxis={"title": {"text": "iteration"}, "dtick": 1},
        yaxis_title="sum of the inputs so far",
        hovermode="x unified",
        legend_title_text="target 1 = ends above 0",
    )
    return figure


def _read_targets(ctx, iteration, aggregation, sample_index):
    """The sample's targets (for the legend), or None for batch aggregates."""
    if aggregation != "sample":
        return None
    try:
        record = ctx.query.read_tensor(
            ctx.trial_id, ctx.training_step, iteration, "target", "target",
            "forward", "sample", sample_index,
        )
    except NotFoundError:  # the legend just goes without targets
        return None
    if record.values is None:
        return None
    return [float(v) for v in record.values.reshape(-1)]
