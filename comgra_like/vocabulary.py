"""The words a recording is described in, defined once for the recorder, the writer, the
query API and the GUI (and the same words as in docs/FORMAT.md).

Nothing here imports torch, pyarrow or dash: every process and the GUI import it.
"""

from __future__ import annotations

from collections.abc import Mapping

# --- kinds: the role flags of register_tensor, which colour a node ---------------------
INPUT, CALCULATED, PARAMETER, TARGET, LOSS = "input", "calculated", "parameter", "target", "loss"
KINDS: tuple[str, ...] = (INPUT, CALCULATED, PARAMETER, TARGET, LOSS)

# --- recording types: which quantity of a tensor a row holds ---------------------------
FORWARD = "forward"  # the value in the forward pass
UPDATE = "update"  # the optimizer's change of a parameter over the step
GRADIENT_PREFIX = "gradient:"  # + the loss group of record_current_gradients


def gradient_type(loss_group: str) -> str:
    """The recording type of the gradients recorded under ``loss_group``."""
    return GRADIENT_PREFIX + loss_group


def is_gradient(recording_type: str) -> bool:
    return recording_type.startswith(GRADIENT_PREFIX)


def loss_group_of(recording_type: str) -> str | None:
    """The loss group of a gradient recording type, else None."""
    if recording_type.startswith(GRADIENT_PREFIX):
        return recording_type[len(GRADIENT_PREFIX):]
    return None


# --- what register_tensor(recording_type=...) stores (comgra's name for the option) ----
# Not a recording type above: comgra's argument chooses how much of a tensor is stored.
# Internally it is the "storage option".
STORE_VALUES = "neuron"  # statistics and every value (the default)
STORE_STATISTICS = "kpis"  # statistics only
STORAGE_OPTIONS: tuple[str, ...] = (STORE_VALUES, STORE_STATISTICS)

# --- aggregations: over which samples a row's numbers are taken ------------------------
BATCH_MEAN, BATCH_ABS_MAX, BATCH_STD = "batch_mean", "batch_abs_max", "batch_std"
SAMPLE = "sample"  # one recorded sample (sample_index >= 0)
NO_BATCH = "none"  # a tensor without a batch dimension (parameters, losses)
BATCH_AGGREGATIONS: tuple[str, ...] = (BATCH_MEAN, BATCH_ABS_MAX, BATCH_STD)
AGGREGATIONS: tuple[str, ...] = (*BATCH_AGGREGATIONS, SAMPLE, NO_BATCH)

# --- statistics: columns of the tensors table -------------------------------------------
# Computed by the writer for every row, in this order (the writer's arrays are indexed by
# position: use STATISTIC_INDEX, never a literal number).
STATISTICS: tuple[str, ...] = (
    "mean", "abs_mean", "std", "abs_max", "min", "max", "norm", "nan_count", "inf_count",
)
STATISTIC_INDEX: Mapping[str, int] = {name: i for i, name in enumerate(STATISTICS)}
# Also columns, but not per-row reductions of the values.
EXTRA_STATISTICS: tuple[str, ...] = ("numel", "svd_top", "update_ratio")
ALL_STATISTICS: tuple[str, ...] = STATISTICS + EXTRA_STATISTICS
COUNT_STATISTICS = frozenset({"nan_count", "inf_count", "numel"})

#: How the GUI labels each statistic.
STATISTIC_LABELS: Mapping[str, str] = {
    "mean": "mean",
    "abs_mean": "mean |x|",
    "std": "std",
    "abs_max": "max |x|",
    "min": "min",
    "max": "max",
    "norm": "L2 norm",
    "nan_count": "NaN count",
    "inf_count": "inf count",
    "numel": "values",
    "svd_top": "top singular value",
    "update_ratio": "‖update‖ / ‖weight‖",
}

# --- types of execution ------------------------------------------------------------------
DEFAULT_TYPE_OF_EXECUTION = "main_execution_type"
#: The GUI's "no filter" option; reserved, like every name starting with "__".
ANY_TYPE = "any"

# --- trial status (trial.json) ----------------------------------------------------------
RUNNING, FINISHED, ABORTED = "running", "finished", "aborted"
