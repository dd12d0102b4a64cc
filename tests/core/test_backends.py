"""Parity of the array backends: every calibrator and metric on numpy, on torch (CPU, float64
and float32) and on array-api-strict (float64 and float32) gives the same results, to 1e-10 in
float64 and 1e-5 in float32, answers in the caller's namespace, device and dtype, and fits
parameters that serialise the same whatever the backend. numpy itself never imports torch.

torch is an optional extra: without it these tests skip, except in CI (CI=true), where the
extra is installed and its absence fails them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import calibration as cal
from calibration.backend import device, namespace, to_host
from tests.helpers import REPO, load_split, require


def _torch(dtype_name):
    def convert(a):
        torch = require("torch")
        dtype = getattr(torch, dtype_name) if a.dtype.kind == "f" else torch.int64
        return torch.asarray(a, dtype=dtype)
    return convert


def _strict(dtype_name):
    def convert(a):
        xs = require("array_api_strict")
        return xs.asarray(a, dtype=getattr(xs, dtype_name) if a.dtype.kind == "f" else xs.int64)
    return convert


# (name, convert a host array, tolerance)
BACKENDS = [
    ("torch-float64", _torch("float64"), 1e-10),
    ("torch-float32", _torch("float32"), 1e-5),
    ("strict-float64", _strict("float64"), 1e-10),
    ("strict-float32", _strict("float32"), 1e-5),
]
IDS = [name for name, _, _ in BACKENDS]

# isotonic maps can be steep (scikit-learn's knots, 1e-15 apart): an ulp of difference between two
# libraries' exp() would move them by more than 1e-10, so they read numpy's softmax of the logits
# on every backend (isotonic.map_scores); they are checked on logits and on probability inputs
METHODS = [
    ("temperature", {}),
    ("temperature", {"objective": "brier"}),
    ("expectation_consistency", {}),
    ("expectation_consistency", {"top_n": 2}),
    ("ensemble_temperature", {}),
    ("ensemble_temperature", {"loss": "nll"}),
    ("vector", {}),
    ("matrix", {"off_diagonal_l2": 1e-2, "bias_l2": 1e-2}),
    ("dirichlet", {"off_diagonal_l2": 1e-3, "bias_l2": 1e-3}),
    ("platt", {}),
    ("class_temperature", {}),
    ("online_temperature", {}),
    ("isotonic_multiclass", {}),
    ("isotonic_one_vs_all", {}),
    ("isotonic_multiclass", {"input": "probabilities"}),
    ("isotonic_one_vs_all", {"input": "probabilities"}),
    ("histogram_binning", {}),
    ("composition", {"steps": [{"method": "temperature"}, {"method": "histogram_binning"}]}),
    ("auto", {"candidates": ["temperature", "vector"], "folds": 2}),
]
METRICS = ["ece", "mce", "adaptive_ece", "classwise_ece", "kde_ece", "brier", "nll", "accuracy",
           "mean_confidence", "top_n_accuracy", "expectation_consistency_gap"]


@pytest.fixture(scope="module")
def data():
    _, logits, labels = load_split("cifar10_resnet50_cross_entropy", "val")
    return logits[:2000].astype(np.float64), labels[:2000]


def _inputs(logits: np.ndarray, options: dict, name: str) -> np.ndarray:
    x = cal.softmax(logits) if options.get("input") == "probabilities" else logits
    # float32 backends get float32 inputs; their numpy reference is the same values in float64
    return x.astype(np.float32).astype(np.float64) if name.endswith("float32") else x


def _same_numbers(a, b, rtol: float, where: str = "") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            if key not in ("seconds", "fit_seconds"):
                _same_numbers(a[key], b[key], rtol, f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_numbers(x, y, rtol, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=rtol, abs=rtol), where
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def numpy_fits():
    """The numpy reference fit and its probabilities, by (method, options, float32-rounded input):
    torch and array-api-strict at one precision compare with the same one."""
    return {}


@pytest.mark.parametrize(("name", "convert", "tolerance"), BACKENDS, ids=IDS)
@pytest.mark.parametrize(("method", "options"), METHODS,
                         ids=[f"{m}{'-' if o else ''}{'-'.join(map(str, o.values()))}"[:60] for m, o in METHODS])
def test_calibrators_agree_across_backends(data, numpy_fits, name, convert, tolerance, method, options):
    logits, labels = data
    x = _inputs(logits, options, name)
    key = (method, json.dumps(options, sort_keys=True), name.endswith("float32"))
    if key not in numpy_fits:
        fitted = cal.create(method, options).fit(x, labels)
        numpy_fits[key] = fitted, fitted.predict_proba(x)
    reference, expected = numpy_fits[key]
    on_backend = convert(x)
    fitted = cal.create(method, options).fit(on_backend, convert(labels))
    # fits run in float64 (on the device or on a host copy): the same parameters, stored alike
    stored = json.loads(json.dumps(fitted.to_dict()))
    _same_numbers(reference.to_dict()["params"], stored["params"], 1e-10, method)
    assert stored.keys() == reference.to_dict().keys() and stored["options"] == reference.to_dict()["options"]
    # predictions come back in the caller's namespace, device and dtype, equal to numpy's
    predicted = reference.predict_proba(on_backend)
    assert namespace(predicted) is namespace(on_backend)
    assert predicted.dtype == on_backend.dtype and device(predicted) == device(on_backend)
    np.testing.assert_allclose(to_host(predicted), expected, rtol=0, atol=tolerance)
    # a calibrator fitted on the backend serves numpy input, and back
    np.testing.assert_allclose(cal.from_dict(stored).predict_proba(x), expected, rtol=0, atol=1e-10)
    classes = reference.predict(on_backend)
    assert np.array_equal(to_host(classes), reference.predict(x))


@pytest.mark.parametrize(("name", "convert", "tolerance"), BACKENDS, ids=IDS)
def test_metrics_agree_across_backends(data, name, convert, tolerance):
    logits, labels = data
    raw = cal.softmax(logits)
    if name.endswith("float32"):
        raw = raw.astype(np.float32).astype(np.float64)
    calibrated = cal.create("temperature").fit(logits, labels).predict_proba(logits)
    on_backend, backend_labels = convert(raw), convert(labels)
    for metric in METRICS:
        assert getattr(cal, metric)(on_backend, backend_labels) == pytest.approx(
            getattr(cal, metric)(raw, labels), rel=tolerance, abs=tolerance), metric
    gain = cal.calibration_gain(on_backend, convert(calibrated), backend_labels)
    assert gain == pytest.approx(cal.calibration_gain(raw, calibrated, labels), abs=tolerance)
    # binary: (n,) probabilities of class 1, whose KDE-ECE is not top-label
    positive, binary_labels = raw[:, 1] / (raw[:, 0] + raw[:, 1]), (labels == 1).astype(np.int64)
    for metric in ("kde_ece", "ece", "brier", "nll"):
        assert getattr(cal, metric)(convert(positive), convert(binary_labels)) == pytest.approx(
            getattr(cal, metric)(positive, binary_labels), rel=tolerance, abs=tolerance), metric
    diagram = cal.reliability_diagram(on_backend, backend_labels)
    expected = cal.reliability_diagram(raw, labels)
    np.testing.assert_array_equal(diagram.count, expected.count)
    np.testing.assert_allclose(diagram.accuracy, expected.accuracy, atol=tolerance)


@pytest.mark.parametrize(("name", "convert", "tolerance"), BACKENDS[:1], ids=IDS[:1])
def test_bad_input_on_a_backend_gets_the_same_errors(data, name, convert, tolerance):
    logits, labels = data
    fitted = cal.create("temperature").fit(logits, labels)
    broken = logits[:5].copy()
    broken[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"logits contains NaN or infinity \(first in row 3\)"):
        fitted.predict_proba(convert(broken))
    with pytest.raises(ValueError, match="fitted on 10 classes; the input has 3"):
        fitted.predict_proba(convert(logits[:, :3]))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 10\); found 12 in row 0"):
        cal.create("temperature").fit(convert(logits[:4]), convert(np.array([12, 0, 1, 2])))
    with pytest.raises(ValueError, match="row 1 sums to"):
        cal.ece(convert(np.array([[0.5, 0.5], [0.9, 0.9]])), convert(np.array([0, 1])))


def test_the_numpy_path_never_imports_torch_or_array_api_compat():
    code = """
import sys

class BlockTorch:  # as if torch were not installed: any import of it raises ImportError
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked")

sys.meta_path.insert(0, BlockTorch())
import numpy as np
import calibration as cal
from app.main import create_app
from app.settings import Settings
logits = np.random.default_rng(0).standard_normal((200, 4)) * 3
labels = logits.argmax(axis=1)
labels[:40] = 0
for method in cal.METHODS:
    options = {"steps": [{"method": "temperature"}]} if method == "composition" else {}
    if method == "auto":
        options = {"folds": 2}
    x, y = (logits[:, :2], (labels == 0).astype(int)) if method == "online_platt" else (logits, labels)
    cal.create(method, options).fit(x, y).predict_proba(x)
p = cal.softmax(logits)
[getattr(cal, m)(p, labels) for m in ("ece", "classwise_ece", "kde_ece", "brier", "nll")]
create_app(Settings(database_url="sqlite://"))
loaded = [m for m in ("torch", "array_api_compat", "array_api_strict") if sys.modules.get(m) is not None]
print("loaded:", loaded)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded: []"
