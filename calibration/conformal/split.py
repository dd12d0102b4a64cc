"""Split-conformal prediction sets: a threshold per coverage level fitted on held-out labelled rows,
then ``C(x) = {y : s(x, y) <= q}`` for new rows (scores and threshold: ``calibration.conformal.scores``).

**Marginal** (one threshold per level): for calibration and test rows exchangeable,
``1 - alpha <= P(Y in C(X)) < 1 - alpha + 1/(n + 1)`` (Vovk et al. 2005; Lei et al. 2018, JASA,
Theorem 2.2; the upper bound needs scores without ties). **Class-conditional** (Mondrian; Vovk et al.
2005, ch. 4.5; Sadinle et al. 2019, section 4.3): the threshold ``q_j`` of class ``j`` is the
conformal quantile of the scores of the ``n_j`` calibration rows labelled ``j``, and ``j in C(x)`` iff
``s(x, j) <= q_j``; then ``P(Y in C(X) | Y = j) >= 1 - alpha`` for every class. A class with
``ceil((n_j + 1)(1 - alpha)) > n_j`` has ``q_j = +inf``: it is in every set.

Sets may be empty (non-randomised scores: when even the top class has a score above ``q``; this is
the rule that gives the guarantee, and TorchCP's). Randomised APS/RAPS need one uniform per row at
calibration and at prediction (given, or drawn from a seed): their coverage is then exact in
expectation (``-> 1 - alpha``), not only at least ``1 - alpha``.

``SetPredictor`` is plain data: ``to_dict``/``from_dict`` (and ``to_json``/``from_json``) hold only
names, flags, integers and floats; an infinite threshold is written ``null``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..options import Option, validate_options
from .scores import SCORES, all_scores, checked_probabilities, conformal_quantile, uniforms_for

FORMAT_VERSION = 1
MAX_LEVELS = 16

SET_OPTIONS = (
    Option("score", str, "aps", "Conformity score: 'lac' (1 - p_y), 'aps' or 'raps'.", choices=SCORES),
    Option("alphas", list, [0.1], "Miscoverage levels alpha (coverage 1 - alpha), each in (0, 1).",
           max_items=MAX_LEVELS),
    Option("k_reg", int, 0, "RAPS: ranks up to k_reg are not penalised.", minimum=0, maximum=100000),
    Option("lam", float, 0.0, "RAPS: penalty per rank beyond k_reg.", minimum=0.0, maximum=1e6),
    Option("randomized", bool, False, "APS/RAPS: subtract u * p_y with one uniform u per row."),
    Option("class_conditional", bool, False, "Mondrian: one threshold per class and level."),
)


def _levels(alphas) -> tuple[float, ...]:
    levels = tuple(float(a) for a in alphas)
    if not levels:
        raise ValueError("option 'alphas' needs at least one level")
    for a in levels:
        if not (math.isfinite(a) and 0 < a < 1):
            raise ValueError(f"option 'alphas': every level must lie in (0, 1), got {a!r}")
    if len(set(levels)) != len(levels):
        raise ValueError("option 'alphas' lists a level twice")
    return levels


@dataclass
class SetPredictor:
    """Fitted split-conformal thresholds: ``thresholds[l]`` is one float (marginal) or ``k`` floats
    (class-conditional) for level ``alphas[l]``; ``counts`` the calibration rows (per class when
    class-conditional)."""

    score: str
    alphas: tuple[float, ...]
    thresholds: list
    n_classes: int
    counts: list
    k_reg: int = 0
    lam: float = 0.0
    randomized: bool = False
    class_conditional: bool = False
    format_version: int = field(default=FORMAT_VERSION)

    @classmethod
    def fit(cls, probs, labels, uniforms=None, seed=None, **options) -> SetPredictor:
        """Thresholds from labelled calibration rows (probabilities ``(n, k)``, labels ``(n,)``)."""
        if isinstance(options.get("alphas"), tuple | np.ndarray):
            options["alphas"] = [float(a) for a in options["alphas"]]
        opts = validate_options("conformal", SET_OPTIONS, options)
        alphas = _levels(opts["alphas"])
        p, y = checked_probabilities(probs, labels)
        if opts["k_reg"] > p.shape[1]:
            raise ValueError(f"option 'k_reg' must be <= the number of classes {p.shape[1]}")
        u = uniforms_for(len(y), uniforms, seed) if opts["randomized"] and opts["score"] != "lac" else None
        s = all_scores(p, opts["score"], opts["k_reg"], opts["lam"], u)[np.arange(len(y)), y]
        k = p.shape[1]
        thresholds: list[list[float]] | list[float]  # per level: one per class, or one
        if opts["class_conditional"]:
            groups = [s[y == j] for j in range(k)]
            thresholds = [[conformal_quantile(g, a) for g in groups] for a in alphas]
            counts = [len(g) for g in groups]
        else:
            thresholds = [conformal_quantile(s, a) for a in alphas]
            counts = [len(s)]
        return cls(opts["score"], alphas, thresholds, k, counts, opts["k_reg"], opts["lam"],
                   opts["randomized"], opts["class_conditional"])

    def threshold(self, alpha: float) -> np.ndarray:
        """The threshold(s) of one fitted level: shape ``()`` or ``(k,)``."""
        for a, q in zip(self.alphas, self.thresholds, strict=True):
            if a == alpha:
                return np.asarray(q, dtype=np.float64)
        raise ValueError(f"no fitted level alpha={alpha!r}; fitted: {list(self.alphas)}")

    def scores(self, probs, uniforms=None, seed=None) -> np.ndarray:
        """The ``(n, k)`` scores of every label of new rows."""
        p, _ = checked_probabilities(probs)
        if p.shape[1] != self.n_classes:
            raise ValueError(f"probabilities have {p.shape[1]} classes, the set predictor {self.n_classes}")
        u = uniforms_for(len(p), uniforms, seed) if self.randomized and self.score != "lac" else None
        return all_scores(p, self.score, self.k_reg, self.lam, u)

    def predict_sets(self, probs, alpha: float | None = None, uniforms=None, seed=None) -> np.ndarray:
        """Boolean mask ``(n, k)``: ``mask[i, j]`` iff class ``j`` is in row ``i``'s set at level
        ``alpha`` (the first fitted level if None). Randomised scores need ``uniforms`` or ``seed``."""
        q = self.threshold(self.alphas[0] if alpha is None else alpha)
        return self.scores(probs, uniforms, seed) <= q

    def to_dict(self) -> dict:
        def plain(q):
            return None if math.isinf(q) else float(q)

        thresholds = [[plain(v) for v in q] if self.class_conditional else plain(q) for q in self.thresholds]
        return {"method": "split_conformal", "format_version": self.format_version, "score": self.score,
                "alphas": [float(a) for a in self.alphas], "thresholds": thresholds,
                "n_classes": int(self.n_classes), "counts": [int(c) for c in self.counts],
                "k_reg": int(self.k_reg), "lam": float(self.lam), "randomized": bool(self.randomized),
                "class_conditional": bool(self.class_conditional)}

    @classmethod
    def from_dict(cls, data: dict) -> SetPredictor:
        if data.get("method") != "split_conformal" or data.get("format_version") != FORMAT_VERSION:
            raise ValueError("not a split_conformal set predictor of format version 1")
        opts = validate_options("conformal", SET_OPTIONS, {name: data[name] for name in
                                ("score", "alphas", "k_reg", "lam", "randomized", "class_conditional")})
        alphas, k = _levels(opts["alphas"]), data["n_classes"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ValueError("stored n_classes must be an integer >= 2")
        width = k if opts["class_conditional"] else None
        thresholds = [_stored_threshold(q, width) for q in data["thresholds"]]
        counts = [int(c) for c in data["counts"]]
        if len(thresholds) != len(alphas) or len(counts) != (width or 1) or min(counts) < 0:
            raise ValueError("stored thresholds and counts do not match the levels and classes")
        return cls(opts["score"], alphas, thresholds, k, counts, opts["k_reg"], opts["lam"],
                   opts["randomized"], opts["class_conditional"])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> SetPredictor:
        return cls.from_dict(json.loads(text))


def _stored_threshold(value, width: int | None):
    """A stored threshold: a finite number or null (``+inf``); a list of ``width`` of them per class."""
    if width is not None:
        if not isinstance(value, list) or len(value) != width:
            raise ValueError(f"a class-conditional level needs {width} thresholds")
        return [_stored_threshold(v, None) for v in value]
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"a stored threshold must be a finite number or null, got {value!r}")
    return float(value)


def coverage_and_size(mask: np.ndarray, labels) -> tuple[float, float]:
    """``(fraction of rows whose label is in its set, mean set size)`` of a set mask ``(n, k)``."""
    y = np.asarray(labels)
    return float(mask[np.arange(len(y)), y].mean()), float(mask.sum(axis=1).mean())
