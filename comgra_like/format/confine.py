"""Group confinement of the local disk: nothing inside a group's ``trials/`` folder is
reached through a symbolic link.

A group folder may come from elsewhere (a copied or downloaded recording, a shared
folder), and a link inside it could lead anywhere: the GUI would show any readable file
as a trial's notes, and write a Flow page request wherever a linked folder points. So
every read, write, listing and look-up of :data:`~comgra_like.format.files.LOCAL` first
checks the part of its path from ``trials`` on (``<group>/trials/<trial>/...``,
docs/FORMAT.md): none of those folders or files may be a symbolic link, and none may be
``..``. Then the path resolves inside the group folder. The group folder itself, and
the folders above it, may be links (``comgra --path`` through a linked data disk).

A refused path is not followed: reads and writes raise :class:`UnsafePathError`
(a :class:`~comgra_like.errors.StorageError`, so every reader skips it as it skips a
damaged file), look-ups answer "not there", and the first refusal of each path is
logged once. Object stores have no links; nothing here applies to them.

The check is made at each access (an ``lstat`` per path component below ``trials``, a
few microseconds); it keeps links that are in the group out, not a process that swaps a
folder for a link between the check and the access.
"""

from __future__ import annotations

import logging
import os
import threading

from ..errors import UnsafePathError
from .layout import TRIALS_DIR

log = logging.getLogger("comgra_like")

_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()
#: Paths warned about are remembered up to this many (then the set starts again).
_MAX_WARNED = 10_000


def refusal(path: str | os.PathLike) -> str | None:
    """Why ``path`` must not be used (a sentence naming the link), or None when it may.

    The part checked starts at the last ``trials`` component of the path (the group's
    trials folder); a path without one is outside every trial and not checked.
    """
    text = os.fspath(path)
    parts = text.split(os.sep)
    try:
        start = len(parts) - 1 - parts[::-1].index(TRIALS_DIR)
    except ValueError:
        return None
    group = os.sep.join(parts[:start]) or (os.sep if text.startswith(os.sep) else ".")
    if ".." in parts[start:]:
        return (f"{text}: '..' below the group folder {group} is refused (it could lead "
                "out of the group)")
    current = os.sep.join(parts[:start])
    for part in parts[start:]:
        if not part:
            continue
        current = os.path.join(current, part) if current else part
        if os.path.islink(current):
            return (f"{current} is a symbolic link inside the group folder {group}; "
                    "comgra_like does not follow links inside a group (they could lead "
                    "anywhere): replace it by the folder or file itself")
    return None


def warn_once(reason: str) -> None:
    """Log a refusal, once per reason (the reason names the path)."""
    with _WARNED_LOCK:
        if reason in _WARNED:
            return
        if len(_WARNED) >= _MAX_WARNED:
            _WARNED.clear()
        _WARNED.add(reason)
    log.warning("not followed: %s", reason)


def allowed(path: str | os.PathLike) -> bool:
    """Whether a look-up may look at ``path`` (a refused one is logged once)."""
    reason = refusal(path)
    if reason is None:
        return True
    warn_once(reason)
    return False


def check(path: str | os.PathLike, action: str) -> None:
    """Raise :class:`UnsafePathError` when ``path`` is refused (``action``: "read",
    "write", ... names what was refused)."""
    reason = refusal(path)
    if reason is not None:
        warn_once(reason)
        raise UnsafePathError(f"refused to {action} {os.fspath(path)}: {reason}")


def links(folder: str | os.PathLike) -> list[str]:
    """The names of the symbolic links directly in ``folder`` (empty when it cannot be
    listed): what a listing leaves for readers to refuse, for them to report."""
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries if e.is_symlink())
    except OSError:
        return []
