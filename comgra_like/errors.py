"""Exception types raised by comgra_like.

Every misuse of the recorder API or the query API raises a subclass of
:class:`ComgraError`. Messages say what was wrong and how to fix it; none of
them is raised by a bare ``assert``.
"""

from __future__ import annotations


class ComgraError(Exception):
    """Base class of every error comgra_like raises on purpose."""


class ConfigurationError(ComgraError, ValueError):
    """An argument to the recorder or the GUI has an invalid value."""


class CallOrderError(ComgraError, RuntimeError):
    """A recorder method was called at a point of the training loop where it is not allowed."""


class TrainingStepError(ComgraError, ValueError):
    """Training steps passed to ``start_batch`` do not strictly increase."""


class RegistrationError(ComgraError, ValueError):
    """A tensor could not be registered (bad name, shape, dtype, duplicate, ...)."""


class GraphError(ComgraError, RuntimeError):
    """The dependency graph could not be built (unregistered leaf, cycle, ...)."""


class RecordingDecisionError(ComgraError, RuntimeError):
    """Dynamic recording was used wrongly (gradients before the decision, ...)."""


class StorageError(ComgraError, OSError):
    """A recording could not be written or read."""


class NotFoundError(ComgraError, LookupError):
    """The query API was asked for a trial, step or tensor that is not recorded."""


class UnsafePickleError(StorageError):
    """An imported pickle (vnittest's flow_info.pkl) names a global outside the few that
    rebuild plain containers, strings, numbers and numpy arrays; it was not loaded."""


class UnsafePathError(StorageError):
    """A path inside a group's ``trials/`` folder goes through a symbolic link (or
    ``..``): comgra_like does not follow it, to read or to write (docs/RELIABILITY.md)."""


class ReadOnlyError(ComgraError, PermissionError):
    """The GUI was asked to write into a group it serves read-only (``comgra --read-only``,
    the default when it listens beyond this machine)."""


class FlightTriggerError(ComgraError, RuntimeError):
    """An armed ``FlightRecorder(on_trigger="raise")`` saw a trigger (a non-finite value,
    a spike, the user's predicate); the window of steps before it is written into the
    trial's ``flight/`` folder before this is raised (docs/FLIGHT.md)."""
