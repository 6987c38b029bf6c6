"""Import of vnittest's ``flow_info.pkl`` into a trial's ``flows/`` folder (issue 18).

vnittest stores ``{"activation_gradients": {layer: 2-D array}, "gradient_flows":
{(input layer, output layer): array (n_in, n_out) or None}}`` as a pickle. Loading a
pickle can run any code, so the file is read by :class:`SafeUnpickler`: it rebuilds
dicts, lists, tuples, sets, strings, bytes, numbers and numpy arrays and scalars (numpy's
reconstruct functions and ``dtype``) and refuses every other global with
:class:`~comgra_like.errors.UnsafePickleError`, before anything of it is called.

The imported flows land in the same records as computed ones (:mod:`.flows`), turned
into this project's convention: target (vnittest's output layer) first, shapes taken from
the layers' gradient maps when the sizes match, so maps stay maps.
"""

from __future__ import annotations

import io
import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigurationError, StorageError, UnsafePickleError
from . import flows as ff
from .files import LOCAL, Files
from .schema import SCHEMA_VERSION

#: The only globals a vnittest pickle may name: what numpy and the pickle protocol need to
#: rebuild arrays, dtypes, scalars, sets and bytes. None of them runs user code.
ALLOWED_GLOBALS = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("builtins", "set"), ("builtins", "frozenset"),
    ("__builtin__", "set"), ("__builtin__", "frozenset"),  # protocol 2 names
    ("_codecs", "encode"),  # bytes in protocol 2
})

#: Largest flow_info.pkl read (a bound on memory before anything is parsed).
MAX_BYTES = 2**31


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that admits only :data:`ALLOWED_GLOBALS` (and no persistent ids)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise UnsafePickleError(
                f"refused global {module}.{name}: a vnittest flow_info.pkl holds only dicts, "
                "strings, numbers and numpy arrays, and this file asks to load something "
                "else (loading it could run code); nothing of it was run. Check where the "
                "file comes from, or convert it in a trusted environment")
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"refused persistent id {pid!r}: not a plain vnittest file")


def safe_load(data: bytes) -> Any:
    """Unpickle ``data`` admitting only plain containers, strings, numbers and numpy
    arrays; numpy arrays of dtype object are refused too."""
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except Exception as e:  # any parse failure: a damaged file
        raise StorageError(f"not a readable pickle ({type(e).__name__}: {e})") from e
    _check_plain(obj)
    return obj


def _check_plain(obj: Any, depth: int = 0) -> None:
    if depth > 50:
        raise UnsafePickleError("refused: containers nested more than 50 deep")
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise UnsafePickleError("refused numpy array of dtype object (it would hold "
                                    "arbitrary objects)")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_plain(k, depth + 1)
            _check_plain(v, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _check_plain(v, depth + 1)
    elif not (obj is None or isinstance(obj, (str, bytes, bool, int, float, complex,
                                              np.generic))):
        raise UnsafePickleError(f"refused value of type {type(obj).__name__}")


def read_flow_info(path: str | os.PathLike) -> dict:
    """vnittest's flow_info dict from ``path``, checked for its two keys."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise StorageError(f"{path} has {size} bytes, more than {MAX_BYTES} allowed")
        data = path.read_bytes()
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e}") from e
    try:
        info = safe_load(data)
    except UnsafePickleError as e:
        raise UnsafePickleError(f"{path}: {e}") from None
    except StorageError as e:
        raise StorageError(f"{path}: {e}") from None
    if not isinstance(info, dict) or not {"activation_gradients", "gradient_flows"} <= set(info):
        raise StorageError(f"{path} is not a vnittest flow_info file: a dict with "
                           "'activation_gradients' and 'gradient_flows' was expected")
    return info


def _ensure_trial(group: Path, trial_id: str, source: Path, files: Files) -> None:
    root = ff.trial_root(group, trial_id)
    if files.is_file(root / "trial.json"):
        return
    from .. import __version__

    files.write_json(root / "trial.json", {
        "schema_version": SCHEMA_VERSION, "trial_id": trial_id, "group": group.name,
        "created": time.time(), "status": "finished",
        "settings": {"imported_from": "vnittest", "source_file": source.name},
        "versions": {"comgra_like": __version__}})


def import_flow_info(path: str | os.PathLike, group: str | os.PathLike, trial_id: str, *,
                     training_step: int | None = None, files: Files = LOCAL) -> list[str]:
    """Import vnittest's ``flow_info.pkl`` at ``path`` into ``trial_id`` of ``group`` (the
    trial is created, status finished, when the group has none of that name); returns
    the record ids, one per (input layer, output layer) pair, in the file's order.

    vnittest's ``gradient_flows[(a, b)]`` has shape (units of a, units of b); it is stored
    transposed, target b first, with each side shaped like the layer's gradient map in
    ``activation_gradients`` when the sizes agree. A pair vnittest left as None is stored
    with status ``missing`` and the two gradient maps. vnittest does not say how its
    flows are weighted: records say ``weighting: "unknown"``.
    """
    path = Path(path)
    group = Path(group)
    info = read_flow_info(path)
    grads = info["activation_gradients"]
    flows = info["gradient_flows"]
    if not isinstance(grads, dict) or not isinstance(flows, dict):
        raise StorageError(f"{path}: 'activation_gradients' and 'gradient_flows' must be dicts")
    if not group.is_dir():
        raise ConfigurationError(f"{group} is not a folder: pass the group folder to import into")
    _ensure_trial(group, trial_id, path, files)
    chain_id = ff.new_id("c")
    ids = []
    for position, (key, matrix) in enumerate(flows.items()):
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)):
            raise StorageError(f"{path}: a gradient_flows key must be (input layer, output "
                               f"layer), not {key!r}")
        source, target = key
        g_s = None if grads.get(source) is None else np.asarray(grads[source], np.float32)
        g_t = None if grads.get(target) is None else np.asarray(grads[target], np.float32)
        arrays: dict[str, np.ndarray] = {}
        if matrix is None:
            if g_s is None or g_t is None:
                raise StorageError(f"{path}: the flow {key} is None and a layer's gradient "
                                   "is missing: nothing to import for it")
            s_shape, t_shape, status = g_s.shape, g_t.shape, ff.MISSING
        else:
            m = np.asarray(matrix, dtype=np.float32)
            if m.ndim != 2:
                raise StorageError(f"{path}: the flow {key} has shape {m.shape}; vnittest "
                                   "flows are 2-D (units of the input, units of the output)")
            s_shape = g_s.shape if g_s is not None and g_s.size == m.shape[0] else (m.shape[0],)
            t_shape = g_t.shape if g_t is not None and g_t.size == m.shape[1] else (m.shape[1],)
            arrays["flow"] = np.ascontiguousarray(m.T).reshape(tuple(t_shape) + tuple(s_shape))
            status = ff.COMPLETE
        if g_s is not None:
            arrays["grad_source"] = g_s.reshape(s_shape)
        if g_t is not None:
            arrays["grad_target"] = g_t.reshape(t_shape)
        meta = {"source": source, "target": target, "sample": 0,
                "source_shape": [int(s) for s in s_shape],
                "target_shape": [int(s) for s in t_shape], "status": status,
                "weighting": "unknown",
                "full_entries": int(np.prod(s_shape) * np.prod(t_shape)),
                "position": position, "rows": None, "training_step": training_step,
                "iteration": 0, "probe_id": None, "chain_id": chain_id, "origin": "vnittest"}
        ids.append(ff.write_flow(group, trial_id, meta, arrays, files))
    return ids
