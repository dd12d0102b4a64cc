"""Temperature scaling and expectation consistency on real CIFAR model outputs."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import calibration as cal
from calibration.inputs import validate_inputs
from tests.helpers import DATASETS, load_split

# T* of ../shared/data/README.md (bounded Brent on validation NLL, 4 decimals)
README_T = {
    "cifar10_resnet50_cross_entropy": 2.4975,
    "cifar10_resnet50_focal_loss": 1.0626,
    "cifar10_lenet5": 1.4079,
    "cifar10_wrn16-4": 2.0658,
    "cifar100_lenet5": 1.1300,
    "cifar100_wrn16-4": 1.1233,
    "cifar100_densenet-bc-100": 2.1167,
}


def brute_force_temperature(logits, labels):
    def nll(t):
        return cal.nll(cal.softmax(logits / t), labels)

    return minimize_scalar(nll, bounds=(0.05, 20), method="bounded", options={"xatol": 1e-11}).x


@pytest.mark.parametrize("name", DATASETS)
def test_temperature_matches_brute_force_and_readme(name):
    kind, x, labels = load_split(name, "val")
    ts = cal.TemperatureScaling(input=kind).fit(x, labels)
    logits = validate_inputs(x, kind).logits
    assert ts.temperature_ == pytest.approx(brute_force_temperature(logits, labels), rel=1e-6)
    assert ts.temperature_ == pytest.approx(README_T[name], abs=5e-5)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("method", ["temperature", "expectation_consistency"])
def test_fitted_on_validation_improves_test_nll_and_ece(name, method):
    kind, x_val, y_val = load_split(name, "val")
    _, x_test, y_test = load_split(name, "test")
    calibrator = cal.create(method, {"input": kind}).fit(x_val, y_val)
    raw = validate_inputs(x_test, kind).probabilities
    calibrated = calibrator.predict_proba(x_test)
    # every set in the README table improves its test ECE after T*; so must test NLL
    assert cal.nll(calibrated, y_test) < cal.nll(raw, y_test)
    assert cal.ece(calibrated, y_test) < cal.ece(raw, y_test)
    np.testing.assert_array_equal(calibrator.predict(x_test), raw.argmax(axis=1))
