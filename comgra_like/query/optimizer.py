"""Reads of the optimizer's recording (``watch(model, optimizer=opt)``, docs/OPTIMIZER.md):
the rows of the metrics table whose metric starts with ``optimizer/``, one row per
(training step, parameter or optimizer, quantity).

``parameter`` is the parameter's full name (``model.fc.weight``) for per-parameter
quantities, ``optimizer`` (``optimizer_<i>`` for the i-th of several) for a step's global
ones (``grad_norm``, ``grad_norm_before_clipping``, ``skipped``, ``loss_scale``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigurationError

PREFIX = "optimizer/"
#: The columns of ``read_optimizer_state``, in this order.
COLUMNS = ["training_step", "parameter", "optimizer", "quantity", "value"]
#: Quantities that are a step's, not a parameter's.
GLOBAL = ("grad_norm", "grad_norm_before_clipping", "skipped", "loss_scale")


def _names(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        return [str(v) for v in value]
    except TypeError:
        raise ConfigurationError(f"{what} must be a name or a list of names, got "
                                 f"{type(value).__name__}") from None


def read_optimizer_state(group, trial_id: str, *, parameters: Any = None,
                         quantities: Any = None, steps: Any = None,
                         rank: int | None = None) -> pd.DataFrame:
    """The optimizer quantities of a trial of ``group`` (a ``comgra_like.query.Group``)
    as a DataFrame with the columns :data:`COLUMNS`, sorted by (parameter, quantity,
    training_step). ``parameters``, ``quantities`` (without the ``optimizer/`` prefix)
    and ``steps`` filter (a value or a list); ``rank``: one rank of a distributed
    recording (the lowest by default). ``optimizer`` is the optimizer's class name.
    An empty frame for a trial recorded without ``optimizer=``."""
    wanted = _names(quantities, "quantities")
    metric = None if wanted is None else [PREFIX + q for q in wanted]
    frame = group.read_metrics(trial_id, module=_names(parameters, "parameters"),
                               metric=metric, steps=steps, rank=rank)
    frame = frame[frame["metric"].astype(str).str.startswith(PREFIX)]
    out = pd.DataFrame({
        "training_step": frame["training_step"].to_numpy(np.int64),
        "parameter": frame["module"].astype(str).to_numpy(),
        "optimizer": frame["module_class"].astype(str).to_numpy(),
        "quantity": frame["metric"].astype(str).str.slice(len(PREFIX)).to_numpy(),
        "value": frame["value"].to_numpy(np.float64),
    }, columns=COLUMNS)
    return out.sort_values(["parameter", "quantity", "training_step"],
                           kind="stable").reset_index(drop=True)


def optimizer_table(frame: pd.DataFrame, parameter: str) -> pd.DataFrame:
    """One parameter's quantities over steps: a wide frame indexed by training step,
    one column per quantity (for plotting)."""
    rows = frame[frame["parameter"] == parameter]
    if rows.empty:
        return pd.DataFrame()
    return rows.pivot_table(index="training_step", columns="quantity", values="value",
                            aggfunc="last").sort_index()
