"""Comparing calibration methods: stratified K-fold cross-validation of candidates.

``compare`` runs stratified K-fold cross-validation on the labelled validation set: each
candidate is fitted on K-1 folds and scored on the held-out fold, and per candidate the mean
and spread across folds of NLL, Brier, ECE, KDE-ECE, calibration gain ΔECE² (Zhang et al.
2020, eq. 8: the drop in Brier from the raw to the calibrated probabilities of the held-out
fold), accuracy change and fit time are reported, and per fold each candidate's ``tail_risk``
against temperature scaling fitted on the same folds (with that reference's held-out NLL).
Folds are dealt class by class after a seeded shuffle, so every fold holds each class's share
within one sample. The rule that picks one candidate from the result is
``calibration.selection``.

The candidates, and the default set of them, are in ``calibration.candidates``.

Memory: on an array the core may reorder (``inputs.allow_reordering``: the float64
copy ``validate_inputs`` made, or the observations a service fit loads) a fold's training and
held-out rows are views of the array laid out in place for that fold (``FoldLayout``; every row
is put back afterwards); on any other array they are copied once per fold. float32 numpy input stays
float32 (``InputBatch.given``; no whole float64 copy), read by the fits' float32 paths. Each candidate gets
fresh batches of them, so what it derives (their probabilities) goes with it. Held-out
probabilities (the uncalibrated ones, the TS reference's, each candidate's) are made and reduced
to their metrics one row block at a time (``held_out``), never held whole. On 10000 x 1000 float32
logits with the six default candidates that every size gets (temperature to IROvA-TS), five
folds, the traced peak fell from 27x the array's bytes (IRM's fit, and each fold's rows kept
alive by a reference cycle in scipy's brentq) to 7.6x; with the views, auto over TS, ETS, EC and
IRM peaked at 4.4x in RSS (the float64 array is 2x of it). With held-out blocks, TS's
cross-validation at 50000 x 1000 peaks at 2.10x in RSS above the runtime (was ~3x): the float64
array and a few row blocks (``benchmarks/auto_memory.py``).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .candidates import MAX_CANDIDATES, Candidate, candidate, default_candidates
from .fold_layout import FoldLayout
from .inputs import InputBatch, check_labels, check_probabilities, may_reorder, validate_inputs
from .json_values import json_safe
from .metrics.scores import mean_tail_risk, tail_risk_terms
from .metrics.validated import BLOCK_ENTRIES, ValidatedMetrics, row_blocks
from .registry import create

MIN_BLOCK_ROWS = 64  # rows of a held-out block at least (``held_out_blocks``)
METRICS = ("nll", "brier", "ece", "kde_ece", "calibration_gain", "accuracy_change", "fit_seconds")


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold number of each row: rows shuffled with ``seed``, then dealt out class by class
    in turn, so each fold holds every class's share to within one sample."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]  # grouped by class, shuffled within
    assignment = np.empty(len(labels), dtype=np.int64)
    assignment[order] = np.arange(len(labels)) % folds
    return assignment


@dataclass
class MethodResult:
    """One candidate's per-fold values of every metric (NaN where a fit failed)."""

    candidate: Candidate
    accuracy_preserving: bool
    per_fold: dict[str, list[float]]
    converged: bool = True
    error: str | None = None
    #: per fold, the held-out rows' ``tail_risk`` against temperature scaling fitted on that fold
    tail_risk: list[float] = field(default_factory=list)
    #: held-out rows, over all folds, whose label got a probability below the probability floor
    #: (their unfloored cross-validated NLL is infinite or beyond ``log(1/EPSILON)``)
    floored_labels: int = 0

    def mean(self, metric: str) -> float:
        return float(np.mean(self.per_fold[metric]))

    def std(self, metric: str) -> float:
        values = np.asarray(self.per_fold[metric])
        if not np.isfinite(values).all():
            return math.nan
        return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0

    def to_dict(self) -> dict:
        return {
            "name": self.candidate.name,
            "method": self.candidate.method,
            "options": self.candidate.options,
            "accuracy_preserving": self.accuracy_preserving,
            "converged": self.converged,
            "error": self.error,
            "mean": {m: json_safe(self.mean(m)) for m in METRICS},
            "std": {m: json_safe(self.std(m)) for m in METRICS},
        }


@dataclass
class Comparison:
    """The cross-validated comparison: the uncalibrated model's per-fold metrics and one
    ``MethodResult`` per candidate."""

    n_samples: int
    n_classes: int
    folds: int
    seed: int
    uncalibrated: dict[str, list[float]]
    results: list[MethodResult]
    #: per fold, the held-out NLL of temperature scaling fitted on the other folds (the
    #: reference of ``tail_risk``; empty where no reference was fitted)
    reference_nll: list[float] = field(default_factory=list)

    def result(self, name: str) -> MethodResult:
        for result in self.results:
            if result.candidate.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "n_samples": self.n_samples,
            "n_classes": self.n_classes,
            "folds": self.folds,
            "seed": self.seed,
            "uncalibrated": {m: json_safe(float(np.mean(v))) for m, v in self.uncalibrated.items()},
            "methods": [result.to_dict() for result in self.results],
        }


def held_out_blocks(n: int, k: int) -> list[slice]:
    """``row_blocks`` of ``n`` held-out rows, none shorter than ``MIN_BLOCK_ROWS`` (a short last block
    joins the one before): a BLAS product of a few rows can round differently from the same rows
    in a longer one (matrix and Dirichlet scaling's predictions did, for 1-6 rows)."""
    blocks = row_blocks(n, k, max(BLOCK_ENTRIES, MIN_BLOCK_ROWS * k))
    if len(blocks) > 1 and blocks[-1].stop - blocks[-1].start < MIN_BLOCK_ROWS:
        blocks[-2:] = [slice(blocks[-2].start, blocks[-1].stop)]
    return blocks


def held_out(rows: np.ndarray, labels: np.ndarray, source: str, predict: Callable[[InputBatch], np.ndarray],
             reference: Callable[[InputBatch], np.ndarray] | None = None) -> tuple[dict[str, float], np.ndarray]:
    """The metrics (``ValidatedMetrics``, without classwise ECE) of ``predict``'s probabilities of
    held-out ``rows`` of kind ``source``, checked as the metric functions check them, and their
    ``tail_risk_terms`` against ``reference``'s, made and reduced one row block at a time
    (``held_out_blocks``): no held-out ``(n, k)`` matrix is held (at 50000 x 1000 a fold's was 0.4x
    the float32 array's bytes, and a candidate's, the reference's and their temporaries were alive
    together). Each row's probabilities are those of the whole matrix, so the metrics are
    ``nll(p, y)``, ``ece(p, y)``, ... and the terms are those of all the rows, bit for bit. An error
    is raised as on the whole matrix (its row numbers are the held-out rows', not a block's). The
    metrics also count ``floored_labels`` (``ValidatedMetrics.floored_labels``)."""
    measured = ValidatedMetrics(labels, rows.shape[1], classwise=False)
    terms = [np.empty(0)]
    try:
        for block in held_out_blocks(*rows.shape):
            probabilities = predict(InputBatch(**{source: rows[block]}))
            check_probabilities(probabilities)
            measured.add(probabilities)
            if reference is not None:
                terms.append(tail_risk_terms(probabilities, reference(InputBatch(**{source: rows[block]}))))
    except ValueError:
        check_probabilities(predict(InputBatch(**{source: rows})))  # raises the whole matrix's error
        raise
    return {**measured.metrics(), "floored_labels": measured.floored_labels()}, np.concatenate(terms)


def _fold_metrics(measured: dict[str, float], raw_brier: float, raw_accuracy: float) -> dict[str, float]:
    """Held-out metrics; the gains against the fold's uncalibrated Brier score and accuracy."""
    return {
        "nll": measured["nll"],
        "brier": measured["brier"],
        "ece": measured["ece"],
        "kde_ece": measured["kde_ece"],
        "calibration_gain": raw_brier - measured["brier"],
        "accuracy_change": measured["accuracy"] - raw_accuracy,
    }


def reference_model(train: InputBatch, y_train: np.ndarray, test: np.ndarray,
                    source: str) -> Callable[[InputBatch], np.ndarray]:
    """The held-out probabilities of temperature scaling fitted on the training folds (the
    uncalibrated ones where it has no optimum, or where it overflows on any of the held-out rows
    ``test``), what ``tail_risk`` measures against, as a function of a batch of held-out rows: a
    fold need not hold them while its candidates fit (it makes them again, the same values, block
    by block, when it measures each candidate's tail risk)."""
    try:
        reference = create("temperature", {"input": "logits"}).fit_batch(train, y_train, warn=False)
        for block in held_out_blocks(*test.shape):  # decided for the whole fold, as on its whole matrix
            reference.predict_batch(InputBatch(**{source: test[block]}))
    except (ValueError, ArithmeticError):
        reference = None

    def probabilities(rows: InputBatch) -> np.ndarray:
        return rows.probabilities if reference is None else reference.predict_batch(rows)

    return probabilities


def prepare_comparison(n: int, k: int, methods: Sequence | None, folds: int, input: str) -> list[Candidate]:
    """The candidates of a comparison of ``n`` samples of ``k`` classes, every option and the
    fold count checked (``ValueError``) before anything is fitted."""
    if isinstance(folds, bool) or not isinstance(folds, int | np.integer) or not 2 <= folds <= 20:
        raise ValueError(f"folds must be an integer from 2 to 20, got {folds!r}")
    if n < 2 * folds:
        raise ValueError(f"{folds}-fold cross-validation needs at least {2 * folds} samples, got {n}")
    if methods is not None and len(methods) > MAX_CANDIDATES:
        raise ValueError(f"a comparison may have at most {MAX_CANDIDATES} candidates, got {len(methods)}")
    candidates = default_candidates(n, k) if methods is None else [candidate(m) for m in methods]
    if not candidates:
        raise ValueError("methods must name at least one candidate")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidate names must be distinct, got {names}")
    for c in candidates:
        c.create(input)
    return candidates


def compare(
    x,
    labels,
    methods: Sequence | None = None,
    folds: int = 5,
    seed: int = 0,
    input: str = "logits",
    progress: Callable[[int, int], None] | None = None,
    only_folds: Sequence[int] | None = None,
) -> Comparison:
    """Stratified ``folds``-fold cross-validation of each candidate (names or
    ``{"method", "options", "name"}``; default ``default_candidates``) on ``x`` of kind ``input``.
    ``only_folds`` holds out just those folds (same assignment): the per-fold lists then have one
    entry per fold run, in that order, so that parts run apart concatenate to the whole.

    Deterministic for a seed (fit times aside). A candidate whose fit raises is reported with
    its error and NaN metrics instead of stopping the comparison. ``progress(done, total)`` is
    called after each fit.
    """
    scores = validate_inputs(x, input)
    y = check_labels(labels, scores.n, scores.k)
    candidates = prepare_comparison(scores.n, scores.k, methods, folds, input)

    assignment = stratified_folds(y, folds, seed)
    source = scores.given  # float32 numpy as it came (no float64 copy): its folds are fancy-indexed float32
    uncalibrated: dict[str, list[float]] = {m: [] for m in METRICS}
    reference_nll = []
    results = [MethodResult(c, c.create(input).accuracy_preserving, {m: [] for m in METRICS}) for c in candidates]
    run_folds = list(range(folds)) if only_folds is None else [int(f) for f in only_folds]
    if only_folds is not None and any(not 0 <= f < folds for f in run_folds):  # range(folds) is valid
        raise ValueError(f"only_folds must be fold numbers from 0 to {folds - 1}, got {list(only_folds)}")
    done, total = 0, len(run_folds) * len(candidates)

    def batch(rows):  # a fresh batch for each use: what a candidate derives from it (probabilities) goes with it
        return InputBatch(**{scores.source: rows})

    def uncalibrated_probabilities(rows: InputBatch) -> np.ndarray:
        return rows.probabilities

    layout = FoldLayout(source) if may_reorder(source) else None
    try:
        for fold in run_folds:
            train = assignment != fold
            y_train, y_test = y[train], y[~train]
            # views of the array laid out for this fold, or else the fold's only copies of its rows
            train_rows, test_rows = layout.fold(train) if layout is not None else (source[train], source[~train])
            reference = reference_model(batch(train_rows), y_train, test_rows, scores.source)  # made when needed
            reference_nll.append(held_out(test_rows, y_test, scores.source, reference)[0]["nll"])
            raw = held_out(test_rows, y_test, scores.source, uncalibrated_probabilities)[0]
            raw_brier, raw_accuracy = raw["brier"], raw["accuracy"]
            for metric, value in {**_fold_metrics(raw, raw_brier, raw_accuracy), "fit_seconds": 0.0}.items():
                uncalibrated[metric].append(value)
            for result in results:
                calibrator = result.candidate.create(input)
                start = time.perf_counter()
                try:
                    calibrator.fit_batch(batch(train_rows), y_train, warn=False)
                    measured, terms = held_out(test_rows, y_test, scores.source, calibrator.predict_batch, reference)
                    values = _fold_metrics(measured, raw_brier, raw_accuracy)
                    result.tail_risk.append(mean_tail_risk(terms, len(y_test)))
                    result.floored_labels += int(measured["floored_labels"])  # a count, in a dict of floats
                    del terms
                    result.converged &= calibrator.diagnostics_.converged
                    result.accuracy_preserving = calibrator.accuracy_preserving
                except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
                    values = {m: math.nan for m in METRICS}
                    result.error = f"fold {fold}: {exc}"
                del calibrator
                values["fit_seconds"] = time.perf_counter() - start
                for metric, value in values.items():
                    result.per_fold[metric].append(value)
                done += 1
                if progress is not None:
                    progress(done, total)
            del train_rows, test_rows, reference  # before the next fold's copies
            gc.collect()  # scipy's brentq leaves a reference cycle (its NaN guard) holding a fit's rows
    finally:
        if layout is not None:
            layout.restore()
    return Comparison(scores.n, scores.k, folds, seed, uncalibrated, results, reference_nll)
