"""A store that fails the calls a test chooses, the way an object store that refuses
connections fails them: the local disk behind the filesystem seam (``format/files.py``)
with rules. Shared by the tests of what the readers do when the store cannot be read now
(tests/query/test_store_unreachable*.py)."""

from __future__ import annotations

import errno
from collections import Counter
from pathlib import Path

from comgra_like.format.files import Files

#: ``times`` of a rule that never runs out.
ALWAYS = -1


def refused(what: str) -> OSError:
    return ConnectionRefusedError(errno.ECONNREFUSED, f"Connection refused (simulated: {what})")


def io_error(what: str) -> OSError:
    return OSError(errno.EIO, f"Input/output error (simulated: {what})")


def timed_out(what: str) -> OSError:
    return TimeoutError(f"timed out (simulated: {what})")


class FlakyFiles(Files):
    """The local disk; the calls a test names fail with a connection-type error."""

    def __init__(self):
        self.rules: list[list] = []  # [method, part of the path, times left, error]
        self.calls: Counter[tuple[str, str]] = Counter()

    def fail(self, method: str, part: str, times: int = 1, error=refused) -> None:
        self.rules.append([method, part, times, error])

    def heal(self) -> None:
        self.rules.clear()

    def _call(self, method: str, path) -> None:
        self.calls[(method, str(path))] += 1
        for rule in self.rules:
            name, part, left, error = rule
            if name == method and part in Path(path).as_posix() and left != 0:
                rule[2] = left - 1
                raise error(f"{method} {path}")

    def list(self, folder):
        self._call("list", folder)
        return super().list(folder)

    def list_signatures(self, folder):  # the whole-group SQL views' listing
        self._call("list_signatures", folder)
        return super().list_signatures(folder)

    def read_bytes(self, path):  # also under read_json
        self._call("read_bytes", path)
        return super().read_bytes(path)

    def read_json(self, path):
        self._call("read_json", path)
        return super().read_json(path)

    def read_parquet(self, path, schema=None, **options):
        self._call("read_parquet", path)
        return super().read_parquet(path, schema, **options)

    def parquet_metadata(self, path):
        self._call("parquet_metadata", path)
        return super().parquet_metadata(path)

    def arrow(self, path):  # where the query API's tensor reads open a file
        self._call("arrow", path)
        return super().arrow(path)
