"""The filesystem seam: every file the writer process and compaction read or write goes
through one :class:`Files` object.

Two implementations of the same methods, so that the writer, the shard buffer,
compaction and the query index stay as they are:

- :data:`LOCAL`, the local disk (the default). Writes are atomic: a file is written under
  a hidden name (``.<name>.<random>.tmp``, which readers skip) and renamed into place, so
  a reader sees the old state or the whole file, never a part.
- :class:`ObjectFiles`, an S3-compatible object store through pyarrow's filesystem layer
  (``s3://bucket/prefix``). Objects cannot be renamed or appended: every file is built
  whole in memory (or in a local temporary file, for compaction) and stored with one
  upload under its final name. S3 makes an upload atomic (a reader sees the whole object
  or none) and an overwrite too (the old object or the new one), which is what the
  rename gives on disk.

:func:`files_for` picks one from a location. Inside the code an object-store location
is an ordinary ``Path``: ``Path("s3://b/k")`` is ``s3:/b/k``, so the layout's path
arithmetic works unchanged and :func:`files_for` recognises the ``s3:`` part again (in
any process: the writer process gets the location as a string).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import ConfigurationError, StorageError
from . import confine
from .schema import MAX_ROWS_PER_ROW_GROUP

#: ``s3://bucket/key``, and the same after ``Path`` joined the slashes (``s3:/bucket/key``).
_S3_RE = re.compile(r"^s3:/+(?P<key>.*)\Z", re.DOTALL)


class StoreUnreachable(StorageError):
    """A look-up, listing or read that could not be made now: the store (an object
    store, a network or local disk) did not answer, or failed for a reason that may pass
    (connection refused or cut, a timeout, a busy server, an I/O error). It says nothing
    about the file: not that it is absent, not that it is damaged; the same request may
    work later. Readers keep what they knew and ask again (docs/RELIABILITY.md)."""


# Words of the AWS SDK's errors (as pyarrow passes them on) that mean "not there".
_NOT_THERE = ("NO_SUCH_KEY", "NO_SUCH_BUCKET", "RESOURCE_NOT_FOUND", "HTTP STATUS 404")
_NOT_THERE_ERRNOS = (errno.ENOENT, errno.ENOTDIR)


def unreachable(exc: BaseException) -> bool:
    """Whether a failed look-up or read failed because the store could not be read now
    (which may pass), rather than because the file is absent or its bytes are damaged.

    Absent: FileNotFoundError, NotADirectoryError, an object store's "no such key".
    Could not read now: connection errors and timeouts, an object store's errors (pyarrow
    passes the AWS SDK's on as ``OSError("... AWS Error NETWORK_CONNECTION ...")``; 5xx,
    throttling, access denied alike), and the system's OSErrors that carry an errno
    (EIO, ESTALE, EACCES, ...). Damaged: everything else, e.g. pyarrow's ArrowInvalid and
    its OSErrors without an errno ("Couldn't deserialize thrift", "Corrupt snappy
    compressed data"), and JSON that does not parse (ValueError).
    """
    if isinstance(exc, StoreUnreachable):
        return True
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if not isinstance(exc, OSError) or isinstance(exc, StorageError):
        return False  # ValueError, ArrowInvalid; our own refusals (UnsafePathError, ...)
    if exc.errno is not None:
        return exc.errno not in _NOT_THERE_ERRNOS
    text = str(exc).upper()
    return "AWS ERROR" in text and not any(word in text for word in _NOT_THERE)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def parquet_encodings(schema: pa.Schema) -> dict:
    """How columns are encoded, for every parquet file this project writes.

    Dictionary encoding only where it pays (the string columns): trying it on the float
    columns costs 4x the write time and makes the file larger. Float columns (and the
    floats of the ``values`` lists) are stored byte-stream-split (the bytes of all values'
    exponents together, then the next byte of each, ...), which zstd compresses better:
    the benchmark's recording 131 -> 123 KB per recorded step, shards written with ~10 %
    less CPU and read ~7 % faster (pyarrow reads it like any other encoding).
    """
    split = []
    for f in schema:
        if pa.types.is_floating(f.type):
            split.append(f.name)
        elif pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type):
            # the parquet path of the list's values (pyarrow writes compliant lists,
            # whatever the Arrow field is called); a wrong path is silently ignored
            split.append(f"{f.name}.list.element")
    return {
        "compression": "zstd",
        "use_dictionary": [f.name for f in schema if pa.types.is_dictionary(f.type)],
        "use_byte_stream_split": split or False,
        "write_statistics": True,
    }


class Files:
    """The local file system (and the methods every implementation has).

    Paths are ``Path`` objects built with :mod:`comgra_like.format.layout`. Nothing
    inside a group's ``trials/`` folder is reached through a symbolic link
    (:mod:`comgra_like.format.confine`): reads and writes through one raise
    UnsafePathError, look-ups answer "not there", listings of such a folder are empty.
    """

    remote = False

    def refusal(self, path: str | os.PathLike) -> str | None:
        """Why ``path`` is not followed (a link inside a group), None when it may be."""
        return None if self.remote else confine.refusal(path)

    def links(self, folder: str | os.PathLike) -> list[str]:
        """Names of the symbolic links directly in ``folder``, which every access
        refuses; readers report them (none on an object store)."""
        return [] if self.remote else confine.links(folder)

    def display(self, path: str | os.PathLike) -> str:
        """How ``path`` is named in messages (an object-store location as its URI)."""
        return str(path)

    def arrow(self, path: str | os.PathLike) -> tuple[pafs.FileSystem | None, str]:
        """(filesystem, path) for pyarrow's readers (``pq.read_table(p, filesystem=fs)``,
        ``pyarrow.dataset``): None is the local disk."""
        confine.check(path, "read")
        return None, str(path)

    def is_dir(self, path: Path) -> bool:
        return confine.allowed(path) and os.path.isdir(path)

    def signature(self, path: Path) -> tuple[int, int] | None:
        """(modification time, size), None when the file cannot be looked at (absent, or
        the store does not answer now: :meth:`signature_now` tells the two apart): a file
        that is replaced gets a new one."""
        try:
            return self.signature_now(path)
        except StoreUnreachable:
            return None

    def signature_now(self, path: Path) -> tuple[int, int] | None:
        """:meth:`signature`, None only when the file is not there (or is a link inside a
        group); StoreUnreachable when it cannot be looked at now."""
        if not confine.allowed(path):
            return None
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise StoreUnreachable(f"cannot look at {path} now ({_said(e)})") from e
        return st.st_mtime_ns, st.st_size

    # ----- reading ----------------------------------------------------------------------

    def list(self, folder: Path) -> list[str]:
        """The names in ``folder`` (hidden ones included); empty when it does not exist.
        On the local disk StoreUnreachable when it cannot be listed now; an object store
        answers empty then (callers that poll go on): :meth:`list_now` tells them apart."""
        if not confine.allowed(folder):
            return []
        try:
            return os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StoreUnreachable(f"cannot list {folder} now ({_said(e)})") from e

    def list_now(self, folder: Path) -> list[str]:
        """:meth:`list`, empty only when the folder is not there; StoreUnreachable when it
        cannot be listed now (the query index must not take that for "empty")."""
        return self.list(folder)

    def list_folders(self, folder: Path) -> list[str]:
        """The names of the folders in ``folder``; empty when it does not exist. A link to
        a folder is listed (readers refuse it, and say so). StoreUnreachable when it
        cannot be listed now: the query index would take every trial for deleted."""
        if not confine.allowed(folder):
            return []
        try:
            with os.scandir(folder) as entries:
                return [e.name for e in entries if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StoreUnreachable(f"cannot list {folder} now ({_said(e)})") from e

    def list_signatures(self, folder: Path) -> dict[str, tuple[int, int]]:
        """The files in ``folder`` (hidden ones included) with the :meth:`signature` of a
        parquet file, from the listing itself: no request per file on an object store.
        A link is left out (said once in the log). Empty when the folder is not there;
        StoreUnreachable when it cannot be listed now (never an empty folder: the
        whole-group SQL views would leave its files out without a word)."""
        out = {}
        if not confine.allowed(folder):
            return out
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    try:
                        if e.is_symlink():
                            confine.allowed(e.path)
                        elif e.is_file():
                            st = e.stat()
                            out[e.name] = (st.st_mtime_ns, st.st_size)
                    except FileNotFoundError:
                        pass  # removed while listed
                    except OSError as err:
                        raise StoreUnreachable(
                            f"cannot look at {e.path} now ({_said(err)})") from err
        except StoreUnreachable:
            raise
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as e:
            raise StoreUnreachable(f"cannot list {folder} now ({_said(e)})") from e
        return out

    def exists(self, path: Path) -> bool:
        return confine.allowed(path) and os.path.exists(path)

    def is_file(self, path: Path) -> bool:
        return confine.allowed(path) and os.path.isfile(path)

    def read_bytes(self, path: Path) -> bytes:
        confine.check(path, "read")
        with open(path, "rb") as f:
            return f.read()

    def read_json(self, path: Path) -> Any:
        return json.loads(self.read_bytes(path).decode("utf-8"))

    def parquet_metadata(self, path: Path) -> pq.FileMetaData:
        fs, p = self.arrow(path)
        return pq.read_metadata(p, filesystem=fs)

    def read_parquet(self, path: Path, schema: pa.Schema | None = None,
                     **options: Any) -> pa.Table:
        """``pq.read_table`` of one file (``options``: columns, filters, ...)."""
        fs, p = self.arrow(path)
        return pq.read_table(p, schema=schema, filesystem=fs, **options)

    # ----- writing (atomic) -------------------------------------------------------------

    def write_bytes(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` so that readers see the old state or the whole file."""
        tmp = self._temporary(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise

    def write_json(self, path: Path, obj: Any) -> None:
        self.write_bytes(path, json.dumps(obj, indent=1, sort_keys=True).encode("utf-8"))

    def write_parquet(self, path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
        tmp = self._temporary(path)
        try:
            pq.write_table(table, tmp, row_group_size=row_group_size or MAX_ROWS_PER_ROW_GROUP,
                           **parquet_encodings(table.schema))
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise

    def write_parquet_stream(self, path: Path, schema: pa.Schema, tables: Iterable[pa.Table],
                             row_group_size: int) -> int:
        """Write the tables of an iterable one after the other into one parquet file, in
        row groups of ``row_group_size`` rows (the last one smaller).

        Tables are gathered until they fill a row group: writing each as it came made a
        row group per shard, and a trial of 100,000 steps compacted into 1,105 row groups
        of ~90 steps rows took seconds to read (a cost per row group and column). At most
        one row group and one table are in memory, so compacting a trial of any size
        needs no more memory than that. Returns the number of rows written.
        """
        tmp = self._temporary(path)
        rows = 0
        try:
            with pq.ParquetWriter(tmp, schema, **parquet_encodings(schema)) as writer:
                pending: list[pa.Table] = []
                pending_rows = 0
                for table in tables:
                    rows += table.num_rows
                    pending.append(table)
                    pending_rows += table.num_rows
                    if pending_rows < row_group_size:
                        continue
                    gathered = pa.concat_tables(pending)
                    full = pending_rows // row_group_size * row_group_size
                    writer.write_table(gathered.slice(0, full), row_group_size=row_group_size)
                    rest = gathered.slice(full)
                    pending, pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
                if pending:
                    writer.write_table(pa.concat_tables(pending), row_group_size=row_group_size)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return rows

    def make_folder(self, path: Path) -> None:
        confine.check(path, "make the folder")
        os.makedirs(path, exist_ok=True)

    def remove(self, path: Path) -> None:
        """Delete a file; one that is gone already is fine."""
        confine.check(path, "delete")
        _remove_quietly(path)

    def remove_tree(self, path: Path) -> None:
        """Delete a folder and everything in it (a symbolic link is refused by the caller)."""
        confine.check(path, "delete")
        shutil.rmtree(path)

    def _temporary(self, path: Path) -> str:
        """A new hidden file next to ``path`` (its folder made first); every write starts
        here, so a path through a link inside a group is refused before anything is
        written."""
        confine.check(path, "write")
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
        os.close(fd)
        return tmp


def _remove_quietly(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


#: The local disk: the default of every writer and reader.
LOCAL = Files()


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> pa.Buffer:
    """A parquet file of ``table`` in memory, encoded as every file of the project:
    what an object store's upload sends (once built, an upload tried again after an
    outage sends the same bytes)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=row_group_size or MAX_ROWS_PER_ROW_GROUP,
                   **parquet_encodings(table.schema))
    return sink.getvalue()


class ObjectFiles(Files):
    """An S3-compatible object store through a pyarrow filesystem.

    Paths are ``Path("s3://bucket/key")`` (written ``s3:/bucket/key``); the object's key
    in pyarrow's terms is ``bucket/key``. There are no folders: a folder is a key prefix,
    which exists while an object is under it. Every write is one whole upload under the
    final name (module docstring), so no hidden temporary names are ever made.
    """

    remote = True

    def __init__(self, filesystem: pafs.FileSystem, scheme: str = "s3"):
        self.fs = filesystem
        self.scheme = scheme

    def key(self, path: str | os.PathLike) -> str:
        m = _S3_RE.match(str(path))
        if m is None:
            raise StorageError(f"{path} is not an {self.scheme}:// location")
        return m.group("key").rstrip("/")

    def display(self, path: str | os.PathLike) -> str:
        return f"{self.scheme}://{self.key(path)}"

    def arrow(self, path: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
        return self.fs, self.key(path)

    def _unreachable(self, doing: str, path: str | os.PathLike,
                     e: BaseException) -> StoreUnreachable:
        return StoreUnreachable(f"cannot {doing} {self.display(path)} now: {_said(e)}")

    def _info(self, path: Path) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.key(path))
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise self._unreachable("look at", path, e) from e
            raise

    def require_bucket(self, path: Path) -> None:
        """A StorageError that says what to fix unless the bucket of ``path`` exists and
        can be reached: a listing of a missing bucket is empty and an upload to it fails
        only in the writer process, once training has started."""
        bucket = self.key(path).split("/", 1)[0]
        try:
            info = self.fs.get_file_info(bucket)
        except (OSError, pa.ArrowException) as e:
            raise StorageError(
                f"cannot reach {self.scheme}://{bucket} to record {self.display(path)} "
                f"({' '.join(str(e).split())}); check the AWS_* environment variables "
                "(credentials, AWS_REGION, AWS_ENDPOINT_URL for an S3-compatible server)"
            ) from None
        if info.type == pafs.FileType.NotFound:
            raise StorageError(
                f"the bucket {bucket!r} of {self.display(path)} does not exist on "
                f"{_endpoint_name()}: create it first (e.g. `aws s3 mb "
                f"{self.scheme}://{bucket}`) or fix the bucket's name")

    # ----- reading ----------------------------------------------------------------------

    def list(self, folder: Path) -> list[str]:
        """The names under the prefix ``folder/`` (one listing request, paged by S3);
        empty also when the store cannot be reached now (:meth:`list_now` says so)."""
        try:
            return self.list_now(folder)
        except StoreUnreachable:
            return []

    def list_now(self, folder: Path) -> list[str]:
        """:meth:`list`; StoreUnreachable when the store cannot be reached now."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.key(folder),
                                                            allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise self._unreachable("list", folder, e) from None
            return []
        return [info.base_name for info in infos]

    def list_folders(self, folder: Path) -> list[str]:
        """The prefixes one level below ``folder/`` (the same one listing request).

        A store that cannot be reached is a StorageError (StoreUnreachable), not an empty
        list: the query index would take every trial for deleted and forget it."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.key(folder),
                                                            allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise self._unreachable("list", folder, e) from None
            raise StorageError(f"cannot list {self.display(folder)}: "
                               f"{' '.join(str(e).split())}") from None
        return [info.base_name for info in infos if info.type == pafs.FileType.Directory]

    def list_signatures(self, folder: Path) -> dict[str, tuple[int, int]]:
        """The objects under the prefix ``folder/`` with (modification time, size), from
        the one listing request (what :meth:`signature` gives a parquet object).
        StoreUnreachable when the store cannot be reached now."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.key(folder),
                                                            allow_not_found=True))
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise self._unreachable("list", folder, e) from None
            raise StorageError(f"cannot list {self.display(folder)}: "
                               f"{' '.join(str(e).split())}") from None
        return {i.base_name: (i.mtime_ns or 0, i.size) for i in infos
                if i.type == pafs.FileType.File}

    def exists(self, path: Path) -> bool:
        return self._info(path).type != pafs.FileType.NotFound

    def is_file(self, path: Path) -> bool:
        return self._info(path).type == pafs.FileType.File

    def is_dir(self, path: Path) -> bool:
        return self._info(path).type == pafs.FileType.Directory

    def signature_now(self, path: Path) -> tuple[int, int] | None:
        """(modification time, size) of an object; for JSON objects, which are replaced
        whole (trial.json's status), a hash of the content instead of the time: S3 keeps
        the time to the second, so two versions of equal size written within one second
        would look the same (pyarrow does not expose the ETag). None when it is not
        there; StoreUnreachable when the store does not answer now."""
        try:
            info = self._info(path)
            if info.type != pafs.FileType.File:
                return None
            if str(path).endswith(".json"):
                digest = hashlib.blake2b(self.read_bytes(path), digest_size=8).digest()
                return int.from_bytes(digest, "big"), info.size
            return info.mtime_ns or 0, info.size
        except StoreUnreachable:
            raise
        except (OSError, pa.ArrowException):
            return None

    def read_bytes(self, path: Path) -> bytes:
        try:
            with self.fs.open_input_stream(self.key(path)) as f:
                return f.read()
        except (OSError, pa.ArrowException) as e:
            if unreachable(e):
                raise self._unreachable("read", path, e) from e
            raise

    # ----- writing (whole objects) ------------------------------------------------------

    def write_bytes(self, path: Path, data: bytes) -> None:
        """One upload of ``data``: readers see the old object, or none, or the whole new one."""
        with self.fs.open_output_stream(self.key(path)) as f:
            f.write(data)

    def write_parquet(self, path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
        # Built whole in memory first: an upload that started could only be completed
        # with what it has, and a failure half-way would then store a part of the file.
        self.write_bytes(path, parquet_bytes(table, row_group_size))

    def write_parquet_stream(self, path: Path, schema: pa.Schema, tables: Iterable[pa.Table],
                             row_group_size: int) -> int:
        """Compaction's merged file: written to a local temporary file (memory stays
        bounded by the largest shard), then uploaded whole."""
        fd, tmp = tempfile.mkstemp(prefix=".comgra_like-compact-", suffix=".parquet")
        os.close(fd)
        try:
            rows = LOCAL.write_parquet_stream(Path(tmp), schema, tables, row_group_size)
            pafs.copy_files(tmp, self.key(path), source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        finally:
            _remove_quietly(tmp)
        return rows

    def make_folder(self, path: Path) -> None:
        """Nothing to do: a prefix exists once an object is stored under it."""

    def remove(self, path: Path) -> None:
        try:
            self.fs.delete_file(self.key(path))
        except FileNotFoundError:
            pass

    def remove_tree(self, path: Path) -> None:
        try:
            self.fs.delete_dir(self.key(path))
        except FileNotFoundError:
            pass


def is_object_store(location: str | os.PathLike) -> bool:
    """Whether ``location`` is an ``s3://`` URI (or a ``Path`` made of one)."""
    return _S3_RE.match(str(location)) is not None


def s3_options() -> dict[str, Any]:
    """pyarrow's S3FileSystem options from the standard environment variables.

    Credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
    profiles, instance roles) are left to the AWS SDK's own chain. The endpoint of an
    S3-compatible server comes from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
    (``http://host:port`` or ``https://...``), the region from ``AWS_REGION`` or
    ``AWS_DEFAULT_REGION``.
    """
    options: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"the S3 endpoint {endpoint!r} (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) is "
                "not a URL like http://127.0.0.1:9000 or https://s3.example.com")
        options["endpoint_override"] = parts.netloc
        options["scheme"] = parts.scheme
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    return options


def s3_endpoint() -> str | None:
    """The S3-compatible server's URL the environment names (``http://host:port``),
    None for AWS itself: what ``comgra --s3-endpoint`` takes."""
    options = s3_options()
    if "endpoint_override" not in options:
        return None
    return f"{options['scheme']}://{options['endpoint_override']}"


def _endpoint_name() -> str:
    endpoint = s3_endpoint()
    return "AWS S3" if endpoint is None else f"the S3 server {endpoint}"


# How this project talks to S3, beside what the environment says: a small object is one
# PUT, not the three requests of a multipart upload (delayed open), and a busy server gets
# a minute per request (the SDK's 3 s gave up on a loaded machine's loopback server).
_S3_TUNING: dict[str, Any] = {"allow_delayed_open": True, "request_timeout": 60.0,
                              "connect_timeout": 10.0}

_OBJECT_FILES: dict[tuple, ObjectFiles] = {}
_OBJECT_FILES_LOCK = threading.Lock()


def files_for(location: str | os.PathLike) -> Files:
    """The :class:`Files` of a location: :data:`LOCAL` for a path, an :class:`ObjectFiles`
    for ``s3://bucket/prefix`` (one per endpoint and region in a process, built from the
    environment: :func:`s3_options`)."""
    if not is_object_store(location):
        return LOCAL
    options = s3_options()
    key = tuple(sorted(options.items()))
    with _OBJECT_FILES_LOCK:
        files = _OBJECT_FILES.get(key)
        if files is None:
            try:
                fs = pafs.S3FileSystem(**options, **_S3_TUNING)
            except (OSError, pa.ArrowException) as e:
                raise StorageError(f"cannot open S3 for {location} ({e}); check the AWS_* "
                                   "environment variables") from e
            files = _OBJECT_FILES[key] = ObjectFiles(fs)
    return files
