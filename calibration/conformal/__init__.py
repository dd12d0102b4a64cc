"""Conformal prediction sets for classifiers: conformity scores (LAC, APS, RAPS), split-conformal set
predictors (marginal and class-conditional), online sets under shift (ACI, DtACI) and an anytime-valid
coverage alarm. numpy and scipy only."""

from .adaptive import AdaptiveConformal, DtACI, OnlineRecord
from .alarm import CoverageAlarm
from .scores import SCORES, all_scores, conformal_quantile, label_scores, quantile_rank
from .split import SET_OPTIONS, SetPredictor, coverage_and_size

__all__ = [
    "SCORES",
    "SET_OPTIONS",
    "AdaptiveConformal",
    "CoverageAlarm",
    "DtACI",
    "OnlineRecord",
    "SetPredictor",
    "all_scores",
    "conformal_quantile",
    "coverage_and_size",
    "label_scores",
    "quantile_rank",
]
