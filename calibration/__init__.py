"""Post-hoc calibration of classifier outputs: calibrators, metrics and reliability diagrams.

Imports numpy and scipy only. Every calibrator follows ``calibration.base.Calibrator``:
``fit(x, labels)``, ``predict_proba(x)``, ``to_dict()`` / ``from_dict()``.
"""

from .backend import to_host
from .base import Calibrator, ConvergenceWarning, FitDiagnostics
from .candidates import candidate, default_candidates
from .comparison import Comparison, MethodResult, compare, prepare_comparison
from .conformal import (
    SCORES as CONFORMAL_SCORES,
)
from .conformal import (
    AdaptiveConformal,
    CoverageAlarm,
    DtACI,
    SetPredictor,
    conformal_quantile,
    coverage_and_size,
    quantile_rank,
)
from .inputs import (
    INPUT_KINDS,
    PROBABILITY_FLOOR,
    InputBatch,
    InputKind,
    allow_reordering,
    check_labels,
    looks_like_probabilities,
    validate_inputs,
)
from .json_values import json_safe
from .methods import (
    AutoCalibrator,
    ClassTemperatureScaling,
    Composition,
    DirichletCalibration,
    EnsembleTemperatureScaling,
    ExpectationConsistency,
    HistogramBinning,
    IsotonicMulticlass,
    IsotonicOneVsAll,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
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
from .metrics.validated import ValidatedMetrics, row_blocks
from .online import OnlinePlattScaling, TrackingCalibeater
from .registry import METHODS, create, describe_methods, from_dict, method_class
from .reliability import (
    SERIES_COLOURS,
    WEAK_COUNT,
    WEAK_OPACITY,
    ReliabilityBins,
    ece_interval,
    ece_interval_from_bins,
    legend_label,
    wilson_interval,
)
from .selection import Selection, select
from .sequential import compare_losses, difference_cs, empirical_bernstein_cs, first_crossing
from .softmax import log_softmax, predicted_class, softmax

__all__ = [
    "CONFORMAL_SCORES",
    "INPUT_KINDS",
    "METHODS",
    "PROBABILITY_FLOOR",
    "SERIES_COLOURS",
    "WEAK_COUNT",
    "WEAK_OPACITY",
    "AdaptiveConformal",
    "AutoCalibrator",
    "Calibrator",
    "ClassTemperatureScaling",
    "Comparison",
    "Composition",
    "ConvergenceWarning",
    "CoverageAlarm",
    "DirichletCalibration",
    "DtACI",
    "EnsembleTemperatureScaling",
    "ExpectationConsistency",
    "FitDiagnostics",
    "HistogramBinning",
    "InputBatch",
    "InputKind",
    "Interval",
    "IsotonicMulticlass",
    "IsotonicOneVsAll",
    "MatrixScaling",
    "MethodResult",
    "OnlinePlattScaling",
    "PlattScaling",
    "ReliabilityBins",
    "ReliabilityDiagram",
    "Selection",
    "SetPredictor",
    "TemperatureScaling",
    "TrackingCalibeater",
    "ValidatedMetrics",
    "VectorScaling",
    "accuracy",
    "adaptive_ece",
    "allow_reordering",
    "bootstrap_interval",
    "brier",
    "calibration_gain",
    "candidate",
    "check_labels",
    "classwise_ece",
    "compare",
    "compare_losses",
    "conformal_quantile",
    "coverage_and_size",
    "create",
    "default_candidates",
    "describe_methods",
    "difference_cs",
    "ece",
    "ece_interval",
    "ece_interval_from_bins",
    "empirical_bernstein_cs",
    "expectation_consistency_gap",
    "first_crossing",
    "from_dict",
    "json_safe",
    "kde_ece",
    "legend_label",
    "log_softmax",
    "looks_like_probabilities",
    "mce",
    "mean_confidence",
    "method_class",
    "nll",
    "predicted_class",
    "prepare_comparison",
    "quantile_rank",
    "reliability_diagram",
    "reliability_figure",
    "row_blocks",
    "select",
    "softmax",
    "to_host",
    "top_n_accuracy",
    "validate_inputs",
    "wilson_interval",
]


def __getattr__(name: str):
    """``reliability_figure`` (``calibration.plot``) is imported on first use: it needs
    matplotlib, the optional ``plot`` extra."""
    if name == "reliability_figure":
        from .plot import reliability_figure

        return reliability_figure
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
