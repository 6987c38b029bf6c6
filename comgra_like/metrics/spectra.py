"""Covariance spectra of a layer's features, affordable on wide layers.

The spectrum is that of the sample covariance (``ddof=1``, as ``torch.cov``) of the rows
of an (n samples x d features) matrix, as magnitudes sorted descending (Taiyi takes the
singular values of the covariance: for a symmetric matrix those are |eigenvalues|).

Exact path: the covariance has rank at most min(n - 1, d), and its non-zero eigenvalues
are those of the smaller of the two Gram matrices ``Xc.T @ Xc`` (d x d) and ``Xc @ Xc.T``
(n x n). We decompose the smaller one with ``eigvalsh`` and pad with zeros to length d,
so a 4096-wide Linear layer on a batch of 64 costs a 64 x 64 problem, exactly.

Above ``EXACT_MAX_DIM`` (when both n and d are large, e.g. a wide conv layer's
N*H*W x C input with C > EXACT_MAX_DIM) the top of the spectrum comes from randomized
subspace iteration on the operator ``v -> Xc.T (Xc v) / (n - 1)``, which never forms a
d x d matrix; the trace (the sum of all eigenvalues) stays exact (the sum of the
column variances).
"""

from __future__ import annotations

import numpy as np

# Largest side of the Gram matrix decomposed exactly. Measured by the sweep of
# benchmarks/benchmark_metrics.py (one thread, n = 4 d float32 samples, forming the matrix
# included): d = 512: exact 0.11 s, top-1 0.06-0.10 s; d = 1024: exact 0.5-0.6 s, top-1
# 0.4-0.5 s; d = 2048: exact 6-8 s, top-1 2.5-2.9 s, top-32 4.4-5.7 s. Up to 1024 the
# randomized path saves little and costs accuracy on flat spectra (about 2% on white
# noise at d = 1024; 1e-9 on decaying ones), above it the cubic term makes exact 2-3x
# slower. The condition numbers need lambda at floor(p d), deep inside the spectrum:
# they always take the exact path, whose cost above the bound is the one measured here.
EXACT_MAX_DIM = 1024
# How many of the largest eigenvalues the randomized path computes by default.
DEFAULT_TOP_K = 32


def centered(x2d: np.ndarray) -> np.ndarray:
    """The float64 copy of ``x2d`` with each column's mean removed."""
    x = np.asarray(x2d, dtype=np.float64)
    return x - x.mean(axis=0, keepdims=True)


def exact_spectrum(x2d: np.ndarray) -> np.ndarray:
    """All d eigenvalue magnitudes of the sample covariance of ``x2d``, descending.

    Fewer than two samples leave the covariance undefined: NaN of length d (torch.cov
    divides by zero there). A decomposition that does not converge also gives NaN —
    never a made-up value (Taiyi returns ones with a 111 at the end).
    """
    n, d = x2d.shape
    if n < 2 or d == 0:
        return np.full(d, np.nan)
    xc = centered(x2d)
    gram = (xc @ xc.T) if n < d else (xc.T @ xc)
    gram /= n - 1
    try:
        values = np.linalg.eigvalsh(gram)
    except np.linalg.LinAlgError:
        return np.full(d, np.nan)
    values = np.sort(np.abs(values))[::-1]
    if values.size < d:
        values = np.concatenate([values, np.zeros(d - values.size)])
    return values


def top_spectrum(x2d: np.ndarray, k: int = DEFAULT_TOP_K, *, iterations: int = 5,
                 oversample: int = 10, seed: int = 0) -> np.ndarray:
    """The k largest eigenvalues of the sample covariance of ``x2d`` (randomized).

    Randomized block Krylov (Musco and Musco 2015): a Gaussian block of k + oversample
    columns, ``iterations`` applications of ``A = Xc.T Xc / (n - 1)`` (never formed), each
    new block orthogonalized against all before it, then Rayleigh-Ritz on the whole Krylov
    basis. Unlike plain subspace iteration it stays accurate when the top eigenvalues are
    not separated (white noise). When the basis would span (almost) all d dimensions the
    exact path is cheaper and is taken. tests/metrics measure the error against
    ``exact_spectrum``; the Ritz values never exceed the true eigenvalues.
    """
    n, d = x2d.shape
    k = max(1, min(k, d))
    if n < 2:
        return np.full(k, np.nan)
    block = min(d, k + oversample)
    if block * (iterations + 1) >= d:
        return exact_spectrum(x2d)[:k]
    xc = centered(x2d)
    rng = np.random.default_rng(seed)
    basis = _orthonormal(rng.standard_normal((d, block)), None)
    blocks = [basis]
    for _ in range(iterations):
        grown = _orthonormal(xc.T @ (xc @ blocks[-1]), np.hstack(blocks))
        if grown.shape[1] == 0:  # the Krylov space is invariant: it holds the answer
            break
        blocks.append(grown)
    basis = np.hstack(blocks)
    projected = xc @ basis
    try:
        values = np.linalg.eigvalsh(projected.T @ projected / (n - 1))
    except np.linalg.LinAlgError:
        return np.full(k, np.nan)
    values = np.sort(np.abs(values))[::-1][:k]
    if values.size < k:
        values = np.concatenate([values, np.zeros(k - values.size)])
    return values


def _orthonormal(y: np.ndarray, against: np.ndarray | None) -> np.ndarray:
    """Orthonormal columns spanning ``y`` minus its part in ``against``'s span; columns
    that vanish (a rank-deficient block) are dropped rather than invented."""
    scale = np.linalg.norm(y)
    for _ in range(2):  # twice is enough (Kahan, Parlett)
        if against is not None:
            y = y - against @ (against.T @ y)
    u, s, _ = np.linalg.svd(y, full_matrices=False)
    keep = s > 1e-10 * max(scale, np.finfo(float).tiny)
    q = u[:, keep]
    if against is not None:
        q = q - against @ (against.T @ q)
        q, _ = np.linalg.qr(q)
    return q


def trace(x2d: np.ndarray) -> float:
    """The covariance's trace (the sum of its eigenvalues): the column variances' sum."""
    n = x2d.shape[0]
    if n < 2:
        return float("nan")
    xc = centered(x2d)
    return float(np.einsum("ij,ij->", xc, xc) / (n - 1))


def needs_exact(x2d: np.ndarray) -> bool:
    """Whether the exact path is within the bound (the smaller Gram side)."""
    return min(x2d.shape) <= EXACT_MAX_DIM
