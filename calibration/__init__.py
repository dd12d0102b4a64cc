"""Post-hoc calibration of classifier outputs: calibrators, metrics and reliability diagrams.

Imports numpy and scipy only. Every calibrator follows ``calibration.base.Calibrator``:
``fit(x, labels)``, ``predict_proba(x)``, ``to_dict()`` / ``from_dict()``.
"""

from .base import Calibrator, ConvergenceWarning, FitDiagnostics
from .inputs import INPUT_KINDS, PROBABILITY_FLOOR, Scores, to_scores
from .methods.class_temperature import ClassTemperatureScaling
from .methods.composition import Composition
from .methods.ensemble_temperature import EnsembleTemperatureScaling
from .methods.expectation_consistency import ExpectationConsistency
from .methods.histogram_binning import HistogramBinning
from .methods.isotonic import IsotonicMulticlass, IsotonicOneVsAll
from .methods.linear import DirichletCalibration, MatrixScaling, VectorScaling
from .methods.platt import PlattScaling
from .methods.temperature import TemperatureScaling
from .metrics.binned import (
    ReliabilityDiagram,
    adaptive_ece,
    classwise_ece,
    ece,
    mce,
    reliability_diagram,
)
from .metrics.bootstrap import Interval, bootstrap_interval
from .metrics.kde import kde_ece
from .metrics.scores import (
    accuracy,
    brier,
    calibration_gain,
    expectation_consistency_gap,
    mean_confidence,
    nll,
    top_n_accuracy,
)
from .registry import METHODS, create, describe_methods, from_dict, method_class
from .selection import Comparison, Selection, compare, default_candidates, select
from .softmax import log_softmax, predicted_class, softmax

__all__ = [
    "INPUT_KINDS",
    "METHODS",
    "PROBABILITY_FLOOR",
    "Calibrator",
    "ClassTemperatureScaling",
    "Comparison",
    "Composition",
    "ConvergenceWarning",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "ExpectationConsistency",
    "FitDiagnostics",
    "HistogramBinning",
    "Interval",
    "IsotonicMulticlass",
    "IsotonicOneVsAll",
    "MatrixScaling",
    "PlattScaling",
    "ReliabilityDiagram",
    "Scores",
    "Selection",
    "TemperatureScaling",
    "VectorScaling",
    "accuracy",
    "adaptive_ece",
    "bootstrap_interval",
    "brier",
    "calibration_gain",
    "classwise_ece",
    "compare",
    "create",
    "default_candidates",
    "describe_methods",
    "ece",
    "expectation_consistency_gap",
    "from_dict",
    "kde_ece",
    "log_softmax",
    "mce",
    "mean_confidence",
    "method_class",
    "nll",
    "predicted_class",
    "reliability_diagram",
    "select",
    "softmax",
    "to_scores",
    "top_n_accuracy",
]
