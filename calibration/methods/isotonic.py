"""Isotonic-regression calibrators (Zadrozny & Elkan 2002; Mix-n-Match, Zhang et al. 2020).

An isotonic map is the non-decreasing function minimising the squared error of 0/1 targets
against scores, computed by the pool-adjacent-violators algorithm (``scipy.optimize.
isotonic_regression``) after pooling tied scores exactly as scikit-learn does (``isotonic_knots``:
a score less than ``1e-15`` above its cluster's first score joins that cluster): the knots are
scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``'s, so IRM and IROvA are the exact PAVA
solution (a wider pooling tolerance would move knots away from scikit-learn's). As in
scikit-learn's ``IsotonicRegression``, it is stored as knots (the first and last score of each
constant block) and applied by linear
interpolation between knots, constant outside them. The interpolation is clamped to each
segment's end values so that it is monotone in floating point too. Such a map can be steep
(knots 1e-15 apart): an ulp of difference in its input can move its output by up to the step
``Δy`` at that knot, so every backend feeds it the same float64 scores (see Backends below).

* ``isotonic_multiclass`` — IRM (Mix-n-Match §3.3): one map ``g`` fitted to all n·k pairs
  ``(p_ij, [y_i = j])``, made strictly increasing as ``g(p) + 1e-9·p`` (the paper's code),
  applied to every entry and renormalised. Strict increase keeps each row's order, so IRM is
  accuracy-preserving; the paper's code leaves rows unnormalised, this one does not. In
  floating point the 1e-9 slope can be lost (against an O(1) value, or in a float32 output),
  tying the top entry with a smaller one; ``strict_top`` then raises the top entry by one ulp
  of the returned dtype, so that even a plain first-index argmax of the output is the input's.
* ``isotonic_one_vs_all`` — IROvA: one map per class fitted to ``(p_ij, [y_i = j])``,
  renormalised; a row that every map sends to 0 becomes uniform. Not accuracy-preserving.

Fitting sorts the scores (``np.sort``, not a full ``argsort``; IRM sorts its own softmax in
place; the positives are located with ``searchsorted``), marks the clusters' starts (a flag
per score, counted per block to find a cluster's number or start), and runs PAVA on the
clusters that hold a positive and the two ends of each run without one (``isotonic_knots``:
exact, as PAVA pools targets of 0 with exact sums). On n·k = 4·10⁷ scores (40000 x 1000) IRM's
fit then holds the sorted scores and one flag per score (the clusters' start positions are
counted from the flags, not stored). Above ``STREAM_ABOVE`` scores IRM holds no sorted copy at all
(``isotonic_streamed``: one value range of the scores at a time, the same knots, at a few times
the fit's time; figures in docs/benchmarks.md). Prediction goes in row blocks of ``BLOCK`` entries into
the output, normalised in place.

Backends: PAVA fits on a float64 host copy (numpy's softmax of logits); prediction
(``searchsorted`` and linear interpolation through the knots) runs on the input's device in
float64, on the scores ``map_scores`` gives: the input's own probabilities, or for logits numpy's
softmax of them made on the host and moved to the device. That is the fit's softmax bit for bit,
so a tensor's logits reach the map as the numpy caller's do. torch's softmax differs from
numpy's by an ulp in half the entries of cifar10_resnet50_cross_entropy's test logits, which the
exact maps fitted on its validation split turn into probabilities up to 4.4e-11 apart (IRM;
3.4e-11 IROvA); through ``map_scores`` they agree to rounding (the cost: one host round trip of
the logits on a GPU).
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import column, device, from_host, namespace, to_host
from ..base import Calibrator, FitDiagnostics, normalise_rows, on_device, param_array
from ..inputs import InputBatch, validate_inputs
from ..metrics.validated import BLOCK_ENTRIES, row_blocks
from ..softmax import softmax
from .isotonic_knots import BLOCK, fit_isotonic_binary, isotonic_knots

STRICT_SLOPE = 1e-9
#: IRM fits on more scores than this without their sorted copy (``isotonic_streamed``: the same knots)
STREAM_ABOVE = 1 << 22


def interpolate_monotone(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation through the knots, constant outside them, clamped to
    each segment's end values (so non-decreasing knots give a non-decreasing result)."""
    xp = namespace(x)
    if xs.shape[0] == 1:
        return xp.full_like(x, float(ys[0]))
    flat = xp.reshape(x, (-1,))
    segment = xp.clip(xp.searchsorted(xs, flat, side="right") - 1, min=0, max=xs.shape[0] - 2)
    x0, x1 = xp.take(xs, segment), xp.take(xs, segment + 1)
    y0, y1 = xp.take(ys, segment), xp.take(ys, segment + 1)
    t = xp.clip((flat - x0) / (x1 - x0), min=0.0, max=1.0)
    value = xp.minimum(xp.maximum(y0 + (y1 - y0) * t, y0), y1)
    return xp.reshape(value, x.shape)


def strict_top(probabilities, inputs):
    """Make each row's input argmax (the first of its largest inputs) strictly the largest
    output among the entries whose input is smaller, in the output's own dtype: where rounding
    (float32 output, or a strict slope of 1e-9 lost against an O(1) value) tied the top entry
    with such an entry, the top entry is raised to the next representable number. A monotone
    map never puts such an entry strictly above the top one, so this changes only exact ties,
    by one unit in the last place, and a plain argmax of the output is the input's argmax."""
    xp = namespace(probabilities)
    k = probabilities.shape[1]
    top_value = xp.max(inputs, axis=1, keepdims=True)
    first = xp.argmax(inputs, axis=1)
    is_top = xp.arange(k, device=device(inputs))[None, :] == first[:, None]
    smaller = inputs < top_value
    out_top = xp.max(xp.where(is_top, probabilities, -math.inf), axis=1, keepdims=True)
    rival = xp.max(xp.where(smaller, probabilities, -math.inf), axis=1, keepdims=True)
    tied = rival >= out_top
    if not bool(xp.any(tied)):
        return probabilities
    raised = xp.nextafter(xp.maximum(out_top, rival), xp.full_like(out_top, math.inf))
    return xp.where(is_top & tied, raised, probabilities)


def normalised_in_place(values: np.ndarray) -> np.ndarray:
    """``base.normalise_rows`` of a numpy array, written into it (the same sums and quotients)."""
    sums = values.sum(axis=1, keepdims=True)
    empty = sums[:, 0] <= 0
    if empty.any():
        values[empty] = 1.0
        sums = values.sum(axis=1, keepdims=True)
    values /= sums
    return values


def softmax_columns(z: np.ndarray):
    """``(columns, softmax(z)[:, columns])`` for consecutive slices of about ``BLOCK_ENTRIES /
    n`` columns of a numpy ``(n, k)`` ``z``, bit for bit those of ``softmax(z)`` (each row's
    maximum and sum of exponentials made once, in row blocks, as ``softmax`` makes them; then
    the same subtraction, ``exp`` over a contiguous array and division), without its ``(n, k)``
    result."""
    n, k = z.shape
    top, sums = np.empty((n, 1)), np.empty((n, 1))
    for rows in row_blocks(n, k):
        top[rows] = z[rows].max(axis=-1, keepdims=True)
        shifted = z[rows] - top[rows]
        np.exp(shifted, out=shifted)
        sums[rows] = shifted.sum(axis=-1, keepdims=True)
    width = max(1, BLOCK_ENTRIES // n)
    for start in range(0, k, width):
        columns = slice(start, min(start + width, k))
        block = z[:, columns] - top
        np.exp(block, out=block)
        block /= sums
        yield columns, block


def map_scores(scores: InputBatch):
    """The probabilities an isotonic map reads, the same float64 values on every backend: the
    input's own, or numpy's softmax of its logits, made on the host and moved to the input's
    device (see the module docstring)."""
    if scores.xp is np or scores.source == "probabilities":
        return scores.probabilities
    return from_host(softmax(to_host(scores.logits)), scores.logits)


def _knot_params(xs, ys) -> dict:
    return {"x": xs.tolist(), "y": ys.tolist()}


def _read_knots(raw) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(raw, dict):
        raise ValueError("stored isotonic knots must be a dict with 'x' and 'y'")
    size = len(raw.get("x", []))
    xs, ys = param_array(raw, "x", (size,)), param_array(raw, "y", (size,))
    if size == 0 or np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) < 0):
        raise ValueError("stored isotonic knots must be increasing in x and non-decreasing in y")
    return xs, ys


class IsotonicMulticlass(Calibrator):
    """IRM: one strictly increasing isotonic map for all classes; see the module docstring."""

    method = "isotonic_multiclass"
    description = (
        "Multi-class isotonic regression, IRM (Zhang et al. 2020): one strictly increasing "
        "isotonic map fitted to all classes' probabilities, renormalised."
    )
    accuracy_preserving = True

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        if scores.n * scores.k > STREAM_ABOVE:  # the same knots, one value range of the scores at a time
            from .isotonic_streamed import streamed_knots

            blocks = row_blocks(scores.n, scores.k)

            def block_scores():  # float32 input widened a block of rows at a time (exact: the same scores)
                for rows in blocks:
                    yield (softmax(scores.logit_rows(rows)) if scores.source == "logits"
                           else scores.probability_rows(rows)).reshape(-1)

            positives = np.concatenate([values.reshape(-1, scores.k)[np.arange(len(values) // scores.k),
                                                                     labels[rows]]
                                        for rows, values in zip(blocks, block_scores(), strict=True)])
            self.knots_x_, self.knots_y_ = streamed_knots(block_scores, scores.n * scores.k, positives)
            return FitDiagnostics(True, 1, "exact (pool adjacent violators)")
        # its own copy of the probabilities (those of the batch stay as they are), sorted in place
        p = softmax(scores.logits) if scores.source == "logits" else scores.probabilities.copy()
        positives = p[np.arange(scores.n), labels]
        ordered = p.reshape(-1)
        del p
        ordered.sort()
        self.knots_x_, self.knots_y_ = isotonic_knots(ordered, positives)
        return FitDiagnostics(True, 1, "exact (pool adjacent violators)")

    def _predict(self, scores: InputBatch) -> np.ndarray:
        p = map_scores(scores)
        xs, ys = on_device(self.knots_x_, scores), on_device(self.knots_y_, scores)
        if scores.xp is not np:
            return normalise_rows(interpolate_monotone(p, xs, ys) + STRICT_SLOPE * p)
        out = np.empty_like(p)
        for rows in row_blocks(p.shape[0], p.shape[1], BLOCK):  # row by row the same arithmetic as on all rows
            block = out[rows]
            block[...] = interpolate_monotone(p[rows], xs, ys)
            block += STRICT_SLOPE * p[rows]
            normalised_in_place(block)
        return out

    def predict_proba(self, x):
        """As ``Calibrator.predict_proba``, then ``strict_top`` in the returned dtype."""
        probabilities = super().predict_proba(x)
        scores = validate_inputs(x, self.input)
        return strict_top(probabilities, getattr(scores, scores.source))

    def _params(self) -> dict:
        return {"knots": _knot_params(self.knots_x_, self.knots_y_)}

    def _set_params(self, params: dict) -> None:
        self.knots_x_, self.knots_y_ = _read_knots(params.get("knots"))

    def summary(self) -> dict:
        return {"n_knots": len(self.knots_x_)}


class IsotonicOneVsAll(Calibrator):
    """IROvA: one isotonic map per class, renormalised; see the module docstring."""

    method = "isotonic_one_vs_all"
    description = (
        "One-vs-all isotonic regression, IROvA (Zadrozny & Elkan 2002): one isotonic map per "
        "class, renormalised."
    )

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        if scores.source == "probabilities" or scores.xp is not np or "probabilities" in scores.__dict__:
            p = scores.probabilities  # the input itself, or already made
            self.knots_ = [fit_isotonic_binary(p[:, j], labels == j) for j in range(scores.k)]
        else:  # a few columns of the softmax at a time (the whole would be 2x the float32 input)
            self.knots_ = [fit_isotonic_binary(block[:, j - columns.start], labels == j)
                           for columns, block in softmax_columns(scores.logits)
                           for j in range(columns.start, columns.stop)]
        return FitDiagnostics(True, 1, "exact (pool adjacent violators)")

    def _predict(self, scores: InputBatch) -> np.ndarray:
        p = map_scores(scores)
        if scores.xp is np:  # the columns written into one array, normalised there
            mapped = np.empty_like(p)
            for j, (xs, ys) in enumerate(self.knots_):
                mapped[:, j] = interpolate_monotone(p[:, j], xs, ys)
            return normalised_in_place(mapped)
        mapped = scores.xp.stack([interpolate_monotone(column(p, j), on_device(xs, scores), on_device(ys, scores))
                                  for j, (xs, ys) in enumerate(self.knots_)], axis=1)
        return normalise_rows(mapped)

    def _params(self) -> dict:
        return {"knots": [_knot_params(xs, ys) for xs, ys in self.knots_]}

    def _set_params(self, params: dict) -> None:
        knots = params.get("knots")
        if not isinstance(knots, list) or len(knots) != self.n_classes_:
            raise ValueError(f"stored IROvA parameters need {self.n_classes_} sets of knots")
        self.knots_ = [_read_knots(raw) for raw in knots]

    def summary(self) -> dict:
        return {"n_knots": [len(xs) for xs, _ in self.knots_]}
