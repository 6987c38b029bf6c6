"""A figure's numpy arrays as plotly.js typed-array specs (base64), for the Modules
page's histogram heatmaps (moved out of ``module_figures``)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from .figures import Figure

_TYPED = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8", np.dtype(np.int32): "i4"}


def typed_arrays(figure: Figure) -> Figure:
    """``figure`` with its numpy arrays as plotly.js typed-array specs (base64): a
    heatmap of 500 steps x 80 rows with its hover data is some 1.0 MB instead of 1.4 MB
    of JSON and encodes in 10 ms instead of 300. Floats travel as
    float32 (the hover shows 4 significant digits)."""
    def encode(value: Any) -> Any:
        if not isinstance(value, np.ndarray):
            return value
        array = value.astype(np.float32) if value.dtype.kind == "f" else value
        if array.dtype.kind in "iu":
            array = array.astype(np.int32)
        spec = {"dtype": _TYPED[array.dtype],
                "bdata": base64.b64encode(np.ascontiguousarray(array)).decode("ascii")}
        if array.ndim > 1:
            spec["shape"] = ", ".join(str(n) for n in array.shape)
        return spec

    return {**figure, "data": [{k: encode(v) for k, v in trace.items()}
                               for trace in figure["data"]]}
