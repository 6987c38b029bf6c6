"""The built-in per-module quantities (issue 16), numpy only: the writer process runs them.

A ``Quantity`` names what the training side must ship (``needs``), whether it yields one
value per backward pass (``per_backward``), whether it keeps state between its
computations (``stateful``) and which module classes it applies to. ``compute(data,
state)`` gets a ``ModuleData`` (arrays as captured) and the caller's state dict for this
(trial, module, metric), and returns a float (NaN when undefined) or a 1-D array.

Definitions follow Taiyi's code (DLCV-BUAA/Taiyi) and monitorch's lenses; where they are
wrong we do it right, and each quantity's ``differs`` says how (docs/METRICS.md's table).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigurationError
from . import spectra

# What a quantity may ask the training side to ship (ModuleData fields and ``extra`` keys).
NEEDS = (
    "input",            # first positional tensor input of the module's forward
    "output",           # first tensor output
    "output_grad",      # gradient of that output, one array per backward pass
    "weight",           # module.weight after the optimizer step (when the metric runs)
    "weight_grad",      # module.weight.grad
    "bias",
    "bias_grad",        # module.bias.grad
    "bn_running_mean",  # BatchNorm running_mean at the computing step, shape (C,)
    "bn_running_var",   # BatchNorm running_var at the computing step, shape (C,)
    "bn_batch_mean",    # per-channel mean of the BN input, one row per training step
                        # since the previous computation, this step included: (T, C)
    "bn_batch_var",     # per-channel unbiased variance of the BN input, same rows: (T, C)
    "loss",             # the step's loss (a scalar array), for user metrics
)

# Classes whose feature axis is 1 (N, C, *spatial); every other module's is the last axis
# (Linear on (N, L, D) acts on D). Activations and dropouts follow their input's layout:
# for those, 4-D and 5-D arrays are taken as images (axis 1), 3-D as sequences (last).
CHANNEL_FIRST_PREFIXES = ("Conv", "ConvTranspose", "LazyConv", "BatchNorm", "LazyBatchNorm",
                          "SyncBatchNorm", "InstanceNorm", "LazyInstanceNorm", "GroupNorm",
                          "MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool",
                          "LPPool", "FractionalMaxPool", "Dropout1d", "Dropout2d",
                          "Dropout3d", "Upsample", "PixelShuffle", "LocalResponseNorm")
LAST_AXIS_CLASSES = ("Linear", "LazyLinear", "Bilinear", "LayerNorm", "RMSNorm",
                     "Embedding", "MultiheadAttention", "Identity")
BATCH_NORM_CLASSES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                      "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d")
# Taiyi's threshold for a dead Linear unit: the pre-activation is <= -2 on the whole batch.
DEAD_PREACTIVATION = -2.0
# Taiyi's epsilon in the condition numbers (lambda_1 / (|lambda_k| + eps)).
CONDITION_EPS = 1e-7
# Taiyi's epsilon in RankMe's p log p and in the TID denominators.
RANKME_EPS = 1e-7
TID_EPS = 1e-8


@dataclass
class ModuleData:
    """What was captured of one module at one computing step (None = not captured)."""

    module_class: str
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    output_grad: np.ndarray | None = None
    weight: np.ndarray | None = None
    weight_grad: np.ndarray | None = None
    bias: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    # spectra shared by the quantities computed on this same data (Taiyi caches them on
    # the module per step for the same reason)
    cache: dict[str, object] = field(default_factory=dict, repr=False)

    def get(self, name: str) -> np.ndarray:
        """The array ``name`` (a field or an ``extra`` key); a clear error when missing."""
        value = getattr(self, name, None) if name in _FIELDS else self.extra.get(name)
        if value is None:
            raise ConfigurationError(
                f"{name!r} was not captured for this {self.module_class} module; the "
                f"quantity needs it: ship it in ModuleData (the collector copies what "
                f"Quantity.needs lists)")
        return np.asarray(value)


_FIELDS = ("input", "output", "output_grad", "weight", "weight_grad", "bias")


# monitorch's activation bounds (numerical/threshold_for_module.py): a unit is "at its
# bound" when its value is close to one of them; classes not listed are bounded below by 0
# (ReLU and most others), so there "at the bound" means "zero". Hardtanh's and
# Threshold's bounds are attributes of the module; we use their defaults.
INF = math.inf
ACTIVATION_BOUNDS: dict[str, tuple[float, float]] = {
    "CELU": (-1.0, INF), "ELU": (-1.0, INF), "Hardsigmoid": (0.0, 1.0),
    "LogSigmoid": (-INF, 0.0), "ReLU6": (0.0, 6.0), "SELU": (-1.7580993408473766, INF),
    "Sigmoid": (0.0, 1.0), "Softsign": (-1.0, 1.0), "Tanh": (-1.0, 1.0),
    "Tanhshrink": (-INF, INF), "Hardtanh": (-1.0, 1.0),
}
DEFAULT_BOUNDS = (0.0, INF)
# numpy's isclose defaults, the same as torch.isclose's (monitorch's test for "at a bound")
BOUND_RTOL = 1e-5
BOUND_ATOL = 1e-8


@dataclass(frozen=True)
class Quantity:
    """One built-in quantity: what it needs, how it is computed, what it means."""

    name: str
    needs: frozenset[str]
    compute: Callable[[ModuleData, dict], float | np.ndarray]
    formula: str
    meaning: str
    reference: str
    per_backward: bool = False
    stateful: bool = False
    module_classes: tuple[str, ...] | None = None
    vector: bool = False
    differs: str = ""

    def applies_to(self, module_class: str) -> bool:
        return self.module_classes is None or module_class in self.module_classes


def features_2d(x: np.ndarray, module_class: str | None = None) -> np.ndarray:
    """(samples, features) view of a module's array: the feature axis moved last.

    A conv-style (N, C, *spatial) array becomes (N * prod(spatial), C) by moving C last
    and then reshaping, so that each row is one position of one sample (Taiyi's ``view``
    without the move mixes positions and channels into its "channels"). 2-D arrays are
    already (N, features); a 1-D array is one sample; 0-D one value.
    """
    x = np.asarray(x)
    if x.ndim == 0:
        return x.reshape(1, 1)
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim == 2:
        return x
    if _channel_axis_first(x.ndim, module_class):
        return np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
    return x.reshape(-1, x.shape[-1])


def _channel_axis_first(ndim: int, module_class: str | None) -> bool:
    if module_class is not None:
        if module_class in LAST_AXIS_CLASSES:
            return False
        if module_class.startswith(CHANNEL_FIRST_PREFIXES):
            return True
    return ndim >= 4


def _float(value: float | np.floating) -> float:
    return float(value)


# --- spectra, shared per ModuleData ---------------------------------------------------

def _cached(data: ModuleData, key: str, source: str, make: Callable[[], object]) -> object:
    """``make()``, remembered on ``data`` for as long as ``source`` is the same array (a
    caller may reuse one ModuleData for several backward passes, changing output_grad)."""
    array = getattr(data, source, None)
    entry = data.cache.get(key)
    if entry is not None and entry[0] is array:  # type: ignore[index]
        return entry[1]  # type: ignore[index]
    value = make()
    data.cache[key] = (array, value)
    return value


def _spectrum(data: ModuleData, source: str, *, full: bool, top: int = 1) -> np.ndarray:
    """Covariance eigenvalue magnitudes of ``source``'s features, descending (cached).

    ``full`` asks for all d of them (the condition numbers index into the whole spectrum)
    and always takes the exact path; otherwise, above spectra.EXACT_MAX_DIM, only the
    ``top`` largest come from the randomized method (the fewer, the cheaper).
    """
    x2d = features_2d(data.get(source), data.module_class)
    exact = data.cache.get(f"{source}:exact")
    if exact is not None and exact[0] is getattr(data, source):  # type: ignore[index]
        return exact[1]  # type: ignore[index]
    if full or spectra.needs_exact(x2d):
        return _cached(data, f"{source}:exact", source,  # type: ignore[return-value]
                       lambda: spectra.exact_spectrum(x2d))
    cached = data.cache.get(f"{source}:top")
    if (cached is not None and cached[0] is getattr(data, source)  # type: ignore[index]
            and cached[1].size >= min(top, x2d.shape[1])):  # type: ignore[index]
        return cached[1]  # type: ignore[index]
    values = spectra.top_spectrum(x2d, k=top)
    data.cache[f"{source}:top"] = (getattr(data, source), values)
    return values


def _trace(data: ModuleData, source: str) -> float:
    exact = data.cache.get(f"{source}:exact")
    if exact is not None and exact[0] is getattr(data, source):  # type: ignore[index]
        return float(np.sum(exact[1]))  # type: ignore[index]
    return _cached(data, f"{source}:trace", source,  # type: ignore[return-value]
                   lambda: spectra.trace(features_2d(data.get(source), data.module_class)))


def _max_eig(source: str) -> Callable[[ModuleData, dict], float]:
    def compute(data: ModuleData, state: dict) -> float:
        return _float(_spectrum(data, source, full=False)[0])
    return compute


def _stable_rank_cov(source: str) -> Callable[[ModuleData, dict], float]:
    def compute(data: ModuleData, state: dict) -> float:
        top = _float(_spectrum(data, source, full=False)[0])
        total = _trace(data, source)
        if math.isnan(top) or math.isnan(total):
            return math.nan
        # a zero covariance (constant input) has rank 0; Taiyi returns 0 there too
        return 0.0 if top == 0.0 else total / top
    return compute


def _condition(source: str, fraction: float | None) -> Callable[[ModuleData, dict], float]:
    def compute(data: ModuleData, state: dict) -> float:
        values = _spectrum(data, source, full=True)
        index = values.size - 1 if fraction is None else math.floor(values.size * fraction)
        return _float(values[0] / (abs(values[index]) + CONDITION_EPS))
    return compute


def _spectrum_vector(source: str) -> Callable[[ModuleData, dict], np.ndarray]:
    def compute(data: ModuleData, state: dict) -> np.ndarray:
        return np.array(_spectrum(data, source, full=False,
                                  top=spectra.DEFAULT_TOP_K)[: spectra.DEFAULT_TOP_K])
    return compute


# --- single-step quantities -------------------------------------------------------------

def _norm(source: str) -> Callable[[ModuleData, dict], float]:
    def compute(data: ModuleData, state: dict) -> float:
        x = np.asarray(data.get(source), dtype=np.float64)
        return _float(np.sqrt(np.einsum("i,i->", x.ravel(), x.ravel())))
    return compute


def _rms(source: str) -> Callable[[ModuleData, dict], float]:
    def compute(data: ModuleData, state: dict) -> float:
        x = np.asarray(data.get(source), dtype=np.float64).ravel()
        if x.size == 0:
            return math.nan
        return _float(np.sqrt(np.einsum("i,i->", x, x) / x.size))
    return compute


def _sample_norm(normalize: bool) -> Callable[[ModuleData, dict], float]:
    """The batch mean of each sample's output norm (monitorch 0.1.0.7's OutputNorm), or of
    its RMS: independent of the batch size, unlike the whole tensor's norm."""
    def compute(data: ModuleData, state: dict) -> float:
        y = np.asarray(data.get("output"), dtype=np.float64)
        rows = y.reshape(1, -1) if y.ndim <= 1 else y.reshape(y.shape[0], -1)
        if rows.size == 0:
            return math.nan
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        if normalize:
            norms = norms / math.sqrt(rows.shape[1])
        return _float(norms.mean())
    return compute


def _input_mean(data: ModuleData, state: dict) -> float:
    x = np.asarray(data.get("input"), dtype=np.float64)
    return _float(x.mean()) if x.size else math.nan


def _input_std(data: ModuleData, state: dict) -> float:
    x = np.asarray(data.get("input"), dtype=np.float64)
    # unbiased, as torch's Tensor.std(); one element has no spread estimate
    return _float(x.std(ddof=1)) if x.size > 1 else math.nan


def _linear_dead(data: ModuleData, state: dict) -> float:
    out = np.asarray(data.get("output"))
    out2d = out.reshape(-1, out.shape[-1]) if out.ndim >= 2 else out.reshape(1, -1)
    if out2d.shape[1] == 0:
        return math.nan
    dead = np.all(out2d <= DEAD_PREACTIVATION, axis=0)
    return _float(dead.mean())


def _rankme(data: ModuleData, state: dict) -> float:
    out = np.asarray(data.get("output"), dtype=np.float64)
    out2d = out.reshape(out.shape[0], -1) if out.ndim >= 1 else out.reshape(1, 1)
    # singular values from the smaller Gram matrix (N x N for a batch of wide outputs):
    # a conv layer's (64, 32768) output costs a 64 x 64 eigenproblem instead of an SVD;
    # values below ~1e-8 sigma_1 lose relative precision, far under RankMe's 1e-7 floor
    gram = out2d @ out2d.T if out2d.shape[0] <= out2d.shape[1] else out2d.T @ out2d
    try:
        squared = np.linalg.eigvalsh(gram)[::-1]
    except np.linalg.LinAlgError:
        return math.nan
    # eigenvalues within rounding of zero (a rank-deficient batch) are zero: their square
    # roots (~1e-8 sigma_1) would otherwise each add to the entropy above RankMe's floor
    noise = squared[0] * gram.shape[0] * np.finfo(np.float64).eps * 10 if squared.size else 0
    singular = np.sqrt(np.where(squared > noise, squared, 0.0))
    total = singular.sum()
    if total == 0.0:
        return math.nan
    p = singular / total + RANKME_EPS
    return _float(np.exp(-np.sum(p * np.log(p))))


def _tid(kind: str) -> Callable[[ModuleData, dict], float]:
    """MeanTID / VarTID of arXiv 2210.05153 over the steps since the previous computation."""
    def compute(data: ModuleData, state: dict) -> float:
        running_sigma = np.sqrt(np.asarray(data.get("bn_running_var"), dtype=np.float64))
        if kind == "mean":
            batch = np.atleast_2d(np.asarray(data.get("bn_batch_mean"), dtype=np.float64))
            reference = np.asarray(data.get("bn_running_mean"), dtype=np.float64)
        else:
            var = np.atleast_2d(np.asarray(data.get("bn_batch_var"), dtype=np.float64))
            batch = np.sqrt(var)
            reference = running_sigma
        if batch.shape[0] == 0:
            return math.nan
        distances = np.linalg.norm(batch - reference[None, :], axis=1)
        return _float(np.mean(distances / (np.linalg.norm(running_sigma) + TID_EPS)))
    return compute


def _weight_param_jump(data: ModuleData, state: dict) -> float:
    sign = np.sign(np.asarray(data.get("weight"))).astype(np.int8)
    previous = state.get("sign")
    state["sign"] = sign
    if previous is None or previous.shape != sign.shape:
        return math.nan
    return _float(np.count_nonzero(sign * previous < 0))


# --- monitorch's lenses ------------------------------------------------------------------

def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two flattened arrays; NaN when undefined."""
    if a.shape != b.shape:
        return math.nan
    a = a.ravel().astype(np.float64)
    b = b.ravel().astype(np.float64)
    denominator = math.sqrt(float(a @ a) * float(b @ b))
    if denominator == 0.0:
        return math.nan
    return float(a @ b) / denominator


def _correlation(source: str) -> Callable[[ModuleData, dict], float]:
    """Cosine between ``source`` now and at the previous computation (stateful)."""
    def compute(data: ModuleData, state: dict) -> float:
        current = np.array(data.get(source), dtype=np.float64)
        previous = state.get("previous")
        state["previous"] = current
        return math.nan if previous is None else _cosine(current, previous)
    return compute


def _update(source: str, how: str) -> Callable[[ModuleData, dict], float]:
    """Geometry of the change of a parameter since the previous computation (stateful).

    ``how`` is "norm", "rms" or "correlation" (the cosine between this update and the
    previous one). Each quantity keeps its own state, so each keeps its own copy.
    """
    def compute(data: ModuleData, state: dict) -> float:
        current = np.array(data.get(source), dtype=np.float64)
        previous = state.get("value")
        state["value"] = current
        if previous is None or previous.shape != current.shape:
            state.pop("update", None)
            return math.nan
        update = current - previous
        if how == "norm":
            return _float(np.linalg.norm(update.ravel()))
        if how == "rms":
            return _float(np.sqrt(np.mean(update * update))) if update.size else math.nan
        previous_update = state.get("update")
        state["update"] = update
        return math.nan if previous_update is None else _cosine(update, previous_update)
    return compute


def _unit_axes(x: np.ndarray, module_class: str) -> tuple[int, ...]:
    """The axes that are not the unit axis (features_2d's choice), to reduce over them in
    place instead of copying the array into (rows, units)."""
    if x.ndim <= 1:
        return ()
    if x.ndim >= 3 and _channel_axis_first(x.ndim, module_class):
        return tuple(a for a in range(x.ndim) if a != 1)
    return tuple(range(x.ndim - 1))


def _bound_hits(data: ModuleData, which: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """Elementwise: is the output at one of the activation's bounds (np.isclose's test
    |y - b| <= atol + rtol |b|, written out to spare isclose's temporaries)."""
    out = np.asarray(data.get("output"))
    low, high = (0.0, INF) if which == "zero" else ACTIVATION_BOUNDS.get(
        data.module_class, DEFAULT_BOUNDS)
    hit = np.zeros(out.shape, dtype=bool)
    for bound in (low, high):
        if math.isfinite(bound):
            tolerance = BOUND_ATOL + BOUND_RTOL * abs(bound)
            hit |= (np.abs(out) if bound == 0.0 else np.abs(out - bound)) <= tolerance
    return hit, _unit_axes(out, data.module_class)


def _stuck_fraction(which: str) -> Callable[[ModuleData, dict], float]:
    """Fraction of units at the bound on every sample and position."""
    def compute(data: ModuleData, state: dict) -> float:
        hit, axes = _bound_hits(data, which)
        if hit.size == 0:
            return math.nan
        stuck = np.all(hit, axis=axes) if axes else hit
        return _float(np.mean(stuck))
    return compute


def _activation_rate(data: ModuleData, state: dict) -> float:
    hit, _ = _bound_hits(data, "zero")
    return _float(1.0 - np.mean(hit)) if hit.size else math.nan


def _weight_stable_rank(data: ModuleData, state: dict) -> float:
    w = np.asarray(data.get("weight"), dtype=np.float64)
    w2d = w.reshape(w.shape[0], -1) if w.ndim >= 2 else w.reshape(1, -1)
    if w2d.size == 0:
        return math.nan
    # sigma_max^2 is the top eigenvalue of the smaller Gram matrix: eigvalsh there costs a
    # fraction of the full SVD that np.linalg.norm(ord=2) runs
    gram = w2d @ w2d.T if w2d.shape[0] <= w2d.shape[1] else w2d.T @ w2d
    try:
        top_squared = float(np.linalg.eigvalsh(gram)[-1])
    except np.linalg.LinAlgError:
        return math.nan
    if top_squared <= 0.0:
        return 0.0
    return _float(np.trace(gram) / top_squared)


AGGREGATIONS = ("mean", "std", "min", "max", "median", "q1", "q3")
BANDS = ("std", "min-max", "q1-q3")


def aggregate(values: Iterable[float], how: str) -> float:
    """One number for a list of values (an epoch's points), NaNs ignored.

    ``std`` is the population deviation (ddof 0, as monitorch's). ``min`` is the minimum
    (monitorch's list aggregation returns the maximum for 'min').
    """
    array = np.asarray(list(values), dtype=np.float64)
    array = array[~np.isnan(array)]
    if how not in AGGREGATIONS:
        raise ConfigurationError(
            f"unknown aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")
    if array.size == 0:
        return math.nan
    if how == "mean":
        return _float(array.mean())
    if how == "std":
        return _float(array.std())
    if how == "min":
        return _float(array.min())
    if how == "max":
        return _float(array.max())
    quantile = {"median": 0.5, "q1": 0.25, "q3": 0.75}[how]
    return _float(np.quantile(array, quantile))


def band(values: Iterable[float], how: str) -> tuple[float, float]:
    """The band drawn around an aggregate line: mean ± std, min-max or q1-q3."""
    array = list(values)
    if how == "std":
        mean, std = aggregate(array, "mean"), aggregate(array, "std")
        return mean - std, mean + std
    if how == "min-max":
        return aggregate(array, "min"), aggregate(array, "max")
    if how == "q1-q3":
        return aggregate(array, "q1"), aggregate(array, "q3")
    raise ConfigurationError(f"unknown band {how!r}; use one of {', '.join(BANDS)}")


# --- the table ---------------------------------------------------------------------------

TAIYI = "Taiyi (DLCV-BUAA/Taiyi), quantity/"
CONV_RESHAPE = ("conv inputs: channels moved last before the reshape (Taiyi's view mixes "
                "positions and channels)")
NO_MADE_UP = "NaN when the decomposition fails (Taiyi returns made-up values)"
_SPECTRUM_SOURCES = {"Input": ("input", "the module's input"),
                     "OutputGrad": ("output_grad", "the gradient of the module's output")}


def _q(name: str, needs: Iterable[str], compute: Callable, formula: str, meaning: str,
       reference: str, **kwargs: object) -> Quantity:
    return Quantity(name=name, needs=frozenset(needs), compute=compute, formula=formula,
                    meaning=meaning, reference=reference, **kwargs)  # type: ignore[arg-type]


def _build() -> dict[str, Quantity]:
    table: list[Quantity] = []
    for prefix, (source, what) in _SPECTRUM_SOURCES.items():
        per_backward = source == "output_grad"
        ref = (TAIYI + "singlestep/input_cov_*.py" if source == "input" else
               "Taiyi extensions/backward_extension/backward_output_eig_of_cov_extension.py")
        cov = f"C = cov({what}), rows = samples (x positions for conv), ddof 1"
        table += [
            _q(f"{prefix}CovMaxEig", {source}, _max_eig(source), f"λ1 of {cov}",
               f"variance along the dominant direction of {what}", ref,
               per_backward=per_backward, differs=CONV_RESHAPE + "; " + NO_MADE_UP),
            _q(f"{prefix}CovStableRank", {source}, _stable_rank_cov(source),
               f"Σλ / λ1 of {cov} (0 when C = 0)",
               f"how many directions {what} effectively spans", ref,
               per_backward=per_backward, differs=CONV_RESHAPE),
            _q(f"{prefix}CovCondition", {source}, _condition(source, None),
               f"λ1 / (|λ_d| + 1e-7) of {cov}",
               f"ill-conditioning of {what}'s covariance (large = nearly degenerate)", ref,
               per_backward=per_backward, differs=CONV_RESHAPE + "; " + NO_MADE_UP),
        ]
        for percent in (20, 50, 80):
            table.append(_q(
                f"{prefix}CovCondition{percent}", {source}, _condition(source, percent / 100),
                f"λ1 / (|λ_⌊{percent / 100}·d⌋| + 1e-7) of {cov} (0-based index)",
                f"spread between the top and the {percent}% eigenvalue of {what}'s "
                "covariance", ref, per_backward=per_backward,
                differs=CONV_RESHAPE + "; " + NO_MADE_UP))
        table.append(_q(
            f"{prefix}CovSpectrum", {source}, _spectrum_vector(source),
            f"the {spectra.DEFAULT_TOP_K} largest λ of {cov}, descending",
            f"the shape of {what}'s covariance spectrum", "comgra-like (Taiyi's "
            "eigenvalues, stored as a vector)", per_backward=per_backward, vector=True))
    table += [
        _q("WeightNorm", {"weight"}, _norm("weight"), "‖W‖_F",
           "size of the weights", TAIYI + "singlestep/weight_norm.py"),
        _q("WeightGradNorm", {"weight_grad"}, _norm("weight_grad"), "‖∂L/∂W‖_F",
           "size of the weight gradient", TAIYI + "singlestep/weight_grad_norm.py"),
        _q("InputMean", {"input"}, _input_mean, "mean of all elements of the input",
           "shift of the input (Taiyi's README says per channel; its code, and we, "
           "average everything)", TAIYI + "singlestep/input_mean.py"),
        _q("InputStd", {"input"}, _input_std, "std of all elements of the input (ddof 1)",
           "spread of the input", TAIYI + "singlestep/input_std.py"),
        _q("InputSndNorm", {"input"}, _norm("input"), "‖X‖_F (all elements)",
           "size of the input", TAIYI + "singlestep/input_norm.py"),
        _q("OutputGradSndNorm", {"output_grad"}, _norm("output_grad"), "‖∂L/∂Y‖_F",
           "size of the gradient reaching the module's output",
           TAIYI + "singlestep/output_grad_norm.py", per_backward=True,
           differs="one value per backward pass (Taiyi keeps the last pass's)"),
        _q("LinearDeadNeuronNum", {"output"}, _linear_dead,
           "fraction of output units j with y_ij <= -2 for every sample i",
           "share of Linear units a following ReLU would silence on the whole batch "
           "(a fraction despite the name)", TAIYI + "singlestep/linear_dead_neuron_num.py"),
        _q("RankMe", {"output"}, _rankme,
           "exp(-Σ p_k log p_k), p_k = σ_k / Σσ + 1e-7, σ = singular values of Y (N x rest)",
           "effective rank of the output batch (embedding collapse when small)",
           "Garrido et al. 2023 (RankMe); " + TAIYI + "singlestep/rankme.py",
           differs="float64 and NaN when the SVD fails or Y = 0 (Taiyi: float32, "
                   "made-up values)"),
        _q("MeanTID", {"bn_batch_mean", "bn_running_mean", "bn_running_var"}, _tid("mean"),
           "mean over steps t since the last computation of ‖μ_t - μ_run‖ / (‖σ_run‖ + 1e-8)",
           "train/inference mismatch of a BatchNorm's mean (large: running stats are stale "
           "or batches differ)", "arXiv 2210.05153; " + TAIYI + "multistep/mean_tid.py",
           stateful=True, module_classes=BATCH_NORM_CLASSES,
           differs="per channel on 3-D inputs (Taiyi's 3-D branch averages per position)"),
        _q("VarTID", {"bn_batch_var", "bn_running_var"}, _tid("var"),
           "mean over steps t of ‖σ_t - σ_run‖ / (‖σ_run‖ + 1e-8), σ_t = sqrt(unbiased var)",
           "train/inference mismatch of a BatchNorm's scale",
           "arXiv 2210.05153; " + TAIYI + "multistep/var_tid.py",
           stateful=True, module_classes=BATCH_NORM_CLASSES,
           differs="per channel on 3-D inputs (as MeanTID)"),
        _q("WeightParamJump", {"weight"}, _weight_param_jump,
           "#{i : sign(w_i) · sign(w_i at the previous computation) < 0}",
           "how many weights changed sign since the previous computation (NaN the first "
           "time)", TAIYI + "multistep/weight_param_jump.py", stateful=True,
           differs="compares with a copy kept at the previous computation (Taiyi caches "
                   "the live parameter and clears its cache at each computation: always 0)"),
    ]
    table += _monitorch()
    table.append(_q(
        "WeightStableRank", {"weight"}, _weight_stable_rank,
        "‖W‖²_F / σ_max(W)² (W as out x rest)",
        "how many directions the weight matrix effectively uses (1 = rank one)",
        "Sanyal et al. 2020 (stable rank); comgra-like"))
    return {q.name: q for q in table}


MONITORCH = "monitorch 0.1.0.7, "
FIRST_NAN = "NaN at the first computation and when a norm is 0 (monitorch: 0)"


def _monitorch() -> list[Quantity]:
    grad_ref = MONITORCH + "lens ParameterGradientGeometry"
    update_ref = MONITORCH + "lens ParameterUpdateGeometry"
    since = ("; with a schedule, the update spans the steps since the previous computation "
             "(monitorch: one optimizer step)")
    table = [
        _q("OutputNorm", {"output"}, _sample_norm(False), "mean over samples i of ‖Y_i‖",
           "size of one sample's output (batch-size independent)",
           MONITORCH + "lens OutputNorm"),
        _q("OutputRMS", {"output"}, _sample_norm(True),
           "mean over samples i of ‖Y_i‖ / sqrt(numel Y_i)",
           "typical magnitude of one output element", MONITORCH + "lens OutputNorm "
           "(normalize_by_size=True)"),
        _q("OutputGradRMS", {"output_grad"}, _rms("output_grad"), "‖∂L/∂Y‖_F / sqrt(numel)",
           "typical magnitude of one element of the output gradient, per backward pass",
           MONITORCH + "lens OutputGradientGeometry (normalize_by_size=True)",
           per_backward=True),
        _q("OutputGradCorrelation", {"output_grad"}, _correlation("output_grad"),
           "<g, g_prev> / (‖g‖ ‖g_prev‖), g_prev = the previous backward pass's",
           "whether consecutive backward passes push the output the same way (1) or "
           "oppose (-1)", MONITORCH + "lens OutputGradientGeometry", per_backward=True,
           stateful=True, differs=FIRST_NAN),
        _q("WeightRMS", {"weight"}, _rms("weight"), "‖W‖_F / sqrt(numel W)",
           "typical weight magnitude", MONITORCH + "lens ParameterNorm"),
        _q("WeightGradRMS", {"weight_grad"}, _rms("weight_grad"), "‖∂L/∂W‖_F / sqrt(numel)",
           "typical magnitude of one weight's gradient", grad_ref),
        _q("WeightGradCorrelation", {"weight_grad"}, _correlation("weight_grad"),
           "cos(∂L/∂W, ∂L/∂W at the previous computation)",
           "gradient direction stability (near 0: noisy, negative: oscillation)", grad_ref,
           stateful=True, differs=FIRST_NAN),
        _q("BiasGradNorm", {"bias_grad"}, _norm("bias_grad"), "‖∂L/∂b‖", "size of the bias "
           "gradient", grad_ref),
        _q("BiasGradCorrelation", {"bias_grad"}, _correlation("bias_grad"),
           "cos(∂L/∂b, ∂L/∂b at the previous computation)", "bias gradient direction "
           "stability", grad_ref, stateful=True, differs=FIRST_NAN),
        _q("WeightUpdateNorm", {"weight"}, _update("weight", "norm"), "‖W - W_prev‖_F",
           "step size actually taken by the optimizer", update_ref, stateful=True,
           differs="NaN at the first computation" + since),
        _q("WeightUpdateRMS", {"weight"}, _update("weight", "rms"),
           "‖W - W_prev‖_F / sqrt(numel W)", "step size per weight", update_ref,
           stateful=True, differs="NaN at the first computation" + since),
        _q("WeightUpdateCorrelation", {"weight"}, _update("weight", "correlation"),
           "cos(W - W_prev, W_prev - W_prev2)",
           "whether consecutive updates go the same way (momentum) or zig-zag",
           update_ref, stateful=True, differs=FIRST_NAN + since),
        _q("BiasUpdateNorm", {"bias"}, _update("bias", "norm"), "‖b - b_prev‖",
           "step size on the bias", update_ref, stateful=True,
           differs="NaN at the first computation" + since),
        _q("BiasUpdateCorrelation", {"bias"}, _update("bias", "correlation"),
           "cos(b - b_prev, b_prev - b_prev2)", "bias update direction stability",
           update_ref, stateful=True, differs=FIRST_NAN + since),
        _q("DeadUnitFraction", {"output"}, _stuck_fraction("zero"),
           "fraction of units (features; channels for conv) whose output is 0 on every "
           "sample and position", "units that never fire on this batch (dead ReLUs)",
           MONITORCH + "lens OutputActivation (death rate)",
           differs="3-D outputs of layers other than conv/pool/norm: units on the last "
                   "axis (monitorch: axis 1)"),
        _q("SaturatedUnitFraction", {"output"}, _stuck_fraction("bound"),
           "fraction of units at the activation's bound (Sigmoid 0/1, Tanh ±1, ReLU6 0/6, "
           "ELU -1, ... ; 0 for others) on every sample and position",
           "units stuck at a flat part of the activation: no gradient flows through them",
           MONITORCH + "lens OutputActivation (death rate with the class's thresholds)",
           differs="Hardtanh and Threshold use default bounds (monitorch reads the module)"),
        _q("ActivationRate", {"output"}, _activation_rate,
           "fraction of output elements with |y| > 1e-8",
           "how much of the layer is active on this batch",
           MONITORCH + "lens OutputActivation (activation rate, averaged over units)"),
    ]
    return table


QUANTITIES: dict[str, Quantity] = _build()


def get_quantity(name: str) -> Quantity:
    """The quantity ``name``, or a ConfigurationError listing the known names."""
    try:
        return QUANTITIES[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown metric {name!r}; the built-in metrics are: "
            f"{', '.join(sorted(QUANTITIES))} (or pass a user metric class)") from None


def markdown_table() -> str:
    """The quantity table of docs/METRICS.md, from the definitions above (one row per quantity)."""
    lines = ["| quantity | formula | what it tells you | reference | differs from the original |",
             "|---|---|---|---|---|"]
    for q in QUANTITIES.values():
        flags = [f for f, on in (("per backward pass", q.per_backward),
                                 ("multi-step", q.stateful), ("vector", q.vector)) if on]
        name = q.name + (f" ({', '.join(flags)})" if flags else "")
        cells = [name, q.formula, q.meaning, q.reference, q.differs or "—"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
