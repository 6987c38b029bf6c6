"""The recorder's small pure helpers: arguments checked, steps as int64, which samples
of a batch are recorded, a registered tensor's kind for the flight recorder."""

from __future__ import annotations

import numbers

from ..errors import ConfigurationError, RecordingDecisionError
from ..format.schema import MAX_TRIAL_ID_LENGTH, TRIAL_ID_PATTERN, TYPE_OF_EXECUTION_PATTERN
from ..objects import DecisionMakerForRecordings
from ..vocabulary import ANY_TYPE

INT64_MAX = 2**63 - 1
INT64_MIN_ABS = 2**63


def as_step(value, what: str) -> int:
    """An int64 training step or timepoint; a ConfigurationError that names ``value`` else."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
        if -INT64_MIN_ABS <= value <= INT64_MAX:
            return value
        raise ConfigurationError(
            f"{what}: {value} does not fit into a 64-bit integer; count steps from 0"
        )
    raise ConfigurationError(
        f"{what}: expected an integer, got {value!r} ({type(value).__name__}); pass the "
        "number of the training step as an int"
    )


def round_robin(categories: list[str], k: int) -> tuple[list[int], list[str]]:
    """Pick up to ``k`` sample indices, cycling over the categories in order of appearance."""
    queues: dict[str, list[int]] = {}
    for i, c in enumerate(categories):
        queues.setdefault(c, []).append(i)
    picked: list[int] = []
    pos = dict.fromkeys(queues, 0)
    while len(picked) < k and any(pos[c] < len(q) for c, q in queues.items()):
        for c, q in queues.items():
            if pos[c] < len(q) and len(picked) < k:
                picked.append(q[pos[c]])
                pos[c] += 1
    order = sorted(picked)
    return order, [categories[i] for i in order]


def flight_kind(is_input: bool, is_target: bool, is_loss: bool, is_parameter: bool) -> str:
    """A registered tensor's kind, as the flight recorder names it."""
    return ("loss" if is_loss else "input" if is_input else "target" if is_target
            else "parameter" if is_parameter else "calculated")


def check_arguments(decision_maker_for_recordings, max_num_batch_size_to_record, trial_id,
                    group) -> tuple[str, str]:
    """ComgraRecorder's arguments checked before anything is made; returns the trial id
    and the group as strings."""
    if not isinstance(decision_maker_for_recordings, DecisionMakerForRecordings):
        raise ConfigurationError(
            "decision_maker_for_recordings must be a decision maker from comgra_like.objects "
            "(e.g. DecisionMakerForRecordingsFrequencyPerType(10)), got "
            f"{decision_maker_for_recordings!r}"
        )
    if max_num_batch_size_to_record is not None and (
        not isinstance(max_num_batch_size_to_record, int)
        or isinstance(max_num_batch_size_to_record, bool) or max_num_batch_size_to_record < 0
    ):
        raise ConfigurationError(
            "max_num_batch_size_to_record must be None (all samples), 0 (batch statistics "
            "only, no per-sample rows) or a positive integer, got "
            f"{max_num_batch_size_to_record!r}"
        )
    trial_id = str(trial_id)
    if not TRIAL_ID_PATTERN.match(trial_id):
        raise ConfigurationError(
            f"trial_id {trial_id!r} is not a valid trial id: use 1 to "
            f"{MAX_TRIAL_ID_LENGTH} letters, digits, '.', '_' and '-', not starting with "
            "'.' (e.g. 'run-3' or 'lr_0.01')"
        )
    group = str(group)
    if (not group or group in (".", "..") or "/" in group or "\\" in group
            or any(c in group for c in "\n\r\0")):
        raise ConfigurationError(
            f"group {group!r} must be one folder name (no path separators, no line "
            "breaks); put the parent folders into comgra_root_path"
        )
    return trial_id, group


def categories_of(category_per_sample, batch_size: int) -> list[str]:
    """``decide_recording_of_batch``'s categories, one string per sample of the batch."""
    if isinstance(category_per_sample, (str, bytes)):
        raise RecordingDecisionError(
            "category_per_sample must hold one category per sample (a list or a "
            f"tensor), got the string {category_per_sample!r}"
        )
    try:
        categories = [str(c) for c in (category_per_sample.tolist() if hasattr(
            category_per_sample, "tolist") else category_per_sample)]
    except TypeError:
        raise RecordingDecisionError(
            "category_per_sample must hold one category per sample (a list or a "
            f"tensor), got {type(category_per_sample).__name__}"
        ) from None
    if len(categories) != batch_size:
        raise RecordingDecisionError(
            f"category_per_sample has {len(categories)} entries but the batch has "
            f"{batch_size} samples"
        )
    return categories


def check_type_of_execution(type_of_execution) -> None:
    """A type of execution a loop may use: letters, digits, '_' and '-', not reserved."""
    if not isinstance(type_of_execution, str) or not TYPE_OF_EXECUTION_PATTERN.match(
        type_of_execution
    ):
        raise ConfigurationError(
            f"type_of_execution {type_of_execution!r} may only contain letters, digits, "
            "'_' and '-'"
        )
    if type_of_execution == ANY_TYPE or type_of_execution.startswith("__"):
        raise ConfigurationError(
            f"type_of_execution {type_of_execution!r} is reserved for the GUI; choose another"
        )
