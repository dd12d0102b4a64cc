"""Kernel-density estimate of the expected calibration error (Zhang, Kailkhura, Han,
"Mix-n-Match", ICML 2020, §4 and their code ``ece_kde_binary``).

    ECE_d = ( ∫ |z - π(z)|^d f(z) dz / ∫ f(z) dz )^(1/d),   d = ``norm`` in {1, 2}

over z in [0, 1]. For k > 2, z is the top-label confidence and c_i = 1 when the argmax is
the label. For k = 2, as in the paper's code, z is the probability of class 1 and c_i = [y_i = 1]:
this estimates the binary (canonical) calibration error E|p₁ - P(y = 1 | p₁)|, which equals
the classwise ECE of a binary model and is at least its top-label ECE (top-label binning
merges p₁ = c with p₁ = 1 - c). f is the kernel density of z and
π(z) = Σ_i c_i K(z - z_i) / Σ_i K(z - z_i) the kernel estimate of accuracy at z (the paper's
acc·f₁/f). Kernel: triweight, ``K(u) ∝ (1 - (u/3h)^2)^3`` on |u| < 3h, whose standard
deviation is the bandwidth h (KDEpy's convention). Default ``h = σ̂ · (2n)^(-1/5)``, exactly as
``ece_kde_binary`` in the Mix-n-Match code (``kbw = np.std(dconf_1)*(N*2)**-0.2``): σ̂ the
(population, ddof = 0) standard deviation of z over the samples with c_i = 1 (of all z if fewer
than two such samples), n the number of samples — the count of points before mirroring, so
``2n`` is not the mirrored sample size (that is 3n). No 1.06 factor (Silverman's normal-reference
constant is not in the reference code).
The default h is raised to at least ``MIN_BANDWIDTH`` = 1e-4 (it falls below only when the
confidences are all but equal, e.g. two samples of one fold; the grid would need over 2·10⁵
points); an explicit bandwidth below it is an error.
Boundary correction: every sample is mirrored at 0 and at 1. The densities are computed on a grid of spacing at most
h/20 (linear binning and an exact discrete convolution) and integrated by the trapezoid rule.
"""

from __future__ import annotations

import numpy as np

from ..backend import to_host
from ._inputs import labelled_probabilities, top_label_of

MIN_BANDWIDTH = 1e-4


def _triweight(offsets: np.ndarray, h: float) -> np.ndarray:
    u = offsets / (3.0 * h)
    return np.where(np.abs(u) < 1, 35.0 / 32.0 * (1 - u**2) ** 3, 0.0) / (3.0 * h)


def _linear_binning(points: np.ndarray, weights: np.ndarray, origin: float, step: float, size: int):
    position = (points - origin) / step
    left = np.floor(position).astype(np.int64)
    frac = position - left
    grid = np.bincount(left, weights=weights * (1 - frac), minlength=size)
    grid += np.bincount(left + 1, weights=weights * frac, minlength=size)
    return grid[:size]


def default_bandwidth(z: np.ndarray, c: np.ndarray) -> float:
    """``σ̂ · (2n)^(-1/5)`` of the Mix-n-Match code (see the module docstring), before the
    ``MIN_BANDWIDTH`` floor: ``z`` the confidences, ``c`` the 0/1 correctness."""
    spread = float(np.std(z[c == 1])) if np.count_nonzero(c) >= 2 else 0.0
    return (spread or float(np.std(z))) * (2 * len(z)) ** -0.2


def kde_ece(probs, labels, norm: int = 1, bandwidth: float | None = None) -> float:
    """Kernel-density ECE (see the module docstring)."""
    if norm not in (1, 2):
        raise ValueError(f"norm must be 1 or 2, got {norm!r}")
    shape = tuple(np.shape(probs))  # lists, numpy arrays and tensors alike
    binary = len(shape) == 1 or shape[1:] == (2,)
    if binary:
        p, y, _ = labelled_probabilities(probs, labels)
        z, c = to_host(p[:, 1]), (y == 1).astype(np.float64)
    else:
        z, c = top_label_of(probs, labels)
    return kde_error(z, c, norm, bandwidth)


def kde_error(z: np.ndarray, c: np.ndarray, norm: int = 1, bandwidth: float | None = None) -> float:
    """``kde_ece`` of validated host float64 n-vectors: ``z`` the confidences (for k = 2 the
    probability of class 1) and ``c`` the 0/1 correctness (for k = 2, ``[y = 1]``)."""
    n = len(z)
    if bandwidth is None:
        h = default_bandwidth(z, c)
        if h == 0:  # all confidences equal: the density is a point mass
            return float(abs(z[0] - c.mean()))
        h = max(h, MIN_BANDWIDTH)
    else:
        h = float(bandwidth) if isinstance(bandwidth, int | float) and not isinstance(bandwidth, bool) else -1.0
        if not np.isfinite(h) or h < MIN_BANDWIDTH:
            raise ValueError(f"bandwidth must be a number >= {MIN_BANDWIDTH:g}, got {bandwidth!r}")
    step = min(h / 20.0, 1.0 / 256)
    inner = int(np.ceil(1.0 / step))
    step = 1.0 / inner
    pad = int(np.ceil(3.0 * h / step)) + 1
    size = inner + 1 + 2 * pad
    origin = -pad * step
    mirrored = np.concatenate([z, -z, 2.0 - z])
    keep = (mirrored > origin) & (mirrored < 1.0 + pad * step)
    points = mirrored[keep]
    ones = np.ones(3 * n)[keep]
    correct = np.tile(c, 3)[keep]
    kernel = _triweight(np.arange(-pad, pad + 1) * step, h)
    density = np.convolve(_linear_binning(points, ones, origin, step, size), kernel, "same") / n
    hits = np.convolve(_linear_binning(points, correct, origin, step, size), kernel, "same") / n
    nodes = origin + np.arange(size) * step
    inside = slice(pad, pad + inner + 1)
    f, g, x = density[inside], hits[inside], nodes[inside]
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(f > 1e-12, np.clip(g / f, 0.0, 1.0), 0.0)
    integrand = np.abs(x - accuracy) ** norm * np.where(f > 1e-12, f, 0.0)
    value = np.trapezoid(integrand, x) / np.trapezoid(f, x)
    return float(value ** (1.0 / norm))
