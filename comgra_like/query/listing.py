"""The query API's one way of looking at a group folder: the listing seam.

Every reader of a group learns what is there from listings: the trial folders, each
table folder's shard names (``format/layout.py``), the graph files. On a local disk a
listing is a system call; on an object store it is a request per prefix (paged by 1,000
keys), and the time a refresh takes is the number of listings. So one refresh makes one
:class:`GroupListing`, which lists each folder once, on first use, and every part of the
index asks it: the index of steps, KPIs, notes, tensors and graphs
(``query/index.py``), the watch() tables (``query/watch.py``) and the metrics table
(``query/metrics.py``). The whole-group SQL views and the Spark source
(``query/sql.py``) make one per look at the group, with each object's signature.

A listing is a snapshot: a name that appears after its folder was listed shows at the
next refresh. A read that finds a listed file gone (a compaction replaced it) lists the
folder again at once with :func:`live_now`, which is not cached.

A folder that cannot be listed now (the store does not answer) is not empty: the trials
folder raises StoreUnreachable (the index forgets no trial), any other folder reads as
empty for this refresh and is named in :attr:`GroupListing.unlisted`, so that the index
keeps what it knew of it and reports it.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from ..format.files import Files, files_for, unreachable
from ..format.layout import is_hidden, live_shards, trials_dir


def live_now(files: Files, folder: Path) -> list[str]:
    """The live shard names of ``folder`` as they are now (listed again, never cached),
    in sequence order; hidden names (files being written) left out. StoreUnreachable when
    the folder cannot be listed now."""
    return live_shards([n for n in files.list_now(folder) if not is_hidden(n)])


class GroupListing:
    """What one refresh lists of a group folder, each folder at most once.

    Thread-safe: the SQL views look at the trials of an object store in parallel (each
    asks for folders of its own). :attr:`calls` counts the listings made, per kind and
    folder, so that a test (or a benchmark on an object store) can check that nothing
    is listed twice.
    """

    def __init__(self, group: str | Path, files: Files | None = None):
        self.group = Path(group)
        self.files = files or files_for(group)
        self.trials = trials_dir(self.group)
        self.calls: Counter[tuple[str, str]] = Counter()
        self._folders: list[str] | None = None
        # keyed by the folder's str (hashing a Path costs more than the lookup saves)
        self._names: dict[str, list[str]] = {}
        self._signatures: dict[str, dict[str, tuple[int, int]]] = {}
        self._links: dict[str, list[str]] = {}
        #: folders (their str) that could not be listed now -> why; :meth:`names` gave []
        self.unlisted: dict[str, OSError] = {}
        self._lock = threading.Lock()

    def _count(self, kind: str, key: str) -> None:
        with self._lock:
            self.calls[(kind, key)] += 1

    def trial_folders(self) -> list[str]:
        """The names of the folders in ``trials/``, sorted (hidden and linked ones too:
        the index reports links; callers leave hidden names out). StoreUnreachable when
        the store does not answer: never an empty list that would forget every trial."""
        if self._folders is None:
            self._count("folders", str(self.trials))
            self._folders = sorted(self.files.list_folders(self.trials))
        return self._folders

    def visible_trial_folders(self) -> list[str]:
        """:meth:`trial_folders` without hidden names."""
        return [n for n in self.trial_folders() if not is_hidden(n)]

    def names(self, folder: Path) -> list[str]:
        """The names in ``folder`` without hidden ones (files being written), as listed
        the first time this listing was asked; empty when there is no such folder, and
        when it could not be listed now (then in :attr:`unlisted`)."""
        key = str(folder)
        found = self._names.get(key)
        if found is None:
            self._count("names", key)
            try:
                found = [n for n in self.files.list_now(folder) if not is_hidden(n)]
            except OSError as e:
                if not unreachable(e):
                    raise
                found = []
                with self._lock:
                    self.unlisted[key] = e
            with self._lock:
                self._names[key] = found
        return found

    def listed(self, folder: Path) -> bool:
        """Whether ``folder`` was listed by this listing (asked after :meth:`names`): False
        when the store could not be asked now (it is in :attr:`unlisted`)."""
        return str(folder) not in self.unlisted

    def live(self, folder: Path) -> list[str]:
        """The shard names of ``folder`` a reader should use (``layout.live_shards``: in
        sequence order, those a compacted file supersedes left out)."""
        return live_shards(self.names(folder))

    def signatures(self, folder: Path) -> dict[str, tuple[int, int]]:
        """The files of ``folder`` (hidden ones included) with their (modification time,
        size), from the listing itself (no request per object on an object store)."""
        key = str(folder)
        found = self._signatures.get(key)
        if found is None:
            self._count("signatures", key)
            found = self.files.list_signatures(folder)
            with self._lock:
                self._signatures[key] = found
        return found

    def links(self, folder: Path) -> list[str]:
        """Names of the symbolic links directly in ``folder`` (never on an object
        store), which every access refuses and readers report."""
        key = str(folder)
        found = self._links.get(key)
        if found is None:
            found = self.files.links(folder)
            with self._lock:
                self._links[key] = found
        return found
