"""Post-hoc calibration of classifier outputs: calibrators, metrics and reliability diagrams.

Imports numpy and scipy only. Every calibrator follows ``calibration.base.Calibrator``:
``fit(x, labels)``, ``predict_proba(x)``, ``to_dict()`` / ``from_dict()``.

Monitoring a served calibrator: ``DriftTest`` (the betting e-process of ``calibration.monitoring``,
fed ``top_label_residuals`` and ``class_residuals``; ``DRIFT_TEST_OPTIONS`` its options), the
label-free test (``label_free_test``, ``LabelFreeReference``, ``label_free_residuals``,
``label_free_rows_needed``: ``calibration.label_free``), its power by simulation
(``detection_power`` of a ``PowerShift``: ``calibration.power``), label-shift estimates
(``em_priors``, Saerens et al. 2002; ``bbse_priors``, Lipton et al. 2018; ``adjust_priors``:
``calibration.label_shift``), the prior-shift test after bias-corrected temperature scaling
(``bcts_fit``, ``prior_shift_test``: ``calibration.prior_shift``) and the quality-over-time figure
(``quality_figure``: ``calibration.quality_plot``).
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
from .label_free import LabelFreeReference, label_free_test
from .label_free import residuals as label_free_residuals
from .label_free import rows_needed as label_free_rows_needed
from .label_shift import adjust_priors, bbse_priors, em_priors
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
    ece_of_outcomes,
    mce,
    reliability_diagram,
    top_label_outcomes,
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
from .monitoring import OPTIONS as DRIFT_TEST_OPTIONS
from .monitoring import DriftTest, class_residuals, top_label_residuals
from .online import OnlinePlattScaling, TrackingCalibeater
from .power import Shift as PowerShift
from .power import power as detection_power
from .prior_shift import bcts_fit
from .prior_shift import prior_shift as prior_shift_test
from .quality_plot import quality_figure
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
    "DRIFT_TEST_OPTIONS",
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
    "DriftTest",
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
    "LabelFreeReference",
    "MatrixScaling",
    "MethodResult",
    "OnlinePlattScaling",
    "PlattScaling",
    "PowerShift",
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
    "adjust_priors",
    "allow_reordering",
    "bbse_priors",
    "bcts_fit",
    "bootstrap_interval",
    "brier",
    "calibration_gain",
    "candidate",
    "check_labels",
    "class_residuals",
    "classwise_ece",
    "compare",
    "compare_losses",
    "conformal_quantile",
    "coverage_and_size",
    "create",
    "default_candidates",
    "describe_methods",
    "detection_power",
    "difference_cs",
    "ece",
    "ece_interval",
    "ece_interval_from_bins",
    "ece_of_outcomes",
    "em_priors",
    "empirical_bernstein_cs",
    "expectation_consistency_gap",
    "first_crossing",
    "from_dict",
    "json_safe",
    "kde_ece",
    "label_free_residuals",
    "label_free_rows_needed",
    "label_free_test",
    "legend_label",
    "log_softmax",
    "looks_like_probabilities",
    "mce",
    "mean_confidence",
    "method_class",
    "nll",
    "predicted_class",
    "prepare_comparison",
    "prior_shift_test",
    "quality_figure",
    "quantile_rank",
    "reliability_diagram",
    "reliability_figure",
    "row_blocks",
    "select",
    "softmax",
    "to_host",
    "top_label_outcomes",
    "top_label_residuals",
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
