"""The optimizer's state of a module's parameters over the recorded steps, for the
Modules page (``watch(optimizer=)``, docs/OPTIMIZER.md): a pure builder over the rows of
``Group.read_optimizer_state`` and the read behind it (through the query API).

Four small plots side by side: the moments' L2 norms (Adam's m and v, or SGD's
momentum), Adam's effective step size (min, mean, max of lr / (sqrt(v_hat) + eps)), the
update/weight ratio, and the share of elements whose update eps dominates; one line
per parameter of the module (weight, bias, ...).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .figures import Figure, axis, base_layout, empty_figure
from .plot_text import plot_text

#: (title, [(quantity, label)], log axis) of each plot, left to right.
PLOTS = (
    ("moments (L2 norm)", [("exp_avg_norm", "m"), ("exp_avg_sq_norm", "v"),
                           ("momentum_norm", "momentum")], True),
    ("step size lr/(√v̂+eps)", [("step_size_min", "min"), ("step_size_mean", "mean"),
                               ("step_size_max", "max")], True),
    ("update / weight", [("update_ratio", "ratio")], True),
    ("eps-dominated share", [("eps_dominated", "share")], False),
)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
_GAP = 0.06


def module_of(invocation: str) -> str:
    """The module's name of a panel's invocation id (``model.fc#1`` -> ``model.fc``)."""
    return invocation.split("#", 1)[0]


def parameters_of(frame: pd.DataFrame, module: str) -> list[str]:
    """The parameters of ``module`` itself (not of its submodules) in ``frame``."""
    if frame.empty:
        return []
    names = frame["parameter"].astype(str).unique()
    return sorted(n for n in names if n.rpartition(".")[0] == module)


def optimizer_figure(frame: pd.DataFrame, invocation: str, height: int = 240) -> Figure:
    """The optimizer state of the parameters of ``invocation``'s module over steps."""
    module = module_of(invocation)
    params = parameters_of(frame, module)
    if not params:
        return empty_figure(f"No optimizer state of {module}: record with "
                            "watch(model, optimizer=opt).", 120)
    rows = frame[frame["parameter"].isin(params)]
    width = (1 - _GAP * (len(PLOTS) - 1)) / len(PLOTS)
    data: list[dict[str, Any]] = []
    layout = base_layout(plot_text(f"{module} · optimizer state"), height,
                         showlegend=True, legend={"orientation": "h", "y": -0.25,
                                                  "font": {"size": 10}})
    annotations = []
    for i, (title, quantities, log) in enumerate(PLOTS):
        suffix = "" if i == 0 else str(i + 1)
        left = i * (width + _GAP)
        layout[f"xaxis{suffix}"] = axis("step", domain=[left, left + width],
                                        anchor=f"y{suffix}")
        layout[f"yaxis{suffix}"] = axis(None, anchor=f"x{suffix}",
                                        type="log" if log else "linear")
        annotations.append({"text": title, "x": left + width / 2, "y": 1.02,
                            "xref": "paper", "yref": "paper", "showarrow": False,
                            "xanchor": "center", "yanchor": "bottom", "font": {"size": 11}})
        for p_index, param in enumerate(params):
            short = param.rpartition(".")[2]
            for q_index, (quantity, label) in enumerate(quantities):
                series = rows[(rows["parameter"] == param) & (rows["quantity"] == quantity)]
                if series.empty:
                    continue
                series = series.sort_values("training_step")
                data.append({
                    "type": "scatter", "mode": "lines+markers",
                    "x": series["training_step"].tolist(), "y": series["value"].tolist(),
                    "name": f"{short} {label}", "legendgroup": short,
                    "showlegend": i == 0 or len(quantities) > 1,
                    "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                    "line": {"color": _COLORS[(p_index * 3 + q_index) % len(_COLORS)],
                             "width": 1.5},
                    "marker": {"size": 4},
                    "hovertemplate": f"{plot_text(param)} {label}<br>step %{{x}}: "
                                     "%{y:.4g}<extra></extra>",
                })
    layout["annotations"] = annotations
    return {"data": data, "layout": layout}


def optimizer_state(data: Any, trial: str | None, invocation: str) -> pd.DataFrame:
    """The optimizer rows of the parameters of ``invocation``'s module in ``trial`` (an
    empty frame without them), read through the query API and cached per data version."""
    group = getattr(data, "group", None)
    if group is None or trial is None or trial not in data.trial_ids():
        return pd.DataFrame()
    module = module_of(invocation)

    def load() -> pd.DataFrame:
        frame = group.read_optimizer_state(trial)
        # the owning module of each parameter, element by element: pandas 3.1's
        # ``str.rpartition`` gives an empty frame without columns for no rows
        owners = frame["parameter"].astype(str).map(lambda name: name.rpartition(".")[0])
        return frame[owners == module]

    key = ("optimizer_state", trial, data.trial_version(trial), int(group.version), module)
    frame = data.cached(key, lambda: data.safely(
        f"optimizer state of {module} in {trial}", load, None))
    return frame if frame is not None else pd.DataFrame()
