"""Decision makers: which training steps get recorded; TensorReference.

Importable as ``comgra_like.objects`` (the counterpart of ``comgra.objects``).
No torch needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ConfigurationError


class DecisionMakerForRecordings:
    """Base class. A decision maker answers one question per training step."""

    def is_record_on_this_step(self, training_step: int, type_of_execution: str) -> bool:
        """Whether ``training_step`` of ``type_of_execution`` should be recorded."""
        raise NotImplementedError

    def mark_recorded(self, training_step: int, type_of_execution: str) -> None:
        """Called once a step of that type was actually recorded."""

    def could_record_any(self, training_step: int, known_types: Iterable[str]) -> bool:
        """Whether some type in ``known_types`` would record at ``training_step``.

        Used by dynamic recording once all types of execution are known: if no type
        could record, the recorder skips the step early.
        """
        return any(self.is_record_on_this_step(training_step, t) for t in known_types)


class DecisionMakerForRecordingsHardcoded(DecisionMakerForRecordings):
    """Record exactly the given training steps, whatever their type of execution."""

    def __init__(self, fixed_training_steps: Iterable[int]):
        try:
            steps = {int(s) for s in fixed_training_steps}
        except (TypeError, ValueError) as e:
            raise ConfigurationError(
                "DecisionMakerForRecordingsHardcoded(fixed_training_steps=...) needs an "
                f"iterable of integers, got {fixed_training_steps!r}"
            ) from e
        self.fixed_training_steps = frozenset(steps)

    def is_record_on_this_step(self, training_step: int, type_of_execution: str) -> bool:
        return training_step in self.fixed_training_steps

    def __repr__(self) -> str:
        return f"DecisionMakerForRecordingsHardcoded({sorted(self.fixed_training_steps)})"


class DecisionMakerForRecordingsFrequencyPerType(DecisionMakerForRecordings):
    """Record a type of execution when enough steps have passed since its last recording.

    A type never seen before records at once. After each recording the required gap
    of that type is multiplied by ``exponential_backoff_factor``.
    """

    def __init__(self, min_training_steps_difference: int, exponential_backoff_factor: float = 1.0):
        if (not isinstance(min_training_steps_difference, int)
                or isinstance(min_training_steps_difference, bool)
                or min_training_steps_difference < 1):
            raise ConfigurationError(
                "min_training_steps_difference must be a positive integer, got "
                f"{min_training_steps_difference!r}"
            )
        if isinstance(exponential_backoff_factor, bool) or not isinstance(
                exponential_backoff_factor, (int, float)) or not exponential_backoff_factor >= 1.0:
            raise ConfigurationError(
                "exponential_backoff_factor must be >= 1.0 (1.0 keeps a constant gap), got "
                f"{exponential_backoff_factor!r}"
            )
        self.min_training_steps_difference = min_training_steps_difference
        self.exponential_backoff_factor = float(exponential_backoff_factor)
        self._last_recorded: dict[str, int] = {}
        self._gap: dict[str, float] = {}

    def is_record_on_this_step(self, training_step: int, type_of_execution: str) -> bool:
        last = self._last_recorded.get(type_of_execution)
        if last is None:
            return True
        gap = self._gap.get(type_of_execution, float(self.min_training_steps_difference))
        return training_step - last >= gap

    def mark_recorded(self, training_step: int, type_of_execution: str) -> None:
        if type_of_execution in self._last_recorded:
            self._gap[type_of_execution] = (
                self._gap.get(type_of_execution, float(self.min_training_steps_difference))
                * self.exponential_backoff_factor
            )
        self._last_recorded[type_of_execution] = training_step

    def __repr__(self) -> str:
        return (
            "DecisionMakerForRecordingsFrequencyPerType("
            f"min_training_steps_difference={self.min_training_steps_difference}, "
            f"exponential_backoff_factor={self.exponential_backoff_factor})"
        )


@dataclass(frozen=True)
class TensorReference:
    """A registered tensor by its name and iteration, as comgra's ``TensorReference``.

    ``add_tensor_connection`` accepts it wherever it accepts a tensor or a name. A
    reference that is not canonical stands for the tensor its ``previous_reference``
    chain ends at (comgra's meaning: the same tensor shown again in a later iteration).
    """

    tensor_name: str
    iteration: int
    node_name: str | None = None
    role_within_node: str | None = None
    is_canonical_reference: bool = True
    previous_reference: TensorReference | None = None

    def get_canonical_reference(self) -> TensorReference:
        ref = self
        while not ref.is_canonical_reference and ref.previous_reference is not None:
            ref = ref.previous_reference
        return ref
