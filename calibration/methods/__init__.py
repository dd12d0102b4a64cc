"""One module per calibration method (or per family sharing one model), each class registered
with ``calibration.registry`` here, in the order ``/v1/methods`` and the docs list them."""

from ..registry import register
from .auto import AutoCalibrator
from .class_temperature import ClassTemperatureScaling
from .composition import Composition
from .ensemble_temperature import EnsembleTemperatureScaling
from .expectation_consistency import ExpectationConsistency
from .histogram_binning import HistogramBinning
from .isotonic import IsotonicMulticlass, IsotonicOneVsAll
from .linear import DirichletCalibration, MatrixScaling, VectorScaling
from .online_platt import OnlinePlattCalibrator
from .online_temperature import OnlineTemperatureCalibrator
from .platt import PlattScaling
from .temperature import TemperatureScaling

for _method in (
    TemperatureScaling,
    ExpectationConsistency,
    EnsembleTemperatureScaling,
    VectorScaling,
    MatrixScaling,
    DirichletCalibration,
    PlattScaling,
    OnlinePlattCalibrator,
    OnlineTemperatureCalibrator,
    ClassTemperatureScaling,
    IsotonicMulticlass,
    IsotonicOneVsAll,
    HistogramBinning,
    Composition,
    AutoCalibrator,
):
    register(_method)

__all__ = [
    "AutoCalibrator",
    "ClassTemperatureScaling",
    "Composition",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "ExpectationConsistency",
    "HistogramBinning",
    "IsotonicMulticlass",
    "IsotonicOneVsAll",
    "MatrixScaling",
    "OnlinePlattCalibrator",
    "OnlineTemperatureCalibrator",
    "PlattScaling",
    "TemperatureScaling",
    "VectorScaling",
]
