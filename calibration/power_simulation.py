"""The simulation behind ``calibration.power`` (the model, the shifts and the answer are described
there): ``Shift`` and its checks, the ``Population`` of labelled rows streams draw from, ``Streams``
(per-stream class priors and label permutations, the rows they draw, their expected residuals),
``simulate`` (one run of the vectorised ``DriftTest`` over every stream), and the exact intervals
of the answer: Clopper-Pearson for a detection probability (Clopper & Pearson 1934) and the
order-statistic interval of a delay quantile (the Binomial(m, q) ranks of ``T_(l)``, ``T_(u)``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import label_free
from .monitoring import DriftTest, class_residuals, top_label_residuals

SHIFTS = ("temperature", "tweak_one", "dirichlet", "swap")
SIGNALS = ("labelled", "label_free")
QUANTILES = (0.1, 0.5, 0.9)
BLOCK_ENTRIES = 1 << 21  # streams x rows x classes of residuals made at once


@dataclass(frozen=True)
class Shift:
    """A shift of the stream (see the module): ``kind`` in ``SHIFTS`` and its ``size``;
    ``shift_class`` (tweak_one) and ``swap_classes`` (swap, one pair) fix what is otherwise
    random per stream."""

    kind: str
    size: float
    shift_class: int | None = None
    swap_classes: tuple[int, int] | None = None

    def check(self, k: int) -> None:
        if self.kind not in SHIFTS:
            raise ValueError(f"shift must be one of {', '.join(SHIFTS)}, got {self.kind!r}")
        size = self.size
        if not math.isfinite(size):
            raise ValueError(f"the shift's size must be finite, got {size!r}")
        if self.kind == "temperature" and not 0 < size <= 100:
            raise ValueError(f"a temperature shift's size must lie in (0, 100], got {size!r}")
        if self.kind == "tweak_one" and not 0 < size < 1:
            raise ValueError(f"a tweak_one shift's size (the class's prior) must lie in (0, 1), got {size!r}")
        if self.kind == "dirichlet" and not 0 < size <= 1e6:
            raise ValueError(f"a dirichlet shift's size (its concentration) must lie in (0, 1e6], got {size!r}")
        if self.kind == "swap" and (size != int(size) or not 1 <= size <= k // 2):
            raise ValueError(f"a swap's size is the number of class pairs exchanged, 1 to {k // 2}, got {size!r}")
        if self.shift_class is not None and (self.kind != "tweak_one" or not 0 <= self.shift_class < k):
            raise ValueError(f"shift_class is a class in [0, {k}) of a tweak_one shift")
        if self.swap_classes is not None:
            a, b = self.swap_classes
            if self.kind != "swap" or size != 1 or a == b or not (0 <= a < k and 0 <= b < k):
                raise ValueError(f"swap_classes is two different classes in [0, {k}) of a swap of size 1")


@dataclass(frozen=True)
class Population:
    """What the streams draw from: calibrated probabilities and labels of the rows, and the same
    rows grouped by class (``order``, ``start``, ``count``) for drawing class first."""

    probs: np.ndarray
    labels: np.ndarray

    @property
    def k(self) -> int:
        return self.probs.shape[1]

    def by_class(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = np.argsort(self.labels, kind="stable")
        count = np.bincount(self.labels, minlength=self.k)
        return order, np.concatenate([[0], np.cumsum(count)[:-1]]), count


def shifted_inputs(inputs: np.ndarray, kind: str, size: float) -> np.ndarray:
    """Raw inputs after a temperature shift ``size``: logits and binary scores times ``size``,
    probabilities ``softmax(size * log p)`` (a zero stays zero)."""
    x = np.asarray(inputs, dtype=np.float64)
    if kind in ("logits", "scores"):
        return x * size
    with np.errstate(divide="ignore"):
        z = size * np.log(x)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of a binomial proportion."""
    from scipy.stats import beta  # imported on use: scipy.stats would slow every start

    a = (1 - confidence) / 2
    low = float(beta.ppf(a, successes, trials - successes + 1)) if successes else 0.0
    high = float(beta.ppf(1 - a, successes + 1, trials - successes)) if successes < trials else 1.0
    return low, high


def quantile_interval(delays: np.ndarray, q: float, confidence: float = 0.95) -> dict:
    """The ``q``-quantile of the delays (``inf``: censored) with its order-statistic interval; a
    value past the censoring point is ``None``."""
    m = len(delays)
    ordered = np.sort(delays)
    a = (1 - confidence) / 2

    def at(rank: int):  # 1-based order statistic, None when censored or out of range
        if rank < 1 or rank > m or not np.isfinite(ordered[rank - 1]):
            return None
        return int(ordered[rank - 1])

    from scipy.stats import binom  # imported here, as in clopper_pearson

    low, high = int(binom.ppf(a, m, q)), int(binom.ppf(1 - a, m, q)) + 1
    return {"q": q, "estimate": at(math.ceil(q * m)), "low": at(low) if low >= 1 else 0, "high": at(high)}


def checkpoints_for(labels: int) -> list[int]:
    """``1, 2, 5 x 10^j`` from 100 up to ``labels``, and ``labels``."""
    points = [c * 10**j for j in range(2, 10) for c in (1, 2, 5) if c * 10**j < labels]
    return [*points, labels]


class Streams:
    """Per-stream class priors and label permutations of a shift, and the rows they draw."""

    def __init__(self, population: Population, shift: Shift | None, streams: int, rng: np.random.Generator):
        k = population.k
        self.population, self.rng = population, rng
        self.order, self.start, self.count = population.by_class()
        present = self.count > 0
        freq = self.count / self.count.sum()
        self.priors = np.tile(freq, (streams, 1))
        self.permutation = np.tile(np.arange(k), (streams, 1))
        self.class_first = False
        if shift is not None:  # no shift: the stream's priors and labels are the population's
            kind = shift.kind
            if kind == "tweak_one":
                chosen = np.full(streams, shift.shift_class) if shift.shift_class is not None else \
                    rng.choice(np.flatnonzero(present), streams)
                if not present[chosen].all():
                    raise ValueError(f"class {int(chosen[0])} has no labelled rows to draw")
                rest = np.where(np.arange(k)[None, :] == chosen[:, None], 0.0, freq[None, :])
                self.priors = (1 - shift.size) * rest / rest.sum(axis=1, keepdims=True)
                self.priors[np.arange(streams), chosen] = shift.size
                self.class_first = True
            elif kind == "dirichlet":
                self.priors = np.zeros((streams, k))
                self.priors[:, present] = rng.dirichlet(np.full(int(present.sum()), shift.size), size=streams)
                self.class_first = True
            elif kind == "swap":
                pairs = int(shift.size)
                for s in range(streams):
                    chosen = np.asarray(shift.swap_classes) if shift.swap_classes is not None else \
                        rng.choice(k, size=2 * pairs, replace=False)
                    first, second = chosen.reshape(pairs, 2).T
                    self.permutation[s, first], self.permutation[s, second] = second, first
        self.cumulative = np.cumsum(self.priors, axis=1)

    def draw(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """``(row indices, labels as the stream sees them)``, each ``streams x rows``."""
        streams = len(self.priors)
        if self.class_first:
            u = self.rng.random((streams, rows))
            classes = np.empty((streams, rows), dtype=np.int64)
            for s in range(streams):
                classes[s] = np.minimum(np.searchsorted(self.cumulative[s], u[s], side="right"),
                                        self.population.k - 1)
            within = (self.rng.random((streams, rows)) * self.count[classes]).astype(np.int64)
            index = self.order[self.start[classes] + within]
        else:
            index = self.rng.integers(0, len(self.population.labels), (streams, rows))
        labels = np.take_along_axis(self.permutation, self.population.labels[index], axis=1)
        return index, labels

    def expected(self, per_class_top: np.ndarray, per_class_probs: np.ndarray, confusion: np.ndarray,
                 labelled: bool) -> tuple[np.ndarray, np.ndarray]:
        """Each stream's expected top-label residual and class residuals: with labels
        ``sum_j pi_j (conf_j - P(pred = perm(j) | j))`` and ``pi @ P_bar - pi[perm]`` (a swap is its
        own inverse); without, ``pi @ conf_bar`` and ``pi @ P_bar`` (the caller subtracts the
        reference)."""
        top = self.priors @ per_class_top
        probs = self.priors @ per_class_probs
        if not labelled:
            return top, probs
        hit = np.take_along_axis(np.broadcast_to(confusion, (len(self.priors), *confusion.shape)),
                                 self.permutation[:, :, None], axis=2)[:, :, 0]
        return top - (self.priors * hit).sum(axis=1), probs - np.take_along_axis(self.priors, self.permutation, 1)


@dataclass
class PowerResult:
    """Detection of one simulation (shifted or null): alarm delays per stream (``-1``: none within
    ``labels``) and the expected drift per stream."""

    alarm_at: np.ndarray
    labels: int
    top_drift: np.ndarray
    class_drift: np.ndarray
    visible: np.ndarray

    def summary(self, checkpoints: list[int], confidence: float) -> dict:
        m = len(self.alarm_at)
        delays = np.where(self.alarm_at >= 0, self.alarm_at, np.inf).astype(np.float64)
        within = []
        for n in checkpoints:
            hits = int((delays <= n).sum())
            low, high = clopper_pearson(hits, m, confidence)
            within.append({"labels": n, "alarms": hits, "rate": hits / m, "low": low, "high": high})
        return {"streams": m, "labels": self.labels, "detected": within[-1],
                "within": within, "delay": [quantile_interval(delays, q, confidence) for q in QUANTILES],
                "drift": {"confidence_gap_median": float(np.median(self.top_drift)),
                          "max_class_gap_median": float(np.median(self.class_drift)),
                          "visible_share": float(self.visible.mean())}}


def simulate(population: Population, test: DriftTest, shift: Shift | None, labels: int, rng,
              reference: label_free.LabelFreeReference | None, report: Callable[[float], None]) -> PowerResult:
    """Feed the streams to ``test`` until ``labels`` rows or every stream alarmed; ``report(share
    done)`` after each block."""
    streams = test.shape[0]
    source = Streams(population, shift, streams, rng)
    p, y, k = population.probs, population.labels, population.k
    count = np.maximum(np.bincount(y, minlength=k), 1)[:, None]
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    per_class_top = np.bincount(y, weights=conf, minlength=k) / count[:, 0]
    per_class_probs = np.zeros((k, k))
    np.add.at(per_class_probs, y, p)
    per_class_probs /= count
    confusion = np.zeros((k, k))
    np.add.at(confusion, (y, pred), 1.0)
    confusion /= count
    top, probs = source.expected(per_class_top, per_class_probs, confusion, reference is None)
    if reference is not None:
        top, probs = top - reference.confidence, probs - reference.mean
    top_gap, class_gap = np.abs(top), np.abs(probs)
    visible = (top_gap > test.tolerance) | (class_gap > test.class_tolerance).any(axis=1)
    block = max(1, BLOCK_ENTRIES // (streams * (k + 1)))
    while int(test.n.max()) < labels and not test.alarmed.all():
        rows = min(block, labels - int(test.n.max()))
        index, seen = source.draw(rows)
        batch = p[index.ravel()]
        if reference is None:
            r = top_label_residuals(batch, seen.ravel())
            c = class_residuals(batch, seen.ravel())
        else:
            r, c = label_free.residuals(batch, reference)
        test.update(r.reshape(streams, rows), c.reshape(streams, rows, k))
        report(int(test.n.max()) / labels)
    return PowerResult(test.alarm_at.copy(), labels, top_gap, class_gap.max(axis=1), visible)
