"""The calibrator interface shared by every method, and its plain-data serialisation.

A calibrator is fitted on a labelled validation batch and maps new inputs of the same kind
(see ``calibration.inputs``) to probability vectors. Fitted state lives in attributes ending
in ``_``. ``to_dict()`` gives a JSON-safe dict (method, format version, options, parameters as
numbers and lists, fit diagnostics); ``from_dict()`` rebuilds a calibrator that predicts
bit-for-bit the same. Nothing is ever pickled.

Every prediction is floored (``calibration.probability_floor``): no served probability is exactly
0, each row still sums to 1 and keeps its argmax. A fit whose own rows needed the floor says so in
its diagnostics (``floored_rows``, ``zero_label_rows``: rows whose label got probability 0, which
make its unfloored NLL on the data it was fitted on infinite; and a ``warning``).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from .backend import from_host, namespace, to_host
from .inputs import InputBatch, check_labels, first_bad_row, validate_inputs
from .metrics.validated import row_blocks
from .options import INPUT_OPTION, Option, validate_options
from .probability_floor import EPSILON, clear_of_floor, fit_floor_counts, floor_probabilities
from .softmax import predicted_class

FORMAT_VERSION = 1
FLOOR_COUNT_ENTRIES = 1 << 16  # 512 KiB of float64 predictions at a time, to count a fit's floored rows


class ConvergenceWarning(UserWarning):
    """A solver stopped before meeting its convergence criterion (see ``diagnostics_``)."""


@dataclass
class FitDiagnostics:
    """How a fit ended: whether its solver met its criterion, after how many iterations; and, where
    the probability floor changed predictions on the fitted rows, how many and a warning (the
    three are left out of ``to_dict`` when it changed none)."""

    converged: bool
    iterations: int
    message: str
    gradient_norm: float | None = None
    objective: float | None = None
    seconds: float = 0.0
    floored_rows: int = 0
    zero_label_rows: int = 0
    warning: str | None = None

    def to_dict(self) -> dict:
        out = plain(asdict(self))
        for key in ("gradient_norm", "objective"):
            if out[key] is not None and not math.isfinite(out[key]):
                out[key] = None
        if not self.floored_rows:
            for key in ("floored_rows", "zero_label_rows", "warning"):
                del out[key]
        return out

    def note_floor(self, floored_rows: int, zero_label_rows: int) -> None:
        """Record that the floor changed ``floored_rows`` predictions of the fitted rows."""
        self.floored_rows, self.zero_label_rows = floored_rows, zero_label_rows
        if floored_rows:
            infinite = (f"; {zero_label_rows} of them gave the label probability 0, so the unfloored NLL "
                        "on these rows is infinite") if zero_label_rows else ""
            self.warning = (f"{floored_rows} of the fitted rows had a probability below the floor {EPSILON:.3g} "
                            f"(served floored){infinite}")


def plain(value):
    """``value`` with numpy scalars and arrays as Python numbers and lists (what JSON encoders
    take: orjson refuses ``numpy.float64`` although it subclasses ``float``)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Calibrator:
    """Base of all methods. Subclasses set ``method``, ``options_spec`` and implement
    ``_fit(scores, labels) -> FitDiagnostics``, ``_predict(scores) -> probabilities``,
    ``_params() -> dict`` and ``_set_params(dict)``."""

    method: ClassVar[str]
    description: ClassVar[str]
    options_spec: ClassVar[tuple[Option, ...]] = (INPUT_OPTION,)
    # the class's claim; a method made of others (auto, composition) sets its instances' own
    accuracy_preserving: bool = False

    def __init__(self, **options: Any):
        self.options = validate_options(self.method, self.options_spec, options)

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({given})"

    @property
    def input(self) -> str:
        return self.options["input"]

    # -- fitting and prediction -------------------------------------------------------------

    def fit(self, x, labels) -> Calibrator:
        """Fit on inputs ``x`` (of this calibrator's input kind) and integer ``labels``; ``x``
        may be any Array API array (see ``backend`` for which fits use its device)."""
        scores = validate_inputs(x, self.input)
        labels = check_labels(labels, scores.n, scores.k)
        scores = scores.in_float64() if self.fits_on_device() else scores.on_host()
        return self.fit_batch(scores, labels)

    def fits_on_device(self) -> bool:
        """Whether ``_fit`` evaluates its loss on a non-numpy batch's device (else the batch
        is copied to the host first)."""
        return False

    def fit_batch(self, scores: InputBatch, labels: np.ndarray, warn: bool = True) -> Calibrator:
        """Fit on an already validated batch (used by compositions, model selection and the
        service). ``warn=False`` leaves non-convergence to ``diagnostics_`` alone."""
        if scores.n < 2:
            raise ValueError(f"at least 2 samples are needed to fit {self.method}, got {scores.n}")
        start = time.perf_counter()
        diagnostics = self._fit(scores, labels)
        diagnostics.seconds = time.perf_counter() - start
        self.n_classes_ = scores.k
        self.n_samples_ = scores.n
        self.diagnostics_ = diagnostics
        diagnostics.note_floor(*self._floor_counts(scores, labels))
        if warn and not diagnostics.converged:
            warnings.warn(
                f"{self.method} did not converge: {diagnostics.message}",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _floor_counts(self, scores: InputBatch, labels: np.ndarray) -> tuple[int, int]:
        """``probability_floor.fit_floor_counts`` of the fitted rows' predictions, in row blocks of
        ``FLOOR_COUNT_ENTRIES`` entries (a fit holds no extra ``(n, k)`` matrix for it)."""
        rows, floored, zero = scores.given if scores.xp is np else getattr(scores, scores.source), 0, 0
        for block in row_blocks(scores.n, scores.k, FLOOR_COUNT_ENTRIES):
            with np.errstate(over="ignore", invalid="ignore"):
                probabilities = self._predict(InputBatch(**{scores.source: rows[block, ...]}))
            counts = fit_floor_counts(probabilities, labels[block])
            floored, zero = floored + counts[0], zero + counts[1]
        return floored, zero

    def predict_proba(self, x) -> np.ndarray:
        """Calibrated probabilities, shape ``(n, k)``, each row summing to 1: a numpy array
        for numpy input; for another Array API array, an array of its namespace on its device,
        computed in float64 and returned in its floating dtype (float64 for integer input). No
        entry is below ``probability_floor.EPSILON`` (in float64; see that module)."""
        scores = validate_inputs(x, self.input)
        if scores.xp is np:
            return self.predict_batch(scores)
        given = getattr(scores, scores.source).dtype
        return scores.xp.astype(self.predict_batch(scores.in_float64()), given)

    def predict_batch(self, scores: InputBatch, dtype=None) -> np.ndarray:
        """``dtype`` (numpy input): the answer cast to it, bit for bit the float64 answer's cast,
        which a method may write without a float64 copy (``_predict_as``)."""
        self._check_fitted()
        if scores.k != self.n_classes_:
            raise ValueError(
                f"this calibrator was fitted on {self.n_classes_} classes; the input has {scores.k}"
            )
        cast = dtype is not None and scores.xp is np
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below instead
            probabilities, final = self._predict_as(scores, dtype) if cast else (self._predict(scores), False)
        if final:
            return probabilities
        if scores.xp is np and clear_of_floor(probabilities):  # the common case, in two passes
            return probabilities.astype(dtype, copy=False) if cast else probabilities
        if not math.isfinite(float(scores.xp.sum(probabilities))):  # NaN and infinity both propagate
            host = to_host(probabilities)
            row = first_bad_row(~np.isfinite(host))
            raise ValueError(
                f"the calibrated probabilities of row {row} overflow: its inputs (largest magnitude "
                f"{np.abs(to_host(getattr(scores, scores.source))[row]).max():.3g}) are too large for "
                "this calibrator"
            )
        floored = floor_probabilities(probabilities)[0]
        return floored.astype(dtype, copy=False) if cast else floored

    def predict(self, x) -> np.ndarray:
        """Predicted classes: argmax of the calibrated probabilities, ties broken by the input
        ranking then the lowest index (see ``softmax.predicted_class``)."""
        scores = validate_inputs(x, self.input)
        return predicted_class(self.predict_batch(scores), getattr(scores, scores.source))

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_classes_"):
            raise ValueError(f"this {self.method} calibrator is not fitted yet")

    # -- readable parameters and serialisation --------------------------------------------

    def summary(self) -> dict:
        """The fitted parameters in readable form (by default, all of them)."""
        self._check_fitted()
        return self._params()

    def to_dict(self) -> dict:
        self._check_fitted()
        return {
            "method": self.method,
            "format_version": FORMAT_VERSION,
            "options": dict(self.options),
            "n_classes": self.n_classes_,
            "n_samples": self.n_samples_,
            "params": plain(self._params()),
            "diagnostics": self.diagnostics_.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Calibrator:
        if not isinstance(data, dict):
            raise ValueError("a stored calibrator must be a dict")
        if data.get("method") != cls.method:
            raise ValueError(f"expected method {cls.method!r}, got {data.get('method')!r}")
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"unsupported format_version {data.get('format_version')!r} "
                f"(this library reads version {FORMAT_VERSION})"
            )
        try:
            calibrator = cls(**data["options"])
            calibrator.n_classes_ = int(data["n_classes"])
            calibrator.n_samples_ = int(data["n_samples"])
            calibrator._set_params(data["params"])
            calibrator.diagnostics_ = FitDiagnostics(**data["diagnostics"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed stored {cls.method} calibrator: {exc}") from exc
        return calibrator

    def _params(self) -> dict:
        raise NotImplementedError

    def _set_params(self, params: dict) -> None:
        raise NotImplementedError

    def _fit(self, scores: InputBatch, labels: np.ndarray) -> FitDiagnostics:
        raise NotImplementedError

    def _predict_as(self, scores: InputBatch, dtype) -> tuple[np.ndarray, bool]:
        """``(probabilities, final)``: final ones already in ``dtype`` and clear of the floor, or float64."""
        return self._predict(scores), False

    def _predict(self, scores: InputBatch) -> np.ndarray:
        raise NotImplementedError


def param_array(params: dict, key: str, shape: tuple[int, ...]) -> np.ndarray:
    """A stored parameter as a float64 array of the expected shape, finite."""
    try:
        value = np.asarray(params[key], dtype=np.float64)
    except KeyError as exc:
        raise ValueError(f"stored parameters lack {key!r}") from exc
    except (TypeError, ValueError) as exc:
        raise ValueError(f"stored parameter {key!r} is not an array of numbers") from exc
    if value.shape != shape:
        raise ValueError(f"stored parameter {key!r} has shape {value.shape}, expected {shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"stored parameter {key!r} is not finite")
    return value


def param_float(params: dict, key: str, positive: bool = False) -> float:
    value = param_array(params, key, ())
    if positive and not value > 0:
        raise ValueError(f"stored parameter {key!r} must be positive")
    return float(value)


def normalise_rows(values):
    """Rows divided by their sums; a row summing to 0 becomes uniform."""
    xp = namespace(values)
    sums = xp.sum(values, axis=1, keepdims=True)
    empty = sums <= 0
    if bool(xp.any(empty)):
        values = xp.where(empty, xp.ones_like(values), values)
        sums = xp.sum(values, axis=1, keepdims=True)
    return values / sums


def on_device(values: np.ndarray, scores: InputBatch):
    """Fitted parameters (host numpy) as arrays next to ``scores``: same namespace, device and
    floating dtype."""
    return values if scores.xp is np else from_host(values, getattr(scores, scores.source))
